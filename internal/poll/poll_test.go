package poll

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	calls := 0
	if err := Until(10*time.Second, time.Millisecond, func() error {
		calls++
		if calls < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || calls != 3 {
		t.Fatalf("Until = %v after %d calls, want nil after 3", err, calls)
	}
	err := Until(20*time.Millisecond, time.Millisecond, func() error { return errors.New("never") })
	if err == nil || !strings.Contains(err.Error(), "still not true after 20ms: never") {
		t.Fatalf("Until of a condition that never holds = %v, want the timeout and the last error", err)
	}
}
