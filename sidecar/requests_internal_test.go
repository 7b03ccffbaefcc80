package sidecar

import (
	"fmt"
	"sync/atomic"
	"testing"
)

// TestRequestsPastTheBoundAreCountedUntimed: a connection times at most
// maxOutstandingRequests requests; one more is not timed, and the
// sidecar's counter (weighstation_sidecar_requests_untimed_total) says so.
// (It was counted per connection, and never exported.)
func TestRequestsPastTheBoundAreCountedUntimed(t *testing.T) {
	var untimed atomic.Uint64
	o := outstanding{untimed: &untimed}
	now := nanotime()
	for i := range maxOutstandingRequests {
		o.start(fmt.Sprintf("_INBOX.a.%d", i), now)
	}
	if n := untimed.Load(); n != 0 {
		t.Fatalf("%d untimed at the bound, want 0", n)
	}
	o.start("_INBOX.a.one-more", now)
	if n := untimed.Load(); n != 1 {
		t.Fatalf("%d untimed past the bound, want 1", n)
	}
	if _, ok := o.finish("_INBOX.a.0"); !ok {
		t.Fatal("a request within the bound is not timed")
	}
}
