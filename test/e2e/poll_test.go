package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	calls := 0
	at, err := Poll(context.Background(), "three calls", time.Second, time.Millisecond, func(context.Context) (bool, string) {
		calls++
		return calls == 3, "call " + string(rune('0'+calls))
	})
	if err != nil || calls != 3 || at.IsZero() {
		t.Fatalf("Poll = %v, %v after %d calls", at, err, calls)
	}
	_, err = Poll(context.Background(), "never", 20*time.Millisecond, time.Millisecond, func(context.Context) (bool, string) {
		return false, "still waiting"
	})
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "never") || !strings.Contains(err.Error(), "still waiting") {
		t.Fatalf("timeout error %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Poll(ctx, "cancelled", time.Minute, time.Millisecond, func(context.Context) (bool, string) { return false, "" }); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}
