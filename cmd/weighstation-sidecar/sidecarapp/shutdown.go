package sidecarapp

import (
	"time"

	"github.com/go-logr/logr"

	"github.com/weighstation/weighstation/sidecar"
)

// defaultDrainGrace is how long a stopping sidecar delivers what it holds.
// Kubernetes sends SIGTERM to the application and the sidecar at once and
// kills both after terminationGracePeriodSeconds (30 s by default). At the
// default limits a Subscription's queue holds 1,000 messages, which an
// application that reads at all empties in well under a second; 5 s covers
// a slow reader and a few queues, leaves most of the 30 s to the
// application's own shutdown, and ends the sidecar long before the kill,
// so that its summary is logged.
const defaultDrainGrace = 5 * time.Second

// defaultFinalReportTimeout bounds the wait for the operator to
// acknowledge the last report, after the drain: one round trip to the
// operator normally, and 7 s with the drain's 5 s, still far from the
// kill.
const defaultFinalReportTimeout = 2 * time.Second

// logShutdown logs what the drain did: one line, so that a pod's last words
// say whether anything was lost to its termination.
func logShutdown(log logr.Logger, sum sidecar.ShutdownSummary) {
	kv := []any{"drained", sum.Drained, "waited", sum.Waited.Round(time.Millisecond).String(),
		"delivered", sum.Delivered, "undelivered", sum.Undelivered}
	if sum.Undelivered > 0 {
		kv = append(kv, "undeliveredReason", "shutdown")
	}
	if sum.FlushErr != nil {
		log.Error(sum.FlushErr, "stopped; the broker may lack publishes of the last moments", append(kv, "unflushedBytes", sum.UnflushedBytes)...)
		return
	}
	log.Info("stopped", kv...)
}
