package natstest

import (
	"errors"
	"testing"
	"time"

	"github.com/weighstation/weighstation/internal/poll"
)

// WaitFor polls cond every WaitInterval until it holds, failing the test
// with what after WaitTimeout.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if err := poll.Until(WaitTimeout, WaitInterval, func() error {
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
	WaitTimeout  = 10 * time.Second
	WaitInterval = 5 * time.Millisecond
)

var errNotYet = errors.New("condition not met")
