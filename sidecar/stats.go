package sidecar

import (
	"github.com/weighstation/weighstation/sidecar/pending"
	"github.com/weighstation/weighstation/sidecar/upstream"
)

// SubscriptionStats is one local subscription's accounting.
type SubscriptionStats struct {
	SID string
	// Key is the SUB's subscription at the broker: an inbox is there in
	// the pod's inbox space (inbox.go).
	Key    upstream.Key
	Policy string // the covering Subscription's name ("" for none)
	Limits pending.Limits
	Counts pending.Counts
}

// startSettling marks ls removed and lists it as settling, unless it was
// removed before: it reports whether this call removed it.
func (s *Server) startSettling(ls *localSub) bool {
	s.retiredMu.Lock()
	defer s.retiredMu.Unlock()
	if ls.removed.Swap(true) {
		return false
	}
	s.settling[ls] = struct{}{}
	return true
}

// retire folds a removed subscription's final counts into its policy's
// totals, so that totals never go backwards when SUBs come and go.
func (s *Server) retire(ls *localSub) {
	s.retiredMu.Lock()
	defer s.retiredMu.Unlock()
	delete(s.settling, ls)
	p := ls.policy()
	s.retired[p] = s.retired[p].Plus(ls.queue.Counts().Since(ls.base).Events())
}

// PolicyTotals sums every local subscription's accounting, live, settling
// and retired, by Subscription policy name: monotonic, for metrics.
func (s *Server) PolicyTotals() map[string]pending.Counts {
	s.retiredMu.Lock()
	defer s.retiredMu.Unlock()
	out := make(map[string]pending.Counts, len(s.retired))
	for k, v := range s.retired {
		out[k] = v
	}
	add := func(ls *localSub) {
		p := ls.policy()
		out[p] = out[p].Plus(ls.queue.Counts().Since(ls.base))
	}
	for _, ls := range s.liveSubs() {
		add(ls)
	}
	for ls := range s.settling {
		add(ls)
	}
	return out
}

// Stats reports every live local subscription, for metrics and tests.
func (s *Server) Stats() []SubscriptionStats {
	var out []SubscriptionStats
	// A SUB's key is set under interestMu while it is not registered yet
	// (an inbox that waited for the pod's inbox space).
	s.interestMu.Lock()
	defer s.interestMu.Unlock()
	for _, ls := range s.liveSubs() {
		out = append(out, SubscriptionStats{SID: ls.sid, Key: ls.key, Policy: ls.policy(), Limits: ls.queue.Limits(), Counts: ls.queue.Counts()})
	}
	return out
}

// liveSubs lists every connection's SUBs that are not removed, from a
// snapshot of the connections and of each one's copy-on-write list.
func (s *Server) liveSubs() []*localSub {
	var out []*localSub
	for _, c := range s.connections() {
		for _, ls := range c.subsInOrder() {
			if !ls.removed.Load() {
				out = append(out, ls)
			}
		}
	}
	return out
}

// Unrouted is the number of upstream messages that arrived for interest no
// local subscription held any more.
func (s *Server) Unrouted() uint64 { return s.router.unrouted.Load() }
