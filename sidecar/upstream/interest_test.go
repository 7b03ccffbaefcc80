package upstream_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/sidecar/upstream"
)

// received collects deliveries per key.
type received struct {
	mu  sync.Mutex
	got map[upstream.Key][]string
}

func (r *received) deliver(key upstream.Key, m *upstream.Msg) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got[key] = append(r.got[key], string(m.Payload))
}

func (r *received) count(key upstream.Key) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got[key])
}

func TestInterestIsDeduplicatedAndReferenceCounted(t *testing.T) {
	broker := natstest.StartBroker(t, nil)
	nc := natstest.DialUpstream(t, broker.ClientURL())
	rec := &received{got: map[upstream.Key][]string{}}
	in := upstream.NewInterest(nc, rec.deliver)
	orders := upstream.Key{Subject: "orders.*"}
	billing := upstream.Key{Subject: "orders.*", Queue: "billing"}
	// The broker counts its own internal subscriptions too.
	base := broker.NumSubscriptions()

	for i := range 10 {
		first, err := in.Add(orders)
		if err != nil || first != (i == 0) {
			t.Fatalf("Add #%d = %v, %v", i, first, err)
		}
	}
	if _, err := in.Add(billing); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	// Ten local interests in orders.* and one in the queue group: two
	// upstream subscriptions, as the broker itself counts them.
	if got := broker.NumSubscriptions() - base; got != 2 || in.Subscriptions() != 2 || in.Refs(orders) != 10 {
		t.Fatalf("broker has %d subscriptions, registry %d, refs %d; want 2, 2, 10", got, in.Subscriptions(), in.Refs(orders))
	}

	pub := natstest.Connect(t, broker.ClientURL())
	publishN(t, pub, "orders.eu", 3)
	natstest.WaitFor(t, "three messages for each subscription", func() bool { return rec.count(orders) == 3 && rec.count(billing) == 3 })

	for i := range 9 {
		if last, err := in.Remove(orders); err != nil || last {
			t.Fatalf("Remove #%d = %v, %v; want not the last", i, last, err)
		}
	}
	if last, err := in.Remove(orders); err != nil || !last {
		t.Fatalf("last Remove = %v, %v", last, err)
	}
	if _, err := in.Remove(orders); err == nil {
		t.Fatal("removing interest that is gone did not fail")
	}
	if err := nc.Flush(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if got := broker.NumSubscriptions() - base; got != 1 {
		t.Fatalf("broker has %d subscriptions after the last local orders.* went, want 1 (the queue group)", got)
	}
}

// TestDrainWithdrawsAllButWhatItKeeps: Drain withdraws the interest it does
// not keep, hands over what was already buffered, and refuses to renew
// it; what it keeps is untouched.
func TestDrainWithdrawsAllButWhatItKeeps(t *testing.T) {
	broker := natstest.StartBroker(t, nil)
	nc := natstest.DialUpstream(t, broker.ClientURL())
	rec := &received{got: map[upstream.Key][]string{}}
	in := upstream.NewInterest(nc, rec.deliver)
	work, inbox := upstream.Key{Subject: "work", Queue: "workers"}, upstream.Key{Subject: "_INBOX.abc.*"}
	base := broker.NumSubscriptions()
	for _, k := range []upstream.Key{work, inbox} {
		if _, err := in.Add(k); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	pub := natstest.Connect(t, broker.ClientURL())
	publishN(t, pub, "work", 100)
	stop := make(chan struct{})
	defer close(stop)
	handedOver := in.Drain(func(k upstream.Key) bool { return k == inbox }, stop)
	select {
	case <-handedOver:
	case <-time.After(10 * time.Second):
		t.Fatal("the drained subscription never handed over what it held")
	}
	if got := rec.count(work); got != 100 {
		t.Errorf("%d of the 100 messages sent before the drain were delivered", got)
	}
	if got := broker.NumSubscriptions() - base; got != 1 {
		t.Errorf("the broker holds %d subscriptions, want the inbox's alone", got)
	}
	if _, err := in.Add(work); !errors.Is(err, upstream.ErrDraining) {
		t.Errorf("Add(work) after the drain = %v, want ErrDraining", err)
	}
	if _, err := in.Add(inbox); err != nil {
		t.Errorf("Add(inbox) after the drain = %v: the interest kept must stay usable", err)
	}
	if last, err := in.Remove(work); !last || err != nil {
		t.Errorf("Remove(work) = %v, %v: a drained subscription is gone already, which is no error", last, err)
	}
}

// publishN publishes n one-byte messages to subject, and flushes them.
func publishN(t *testing.T, pub *nats.Conn, subject string, n int) {
	t.Helper()
	for range n {
		if err := pub.Publish(subject, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
}
