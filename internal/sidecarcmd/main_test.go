package sidecarcmd

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// runEnv, set in a child's environment, makes the test binary the sidecar:
// the tests run Run in processes of its own (it reads signals and exits),
// built with the test's flags (-race included), without building a binary.
const runEnv = "SIDECARCMD_TEST_RUN"

func TestMain(m *testing.M) {
	if os.Getenv(runEnv) != "" {
		// As cmd/weighstation-sidecar's main.
		if err := Run(os.Args[1:]); err != nil {
			fmt.Fprintf(os.Stderr, "weighstation-sidecar: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// command is the sidecar with args, as a process.
func command(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runEnv+"=1")
	return cmd
}

// tokenFile writes a broker token for a test.
func tokenFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// running is the sidecar, started by run with args; stopAndWait sends it
// SIGTERM and returns everything it logged and its exit error.
type running struct {
	cmd    *exec.Cmd
	logs   *lockedBuffer
	exited chan error
}

func run(t *testing.T, args ...string) *running {
	t.Helper()
	r := &running{cmd: command(args...), logs: &lockedBuffer{}, exited: make(chan error, 1)}
	r.cmd.Stdout, r.cmd.Stderr = r.logs, r.logs
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.exited <- r.cmd.Wait() }()
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			_ = r.cmd.Process.Kill()
		}
	})
	return r
}

func (r *running) stopAndWait(t *testing.T) (string, error) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-r.exited:
		return r.logs.String(), err
	case <-time.After(30 * time.Second):
		t.Fatalf("the sidecar did not stop within 30s of SIGTERM:\n%s", r.logs)
		return "", nil
	}
}

// eventually polls check every 100 ms until it returns nil, and fails the
// test with its last error after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not true after %s: %v", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// lockedBuffer collects a child process's output from two pipes at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
