package sidecar

import (
	"github.com/weighstation/weighstation/sidecar/pending"
	"github.com/weighstation/weighstation/sidecar/upstream"
)

// SubscriptionStats is one local subscription's accounting.
type SubscriptionStats struct {
	SID    string
	Key    upstream.Key
	Counts pending.Counts
}

// Stats reports every live local subscription, for metrics and tests.
func (s *Server) Stats() []SubscriptionStats {
	s.mu.RLock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.RUnlock()
	var out []SubscriptionStats
	for _, c := range conns {
		c.mu.Lock()
		order := c.order
		c.mu.Unlock()
		for _, ls := range order {
			out = append(out, SubscriptionStats{SID: string(ls.sid), Key: ls.key, Counts: ls.queue.Counts()})
		}
	}
	return out
}

// Unrouted is the number of upstream messages that arrived for interest no
// local subscription held any more.
func (s *Server) Unrouted() uint64 { return s.unrouted.Load() }
