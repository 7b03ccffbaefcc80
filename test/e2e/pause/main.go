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

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
