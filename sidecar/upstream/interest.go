// Package upstream is the sidecar's side of the broker: its single
// connection (Client), and the interest it holds there on behalf of the
// local subscriptions (Interest).
//
// The Client speaks the NATS client protocol itself rather than through
// nats.go, whose API shaped a slower data path (a goroutine and a copy per
// message on delivery, a header map per stamped publish, one lock shared by
// every publish and SUB): one reader parses MSG and HMSG in place and calls
// the subscription's handler with slices of its buffer; publishes are
// appended to one outbound buffer as the frames the broker reads, and
// written with a single writev by whichever goroutine finds the socket free.
// It reconnects for ever, renews its subscriptions, holds publishes while
// the broker is away (bounded), and counts what a lost connection may have
// lost (InDoubt). Lock order: Client.mu, then Client.subsMu; Interest.mu is
// taken before either. No lock is held while a handler runs or a socket is
// written.
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

// Deliver receives every message of an upstream subscription, on the
// client's reader, with slices valid only during the call (upstream.Msg).
// It must hand the message on quickly: to bounded local queues, which never
// block. There is no buffer between the broker's socket and those queues.
type Deliver func(key Key, msg *Msg)

// Interest holds the upstream subscriptions. It is safe for concurrent use.
type Interest struct {
	up      *Client
	deliver Deliver

	mu   mutex
	subs map[Key]*interest
	// keep, once Drain was called, says which keys keep their interest;
	// the others are refused (ErrDraining).
	keep func(Key) bool
}

type interest struct {
	sub  *Subscription
	refs int
	// drained is set once Drain withdrew the upstream subscription: the
	// client removes it when the broker confirmed the withdrawal.
	drained bool
}

// ErrDraining refuses new interest that Drain withdrew: the sidecar is
// stopping.
var ErrDraining = errors.New("the sidecar is shutting down")

// NewInterest returns an empty registry over up.
func NewInterest(up *Client, deliver Deliver) *Interest {
	return &Interest{up: up, deliver: deliver, subs: map[Key]*interest{}}
}

// Add registers one local interest in key. The first one subscribes
// upstream; first reports whether this call did.
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
	sub := i.up.Subscribe(key.Subject, key.Queue, func(m *Msg) { i.deliver(key, m) })
	i.subs[key] = &interest{sub: sub, refs: 1}
	return true, nil
}

// Remove drops one local interest in key; the last one unsubscribes
// upstream, and last reports whether this call did.
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
	if !in.drained {
		i.up.Unsubscribe(in.sub)
	}
	return true, nil
}

// Drain withdraws the upstream subscriptions whose keys keep does not
// keep: the broker stops sending them (a queue group's messages go to its
// other members), and what it sent before it learnt of it is still
// delivered. The channel it returns closes once the broker confirmed the
// withdrawal (everything before it was handed to Deliver), or the
// connection was lost, or stop was closed. From then on, Add refuses
// those keys (ErrDraining), so that nothing renews them.
func (i *Interest) Drain(keep func(Key) bool, stop <-chan struct{}) <-chan struct{} {
	i.mu.Lock()
	i.keep = keep
	var withdrawn []*Subscription
	for key, in := range i.subs {
		if keep(key) || in.drained {
			continue
		}
		in.drained = true
		withdrawn = append(withdrawn, in.sub)
	}
	i.mu.Unlock()
	done := make(chan struct{})
	confirmed := make(chan struct{})
	i.up.Drain(withdrawn, func(error) { close(confirmed) })
	go func() {
		defer close(done)
		select {
		case <-confirmed:
		case <-stop:
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
