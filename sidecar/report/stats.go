package report

import (
	"maps"
	"sync"
)

// Reasons a report is dropped unacknowledged.
const (
	// DropOverflow: MaxPending reports waited already; the oldest went.
	DropOverflow = "overflow"
	// DropRefused: the operator ended the stream on it (INVALID_ARGUMENT,
	// PERMISSION_DENIED), so sending it again could not succeed.
	DropRefused = "refused"
)

// Stats count what a Reporter did.
type Stats struct {
	// Built is the reports made (the last sequence number).
	Built uint64
	// Sent is the reports written to a stream, resends included; Resent
	// is those that had been sent before.
	Sent, Resent uint64
	// Acknowledged is the reports the operator acknowledged.
	Acknowledged uint64
	// Dropped is the reports dropped unacknowledged, by reason
	// (DropOverflow, DropRefused).
	Dropped map[string]uint64
	// StreamErrors counts the ends of streams by gRPC code ("Unknown" for
	// a failure before the stream, such as an unreadable token file).
	StreamErrors map[string]uint64
	// Pending is the reports waiting for an acknowledgement now.
	Pending int
	// Connected is whether a stream is open now.
	Connected bool
}

// counters are a Reporter's Stats as they change.
type counters struct {
	mu sync.Mutex
	s  Stats
}

func (c *counters) update(f func(*Stats)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(&c.s)
}

func (c *counters) snapshot() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.s
	s.Dropped = maps.Clone(c.s.Dropped)
	s.StreamErrors = maps.Clone(c.s.StreamErrors)
	return s
}

func increment(m *map[string]uint64, key string) {
	if *m == nil {
		*m = map[string]uint64{}
	}
	(*m)[key]++
}
