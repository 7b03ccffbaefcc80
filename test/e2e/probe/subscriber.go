package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

// subscriber follows every publisher's sequence on its subject.
type subscriber struct {
	sub *subscription

	mu           sync.Mutex
	tracker      *probestats.SequenceTracker
	slowConsumer int64
}

func newSubscriber(o options) *subscriber {
	s := &subscriber{tracker: probestats.NewSequenceTracker()}
	s.sub = newSubscription(o.subject, o.queue, s.receive)
	return s
}

func (s *subscriber) receive(m *nats.Msg) {
	now := time.Now()
	msg, err := decode(m.Data)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.tracker.Malformed()
		return
	}
	s.tracker.Observe(msg.ID, msg.Run, msg.Seq, now)
}

func (s *subscriber) run(ctx context.Context, nc *nats.Conn) error { return s.sub.keep(ctx, nc) }

func (s *subscriber) asyncError(sub *nats.Subscription, err error) bool {
	if sub != nil && errors.Is(err, nats.ErrSlowConsumer) {
		s.mu.Lock()
		s.slowConsumer++
		s.mu.Unlock()
		return true
	}
	kind, subject := classifyRefusal(err.Error())
	return kind == refusedSubscription && s.sub.refusal(subject)
}

func (s *subscriber) fill(st *probestats.Stats) {
	s.mu.Lock()
	sub := s.tracker.Stats()
	sub.SlowConsumer = s.slowConsumer
	s.mu.Unlock()
	sub.SubscribeRefusals, sub.Resubscribes = s.sub.counts()
	st.Subscriber = &sub
}

func (s *subscriber) ready() bool    { return s.sub.ready() }
func (s *subscriber) connects() bool { return true }
