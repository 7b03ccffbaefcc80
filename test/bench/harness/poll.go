package benchharness

import (
	"fmt"
	"os"
	"time"
)

// Progress prints a timestamped line to stderr: what a bench is doing,
// apart from its results on stdout.
func Progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

// Poll calls check every interval until it reports done, alive fails, or
// timeout passes; it prints check's progress every 10 s.
func Poll(timeout, interval time.Duration, alive func() error, check func() (bool, string)) error {
	deadline := time.Now().Add(timeout)
	lastPrint := time.Now()
	for {
		done, msg := check()
		if done {
			return nil
		}
		if err := alive(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s: %s", timeout, msg)
		}
		if time.Since(lastPrint) >= 10*time.Second {
			Progress("  ... %s", msg)
			lastPrint = time.Now()
		}
		time.Sleep(interval)
	}
}
