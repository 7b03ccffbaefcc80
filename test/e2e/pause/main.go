// Command pause is the end-to-end tests' stand-in for the pod sandbox's
// pause container: `make image-oci-e2e` packs it, static, as
// registry.k8s.io/pause:3.10, so that a node whose runtime can reach no
// registry still has the sandbox image its pods need. It sleeps until
// SIGTERM or SIGINT, then exits 0. As the first process of its PID
// namespace it would ignore the signals it has no handler for; it reaps
// nothing (the pods share no PID namespace).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

// Ready is what pause writes to stderr once it handles the signals: the
// Go runtime installs a handler for every signal at start, so /proc's
// SigCgt mask says nothing of whether signal.Notify ran yet, and a SIGTERM
// before it kills the process instead of ending it with status 0.
const Ready = "pause: waiting for SIGTERM or SIGINT\n"

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	_, _ = os.Stderr.WriteString(Ready)
	<-stop
}
