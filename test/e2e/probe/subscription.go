package main

import (
	"context"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// resubscribeAfter is how long a refused subscription waits before it is
// tried again. The sidecar refuses a SUB that no Subscription of the pod
// covers (yet, or any more), and a stock client never retries by itself.
const resubscribeAfter = time.Second

// subscription is a subscription (or queue subscription) that is made
// again when the sidecar refuses it.
type subscription struct {
	subject, queue string
	handler        nats.MsgHandler

	mu           sync.Mutex
	sub          *nats.Subscription
	refused      bool // since the last attempt
	refusals     int64
	resubscribes int64
	kick         chan struct{}
}

func newSubscription(subject, queue string, handler nats.MsgHandler) *subscription {
	return &subscription{subject: subject, queue: queue, handler: handler, kick: make(chan struct{}, 1)}
}

// keep subscribes, then subscribes again after every refusal, until ctx
// ends.
func (s *subscription) keep(ctx context.Context, nc *nats.Conn) error {
	if err := s.subscribe(nc); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.kick:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(resubscribeAfter):
		}
		s.mu.Lock()
		s.resubscribes++
		s.mu.Unlock()
		if err := s.subscribe(nc); err != nil {
			log.Printf("subscribing again to %s: %v", s.subject, err)
			s.refusedNow()
		}
	}
}

func (s *subscription) subscribe(nc *nats.Conn) error {
	s.mu.Lock()
	old := s.sub
	s.sub, s.refused = nil, false
	s.mu.Unlock()
	if old != nil {
		_ = old.Unsubscribe() // the sidecar never held it; nats.go forgets it
	}
	sub, err := nc.QueueSubscribe(s.subject, s.queue, s.handler)
	if err != nil {
		return fmt.Errorf("subscribing to %s: %w", s.subject, err)
	}
	// Losses must be the mesh's, never this client's: no client-side limit.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return fmt.Errorf("lifting the pending limits of %s: %w", s.subject, err)
	}
	s.mu.Lock()
	s.sub = sub
	s.mu.Unlock()
	log.Printf("subscribed to %s (queue %q)", s.subject, s.queue)
	return nil
}

// refusal takes the sidecar's refusal of subject; it returns whether it
// was this subscription's.
func (s *subscription) refusal(subject string) bool {
	if subject != s.subject {
		return false
	}
	s.refusedNow()
	log.Printf("the sidecar refused the subscription to %s; subscribing again in %s", s.subject, resubscribeAfter)
	return true
}

func (s *subscription) refusedNow() {
	s.mu.Lock()
	s.refused = true
	s.refusals++
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *subscription) ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sub != nil && !s.refused
}

func (s *subscription) counts() (refusals, resubscribes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refusals, s.resubscribes
}
