package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

// requester sends a request every interval, open loop: it does not wait
// for one reply before the next request, so a stalled responder faces
// every request it would have faced.
type requester struct {
	o     options
	runID int64

	mu  sync.Mutex
	rec *probestats.OutcomeRecorder
}

func newRequester(o options) *requester {
	return &requester{o: o, runID: time.Now().UnixNano(), rec: probestats.NewOutcomeRecorder(o.interval, o.timeout)}
}

func (r *requester) run(ctx context.Context, nc *nats.Conn) error {
	tick := time.NewTicker(r.o.interval)
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	var seq uint64
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		seq++
		payload := encode(message{ID: r.o.id, Run: r.runID, Seq: seq, SentNano: time.Now().UnixNano()}, 0)
		r.mu.Lock()
		r.rec.Sent()
		r.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := time.Now()
			_, err := nc.Request(r.o.subject, payload, r.o.timeout)
			done := time.Now()
			o := outcomeOf(err, done.Sub(sent), r.o.timeout)
			var text string
			if err != nil {
				text = err.Error()
			}
			r.mu.Lock()
			r.rec.Record(o, sent, done, text)
			r.mu.Unlock()
		}()
	}
}

// outcomeOf classifies a request's result. A no-responders status counts
// as a fast failure only when it came within the timeout: one that took
// the whole timeout is no faster than silence.
func outcomeOf(err error, took, timeout time.Duration) probestats.Outcome {
	switch {
	case err == nil:
		return probestats.OutcomeOK
	case errors.Is(err, nats.ErrNoResponders) && took < timeout:
		return probestats.OutcomeFastFailure
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrNoResponders):
		return probestats.OutcomeTimeout
	}
	return probestats.OutcomeOther
}

func (r *requester) asyncError(*nats.Subscription, error) bool { return false }

func (r *requester) fill(s *probestats.Stats) {
	r.mu.Lock()
	st := r.rec.Stats()
	r.mu.Unlock()
	s.Requester = &st
}

func (r *requester) ready() bool    { return true }
func (r *requester) connects() bool { return true }
