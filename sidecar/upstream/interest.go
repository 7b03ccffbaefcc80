// Package upstream is the sidecar's side of the broker: its single
// connection, and the interest it holds there on behalf of the local
// subscriptions.
//
// Local interest is reference-counted and de-duplicated: ten local
// "SUB orders.*" make one upstream subscription, a queue group maps to one
// upstream queue subscription, and the upstream interest goes when the last
// local one goes. One connection carries it all, so that a request and its
// reply inbox share it (the broker's own no-responders answer depends on
// that).
package upstream

import (
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
)

// Key identifies one upstream subscription: a subject pattern and an
// optional queue group.
type Key struct {
	Subject string
	Queue   string
}

func (k Key) String() string {
	if k.Queue == "" {
		return k.Subject
	}
	return k.Subject + " (queue " + k.Queue + ")"
}

// Deliver receives every message of an upstream subscription, on that
// subscription's nats.go goroutine (one per subscription, none per
// message). It must hand the message on quickly: to bounded local queues.
type Deliver func(key Key, msg *nats.Msg)

// Interest holds the upstream subscriptions. It is safe for concurrent use.
type Interest struct {
	nc      *nats.Conn
	deliver Deliver
	// limits bound what nats.go itself buffers per subscription before the
	// sidecar's queues take over; nats.go drops past them and counts it.
	pendingMsgs, pendingBytes int

	mu   sync.Mutex
	subs map[Key]*interest
	// keep, once Drain was called, says which keys keep their interest;
	// the others are refused (ErrDraining).
	keep func(Key) bool
	// retiredDrops are the drops of upstream subscriptions already removed,
	// so that Dropped never goes backwards.
	retiredDrops uint64
}

type interest struct {
	sub  *nats.Subscription
	refs int
	// drained is set once Drain withdrew the upstream subscription: nats.go
	// removes it when it has handed over what it held.
	drained bool
}

// ErrDraining refuses new interest that Drain withdrew: the sidecar is
// stopping.
var ErrDraining = errors.New("the sidecar is shutting down")

// Default per-subscription buffering inside nats.go: the sidecar moves
// messages into its own bounded queues at once, so a small buffer suffices.
// nats.go's own default (512k messages, 64 MiB per subscription) would be an
// implicit limit far above the sidecar's memory budget.
const (
	DefaultPendingMessages = 65536
	DefaultPendingBytes    = 16 << 20
)

// NewInterest returns an empty registry over nc.
func NewInterest(nc *nats.Conn, deliver Deliver) *Interest {
	return &Interest{nc: nc, deliver: deliver, pendingMsgs: DefaultPendingMessages, pendingBytes: DefaultPendingBytes, subs: map[Key]*interest{}}
}

// WithPendingLimits sets what nats.go may buffer per upstream subscription
// before it drops (and counts) messages; it applies to subscriptions made
// after the call.
func (i *Interest) WithPendingLimits(messages, bytes int) *Interest {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.pendingMsgs, i.pendingBytes = messages, bytes
	return i
}

// Add registers one more local interest in key and reports whether it is
// the first (so that an upstream subscription was made).
func (i *Interest) Add(key Key) (first bool, err error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.keep != nil && !i.keep(key) {
		return false, fmt.Errorf("subscribing upstream to %s: %w", key, ErrDraining)
	}
	if in, ok := i.subs[key]; ok {
		in.refs++
		return false, nil
	}
	handler := func(m *nats.Msg) { i.deliver(key, m) }
	var sub *nats.Subscription
	if key.Queue == "" {
		sub, err = i.nc.Subscribe(key.Subject, handler)
	} else {
		sub, err = i.nc.QueueSubscribe(key.Subject, key.Queue, handler)
	}
	if err != nil {
		return false, fmt.Errorf("subscribing upstream to %s: %w", key, err)
	}
	if err := sub.SetPendingLimits(i.pendingMsgs, i.pendingBytes); err != nil {
		_ = sub.Unsubscribe()
		return false, fmt.Errorf("bounding the upstream buffer of %s: %w", key, err)
	}
	i.subs[key] = &interest{sub: sub, refs: 1}
	return true, nil
}

// Remove drops one local interest in key and reports whether it was the
// last (so that the upstream subscription was removed).
func (i *Interest) Remove(key Key) (last bool, err error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	in, ok := i.subs[key]
	if !ok {
		return false, fmt.Errorf("removing interest in %s: none is registered", key)
	}
	in.refs--
	if in.refs > 0 {
		return false, nil
	}
	delete(i.subs, key)
	if n, err := in.sub.Dropped(); err == nil {
		i.retiredDrops += uint64(n)
	}
	if in.drained {
		return true, nil // nats.go removes it once drained
	}
	if err := in.sub.Unsubscribe(); err != nil {
		return true, fmt.Errorf("unsubscribing upstream from %s: %w", key, err)
	}
	return true, nil
}

// Drain withdraws the upstream subscriptions whose keys keep does not
// keep, with nats.go's Subscription.Drain: the broker stops sending them
// (a queue group's messages go to its other members), and what nats.go
// already buffered is still delivered. The channel it returns closes once
// all of it was handed to Deliver, and never if the connection closes
// first: closing stop ends the wait (and closes the channel) then. From
// then on, Add refuses those keys (ErrDraining), so that nothing renews
// them.
func (i *Interest) Drain(keep func(Key) bool, stop <-chan struct{}) <-chan struct{} {
	i.mu.Lock()
	i.keep = keep
	var closed []<-chan nats.SubStatus
	for key, in := range i.subs {
		if keep(key) || in.drained {
			continue
		}
		ch := in.sub.StatusChanged(nats.SubscriptionClosed) // before Drain, so as not to miss it
		if err := in.sub.Drain(); err != nil {
			continue // already gone with the connection: nothing left to hand over
		}
		in.drained = true
		closed = append(closed, ch)
	}
	i.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, ch := range closed {
			for open := true; open; { // nats.go closes it once the subscription is removed
				select {
				case _, open = <-ch:
				case <-stop:
					return
				}
			}
		}
	}()
	return done
}

// Subscriptions returns the number of upstream subscriptions held.
func (i *Interest) Subscriptions() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return len(i.subs)
}

// Refs returns how many local interests key has.
func (i *Interest) Refs(key Key) int {
	i.mu.Lock()
	defer i.mu.Unlock()
	if in, ok := i.subs[key]; ok {
		return in.refs
	}
	return 0
}

// Dropped is the number of messages nats.go dropped because an upstream
// subscription's buffer (WithPendingLimits) was full, for every upstream
// subscription ever held. These never reached a local queue, so they are
// outside the local subscriptions' balances; a steady rise means the
// sidecar's delivery cannot keep up with the broker.
func (i *Interest) Dropped() uint64 {
	i.mu.Lock()
	defer i.mu.Unlock()
	total := i.retiredDrops
	for _, in := range i.subs {
		if n, err := in.sub.Dropped(); err == nil {
			total += uint64(n)
		}
	}
	return total
}
