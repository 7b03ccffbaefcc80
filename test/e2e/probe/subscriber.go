package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

// subscriber follows every publisher's sequence on its subject. It is
// pausable: POST /pause stops it reading from its sidecar for a while, so
// that messages wait there.
type subscriber struct {
	sub   *subscription
	pause *pauser
	nc    atomic.Pointer[nats.Conn]

	// The filler a pause publishes (publishFiller): its own sequence, of the
	// publisher fillID, in the run fillRun.
	subject, fillID string
	fillRun         int64
	fillMu          sync.Mutex
	fillSeq         uint64

	mu           sync.Mutex
	tracker      *probestats.SequenceTracker
	slowConsumer int64
}

func newSubscriber(o options) *subscriber {
	s := &subscriber{tracker: probestats.NewSequenceTracker(), pause: newPauser(),
		subject: o.subject, fillID: o.id + "/fill", fillRun: time.Now().UnixNano()}
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

func (s *subscriber) run(ctx context.Context, nc *nats.Conn) error {
	s.nc.Store(nc)
	return s.sub.keep(ctx, nc)
}

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
	sub.Pause = s.pause.stats()
	st.Subscriber = &sub
}

func (s *subscriber) pauser() *pauser { return s.pause }

// publishFiller publishes about n bytes of filler to the subscriber's own
// subject, in messages of fillChunk bytes: its sidecar delivers them to it
// (and to the subject's other subscribers, or to another member of its
// queue group), and it tracks them as the publisher fillID's.
func (s *subscriber) publishFiller(n int64) error {
	nc := s.nc.Load()
	if nc == nil {
		return errors.New("not connected to the sidecar")
	}
	s.fillMu.Lock()
	defer s.fillMu.Unlock()
	first := s.fillSeq + 1
	var err error
	for range max((n+fillChunk-1)/fillChunk, 1) {
		seq := s.fillSeq + 1
		if err = nc.Publish(s.subject, encode(message{ID: s.fillID, Run: s.fillRun, Seq: seq, SentNano: time.Now().UnixNano()}, fillChunk)); err != nil {
			break // a number not sent is not taken: no gap
		}
		s.fillSeq = seq
	}
	if s.fillSeq >= first {
		s.pause.filled(s.fillID, first, s.fillSeq, int64(s.fillSeq-first+1)*fillChunk)
	}
	if err != nil {
		return fmt.Errorf("publishing filler #%d to %s: %w", s.fillSeq+1, s.subject, err)
	}
	return nil
}

func (s *subscriber) ready() bool    { return s.sub.ready() }
func (s *subscriber) connects() bool { return true }
