// Package poll waits for a condition, with a timeout: what a test or a
// bench does instead of sleeping for something to have happened. It
// imports nothing from Kubernetes, so the sidecar's tests use it too.
package poll

import (
	"fmt"
	"time"
)

// Until calls check at once and then every interval until it returns nil,
// and returns nil; after timeout it returns check's last error, saying so.
func Until(timeout, interval time.Duration, check func() error) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-deadline.C:
			return fmt.Errorf("still not true after %s: %w", timeout, err)
		case <-tick.C:
		}
	}
}
