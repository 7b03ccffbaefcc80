// Package proctest runs a command under test as a process of its own: its
// output collected, stopped with SIGTERM as Kubernetes stops a container,
// and killed if the test ends first. The commands' tests (weighstation's
// and the sidecar's) share it.
package proctest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Process is a started command.
type Process struct {
	Cmd    *exec.Cmd
	logs   *LockedBuffer
	exited chan error
}

// Start starts cmd with its stdout and stderr collected, and kills it when
// the test ends if it is still running.
func Start(t testing.TB, cmd *exec.Cmd) *Process {
	t.Helper()
	p := &Process{Cmd: cmd, logs: &LockedBuffer{}, exited: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	return p
}

// Logs is what the process wrote so far.
func (p *Process) Logs() string { return p.logs.String() }

// Exited delivers the process's exit error once, when it exits.
func (p *Process) Exited() <-chan error { return p.exited }

// StopAndWait sends SIGTERM and returns everything the process wrote and
// its exit error; it fails the test if the process is still running after
// within.
func (p *Process) StopAndWait(t testing.TB, within time.Duration) (string, error) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		return p.logs.String(), err
	case <-time.After(within):
		t.Fatalf("%s did not stop within %s of SIGTERM:\n%s", filepath.Base(p.Cmd.Path), within, p.logs)
		return "", nil
	}
}

// LockedBuffer collects a child process's output from two pipes at once.
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TokenFile writes a broker token for a test and returns its path.
func TokenFile(t testing.TB, token string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
