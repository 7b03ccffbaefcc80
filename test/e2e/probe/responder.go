package main

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

// responder answers every request on its subject.
type responder struct {
	sub *subscription

	mu sync.Mutex
	st probestats.ResponderStats
}

func newResponder(o options) *responder {
	r := &responder{}
	r.sub = newSubscription(o.subject, o.queue, r.answer)
	return r
}

func (r *responder) answer(m *nats.Msg) {
	err := m.Respond([]byte("ok"))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.st.Requests++
	if err != nil {
		r.st.AnswerErrors++
		r.st.LastAnswerError = err.Error()
		return
	}
	r.st.Answered++
}

func (r *responder) run(ctx context.Context, nc *nats.Conn) error { return r.sub.keep(ctx, nc) }

func (r *responder) asyncError(_ *nats.Subscription, err error) bool {
	kind, subject := classifyRefusal(err.Error())
	return kind == refusedSubscription && r.sub.refusal(subject)
}

func (r *responder) fill(s *probestats.Stats) {
	r.mu.Lock()
	st := r.st
	r.mu.Unlock()
	st.SubscribeRefusals, st.Resubscribes = r.sub.counts()
	s.Responder = &st
}

func (r *responder) ready() bool    { return r.sub.ready() }
func (r *responder) connects() bool { return true }
