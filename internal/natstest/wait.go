package natstest

import (
	"errors"
	"testing"
	"time"

	"github.com/weighstation/weighstation/internal/poll"
)

// WaitFor polls cond every waitInterval until it holds, failing the test
// with what after waitTimeout.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if err := poll.Until(waitTimeout, waitInterval, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// WaitFor's bounds: long enough for a loaded CI machine, short enough to
// fail a test that hangs.
const (
	waitTimeout  = 10 * time.Second
	waitInterval = 5 * time.Millisecond
)

var errNotYet = errors.New("condition not met")
