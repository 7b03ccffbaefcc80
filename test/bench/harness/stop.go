package benchharness

import (
	"fmt"
	"net"
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

// AcceptWithin accepts one connection on ln, waiting at most timeout; past
// it, ln is closed and the error says what of (who, its last log lines in
// tail).
func AcceptWithin(ln net.Listener, timeout time.Duration, who string, tail func() string) (net.Conn, error) {
	type accepted struct {
		c   net.Conn
		err error
	}
	got := make(chan accepted, 1)
	go func() {
		c, err := ln.Accept()
		got <- accepted{c, err}
	}()
	select {
	case a := <-got:
		return a.c, a.err
	case <-time.After(timeout):
		ln.Close()
		return nil, fmt.Errorf("%s did not connect within %s:\n%s", who, timeout, tail())
	}
}
