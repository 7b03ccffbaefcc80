package sidecar_test

import (
	"bytes"
	"testing"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/sidecar"
)

// TestPolicyTotalsNeverGoBackwards: a SUB removed while a write to its
// stalled client holds some of its messages is neither live nor retired
// until that write ends, perhaps never; its counts stay in its policy's
// totals meanwhile, which Prometheus reads as counters (they vanished, and
// came back once it retired).
func TestPolicyTotalsNeverGoBackwards(t *testing.T) {
	r := newRig(t, func(o *sidecar.Options) { o.AppSendBuffer = 64 << 10 })
	r.setConfig(t, withSubscriptions(subscription("dip", "dip.>", "", false)))
	stalled := r.raw(t) // reads nothing after its PONG
	stalled.send("CONNECT {}\r\nSUB dip.x 1\r\nPING\r\n")
	if l := stalled.line(); l != "PONG" {
		t.Fatalf("got %q, want PONG", l)
	}
	pub := r.direct(t)
	payload := bytes.Repeat([]byte("x"), 64<<10)
	for sent := 0; ; sent++ {
		if st := r.side.Stats(); len(st) == 1 && st[0].Counts.InFlight > 0 && st[0].Counts.Pending > 0 {
			break
		}
		if sent > 2000 {
			t.Fatalf("no backlog after %d messages: %+v", sent, r.side.Stats())
		}
		if err := pub.Publish("dip.x", payload); err != nil {
			t.Fatal(err)
		}
		flush(t, pub)
	}
	before := r.side.PolicyTotals()["dip"]
	stalled.send("UNSUB 1\r\n")
	natstest.WaitFor(t, "the SUB is removed", func() bool { return len(r.side.Stats()) == 0 })
	after := r.side.PolicyTotals()["dip"]
	if after.Arrived < before.Arrived || after.Delivered < before.Delivered || !after.Balanced() {
		t.Fatalf("Subscription dip's totals went from %+v to %+v once its SUB was unsubscribed, with a write of it in flight", before, after)
	}
	if after.InFlight == 0 {
		t.Fatalf("totals %+v: the write in flight is not in them", after)
	}
}
