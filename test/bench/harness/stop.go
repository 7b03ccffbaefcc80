package benchharness

import (
	"os"
	"os/exec"
	"time"
)

// SignalAndWait sends sig to p and waits up to grace for done (p's exit
// as its waiter reports it), then kills p and waits.
func SignalAndWait[T any](p *os.Process, sig os.Signal, done <-chan T, grace time.Duration) {
	_ = p.Signal(sig)
	select {
	case <-done:
	case <-time.After(grace):
		_ = p.Kill()
		<-done
	}
}

// StopCommand is SignalAndWait for a started cmd that nothing waits on
// yet.
func StopCommand(cmd *exec.Cmd, sig os.Signal, grace time.Duration) {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	SignalAndWait(cmd.Process, sig, done, grace)
}
