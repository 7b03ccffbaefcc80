package keep

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
)

// Run calls at once, again on a wake-up and, after a failure, again after
// FirstRetry, all with an interval far longer than the test; it returns
// when its context ends.
func TestRunCallsAtOnceOnWakeAndRetriesAFailure(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := make(chan int, 10)
	n := 0
	do := func(context.Context) error {
		n++
		calls <- n
		if n == 2 {
			return errors.New("the apiserver is away")
		}
		return nil
	}
	wake := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- Run(ctx, time.Hour, wake, do, testr.New(t), "a test's state") }()
	next := func(what string, within time.Duration) {
		t.Helper()
		select {
		case <-calls:
		case <-time.After(within):
			t.Fatalf("no call %s within %s", what, within)
		}
	}
	next("at once", 10*time.Second)
	wake <- struct{}{}
	next("on the wake-up", 10*time.Second) // this one fails
	start := time.Now()
	next("retrying the failure", FirstRetry+10*time.Second)
	if took := time.Since(start); took < FirstRetry/2 {
		t.Errorf("retried after %s, want about %s", took, FirstRetry)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v, want nil when its context ends", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of its context's end")
	}
}
