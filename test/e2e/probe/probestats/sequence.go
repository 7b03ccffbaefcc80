package probestats

import "time"

// Bounds on what a SequenceTracker keeps, so that a long run, or a
// publisher that jumps far ahead, cannot grow a subscriber without limit.
const (
	// MaxGaps is the most gaps kept in SubscriberStats.Gaps.
	MaxGaps = 10000
	// MaxTrackedGap is the largest gap whose numbers are remembered one by
	// one, so that a late arrival can be told from a duplicate; a larger
	// gap counts as lost for good.
	MaxTrackedGap = 10000
	// MaxMissing is the most missing numbers remembered in all.
	MaxMissing = 200000
)

// SequenceTracker follows every publisher's sequence numbers as a
// subscriber receives them, and counts what is missing, repeated or late.
// It is not safe for concurrent use.
type SequenceTracker struct {
	stats      SubscriberStats
	publishers map[string]*publisherState
	// missing maps a publisher's missing number to the gap it belongs to;
	// gap ids count from 0 and gapBase is the id of stats.Gaps[0].
	missing map[missingKey]int64
	nextGap int64
	gapBase int64
}

type publisherState struct {
	seen PublisherSeen
}

type missingKey struct {
	publisher string
	run       int64
	seq       uint64
}

// NewSequenceTracker returns an empty tracker.
func NewSequenceTracker() *SequenceTracker {
	return &SequenceTracker{publishers: map[string]*publisherState{}, missing: map[missingKey]int64{}}
}

// Observe records the arrival, at now, of message seq of a publisher's run.
//
// The first message of a publisher sets where its sequence starts (the
// subscriber may have started after it). A new run of a known publisher
// (it restarted) starts again from 1, and what is missing before its first
// message is lost.
func (t *SequenceTracker) Observe(publisher string, run int64, seq uint64, now time.Time) {
	t.stats.Received++
	p := t.publishers[publisher]
	if p == nil {
		t.publishers[publisher] = &publisherState{seen: PublisherSeen{Run: run, Highest: seq, Received: 1}}
		return
	}
	if p.seen.Run != run {
		t.stats.Restarts++
		p.seen.Run, p.seen.Highest = run, 0
	}
	p.seen.Received++
	switch {
	case seq == p.seen.Highest+1:
		p.seen.Highest = seq
	case seq > p.seen.Highest+1:
		t.addGap(publisher, run, p, p.seen.Highest+1, seq-p.seen.Highest-1, now)
		p.seen.Highest = seq
	default: // at or below the highest: late, or seen before
		key := missingKey{publisher, run, seq}
		id, late := t.missing[key]
		if !late {
			t.stats.Duplicates++
			return
		}
		delete(t.missing, key)
		t.stats.OutOfOrder++
		t.stats.Lost--
		p.seen.Lost--
		if i := id - t.gapBase; i >= 0 && i < int64(len(t.stats.Gaps)) {
			t.stats.Gaps[i].Recovered++
		}
	}
}

// Malformed counts a payload that is not the probe's.
func (t *SequenceTracker) Malformed() { t.stats.Malformed++ }

func (t *SequenceTracker) addGap(publisher string, run int64, p *publisherState, first, count uint64, now time.Time) {
	n := int64(count)
	t.stats.Lost += n
	p.seen.Lost += n
	id := t.nextGap
	t.nextGap++
	t.stats.Gaps = append(t.stats.Gaps, Gap{DetectedUnixNano: now.UnixNano(), Publisher: publisher, First: first, Count: n})
	if len(t.stats.Gaps) > MaxGaps {
		t.stats.Gaps = t.stats.Gaps[1:]
		t.stats.GapsDropped++
		t.gapBase++
	}
	if count > MaxTrackedGap || len(t.missing)+int(count) > MaxMissing {
		return
	}
	for s := first; s < first+count; s++ {
		t.missing[missingKey{publisher, run, s}] = id
	}
}

// Stats returns a copy of what the tracker counted so far (the caller adds
// the connection's own counters).
func (t *SequenceTracker) Stats() SubscriberStats {
	s := t.stats
	s.Gaps = append([]Gap(nil), t.stats.Gaps...)
	s.Publishers = make(map[string]PublisherSeen, len(t.publishers))
	for id, p := range t.publishers {
		s.Publishers[id] = p.seen
	}
	return s
}
