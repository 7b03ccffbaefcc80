package sidecar

import (
	"errors"
	"time"

	"github.com/weighstation/weighstation/sidecar/pending"
	"github.com/weighstation/weighstation/sidecar/upstream"
)

// ShutdownSummary is what Shutdown did with what the sidecar held.
type ShutdownSummary struct {
	// Drained is set when everything held was delivered within the grace
	// period.
	Drained bool
	// Waited is how long the drain took: the grace period, or less when it
	// drained.
	Waited time.Duration
	// Delivered is the messages written to the applications during the
	// drain.
	Delivered uint64
	// Undelivered is the messages still held when the grace period ended
	// (or that arrived after it): dropped, and counted with reason shutdown
	// in the metrics and reports.
	Undelivered uint64
	// FlushErr is why the broker may not have all that the applications
	// published (it was away, or did not confirm in time); nil when it
	// confirmed everything.
	FlushErr error
	// UnflushedBytes is what the connection to the broker still buffered
	// when FlushErr is set.
	UnflushedBytes int
}

// drainPoll is how often Shutdown looks at the queues while it waits for
// them to empty: cheap (a lock per local subscription), and short beside
// any grace period.
const drainPoll = 5 * time.Millisecond

// Shutdown stops the sidecar for its pod's termination, delivering what it
// holds first:
//
//  1. It stops accepting connections; connected applications are still
//     served (they may publish, and request: replies to their inboxes keep
//     arriving).
//  2. It withdraws the upstream interest of every SUB under a
//     Subscription, so that the broker sends no more (a queue group's
//     messages go to its other members) and what it sent before it
//     learnt of it still reaches the queues. New SUBs under a Subscription are refused.
//  3. It keeps delivering until every queue is empty or grace ends.
//  4. It drops what is left, counted with reason shutdown, closes the
//     connections, and flushes to the broker what the applications
//     published.
//
// It returns what happened, for the log; the Server is closed afterwards.
func (s *Server) Shutdown(grace time.Duration) ShutdownSummary {
	start := time.Now()
	before := s.shutdownTotals()
	s.draining.Store(true)
	// The interest is withdrawn before the listener closes, so that a SUB
	// that arrives once new connections are refused is refused too.
	handedOver := s.interest.Drain(func(key upstream.Key) bool {
		_, covered := s.policy.Load().SubscriptionFor(key.Subject)
		return !covered
	}, s.stop)
	if s.ln != nil {
		_ = s.ln.Close() // accept returns; a new connection is refused by the kernel
	}

	sum := ShutdownSummary{Drained: s.waitDrained(handedOver, grace)}
	sum.Waited = time.Since(start)

	// Whatever is left now is the shutdown's loss. The queues are closed
	// for it before their connections, so that a message a writer has in
	// flight, whose write the closing connection fails, counts the same.
	s.final.Store(true)
	s.interestMu.Lock() // no SUB in progress: they are refused from here on
	//nolint:staticcheck // an empty critical section is the point: a barrier.
	s.interestMu.Unlock()
	for _, ls := range s.liveSubs() {
		ls.queue.Close(pending.ReasonShutdown)
	}
	s.Close()

	if s.up.Connected() {
		sum.FlushErr = s.up.Flush(s.opts.UpstreamFlushTimeout)
	} else {
		sum.FlushErr = errors.New("the broker is not connected")
	}
	if sum.FlushErr != nil {
		sum.UnflushedBytes = s.up.Buffered()
	}
	after := s.shutdownTotals()
	sum.Delivered = after.delivered - before.delivered
	sum.Undelivered = after.shutdown - before.shutdown
	return sum
}

// waitDrained waits until the broker confirmed the withdrawal of the
// subscriptions (what it sent before was handed to the queues) and every
// local queue is empty, or grace ends, and reports whether it drained.
func (s *Server) waitDrained(handedOver <-chan struct{}, grace time.Duration) bool {
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	poll := time.NewTicker(drainPoll)
	defer poll.Stop()
	for {
		select {
		case <-handedOver:
			handedOver = nil // closed: a nil channel is never ready again
		case <-poll.C:
			if handedOver == nil && s.holdsNothing() {
				return true
			}
		case <-deadline.C:
			return false
		}
	}
}

// holdsNothing reports whether no local queue holds a message, pending or
// in flight to the socket.
func (s *Server) holdsNothing() bool {
	for _, ls := range s.liveSubs() {
		if c := ls.queue.Counts(); c.Pending > 0 || c.InFlight > 0 {
			return false
		}
	}
	return true
}

type shutdownTotals struct{ delivered, shutdown uint64 }

func (s *Server) shutdownTotals() shutdownTotals {
	var t shutdownTotals
	for _, c := range s.PolicyTotals() {
		t.delivered += c.Delivered
		t.shutdown += c.Dropped[pending.ReasonShutdown]
	}
	return t
}
