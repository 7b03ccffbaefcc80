package benchharness

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// LoggedProc is one process of a bench whose output goes to a file rather
// than memory (the operator logs every pod's configuration change: at
// thousands of pods that is too much to keep in memory), in its own
// process group, so that a ^C to the bench reaches the bench, which stops
// it in order.
type LoggedProc struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	logFile *os.File
	exited  chan struct{}
}

// StartLogged runs bin with args as a named process, its stdout and stderr
// in the file logPath.
func StartLogged(name, logPath, bin string, args ...string) (*LoggedProc, error) {
	return StartLoggedEnv(name, logPath, nil, bin, args...)
}

// StartLoggedEnv is StartLogged with env ("KEY=value") added to the
// bench's environment.
func StartLoggedEnv(name, logPath string, env []string, bin string, args ...string) (*LoggedProc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &LoggedProc{Name: name, LogPath: logPath, cmd: exec.Command(bin, args...), logFile: f, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if len(env) > 0 {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	return p, nil
}

// Pid is the process id.
func (p *LoggedProc) Pid() int { return p.cmd.Process.Pid }

// Alive returns an error, with the end of its log, once the process exited.
func (p *LoggedProc) Alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited:\n%s", p.Name, p.Tail(30))
	default:
		return nil
	}
}

// Tail is the last lines of the process's log (of its last MiB).
func (p *LoggedProc) Tail(lines int) string {
	b, _ := os.ReadFile(p.LogPath)
	if len(b) > 1<<20 {
		b = b[len(b)-1<<20:]
	}
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// Stop sends SIGTERM and waits up to 15 s, then kills.
func (p *LoggedProc) Stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	SignalAndWait(p.cmd.Process, syscall.SIGTERM, p.exited, 15*time.Second)
}

// CPU is the process's CPU time so far, utime + stime (10 ms ticks).
func (p *LoggedProc) CPU() (time.Duration, error) { return ProcessCPU(p.Pid()) }

// PeakRSS is VmHWM, RSS VmRSS, in bytes.
func (p *LoggedProc) PeakRSS() (int64, error) { return ProcessStatusBytes(p.Pid(), "VmHWM:") }
func (p *LoggedProc) RSS() (int64, error)     { return ProcessStatusBytes(p.Pid(), "VmRSS:") }
