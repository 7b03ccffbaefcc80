package probestats

import (
	"fmt"
	"strings"
	"time"
)

// Window is a span of time in which losses are expected (a fault and its
// recovery): losses detected in it are reported, not failed.
type Window struct {
	Name  string
	Start time.Time
	End   time.Time
}

// Contains reports whether at falls in the window, ends included.
func (w Window) Contains(at time.Time) bool {
	return !at.Before(w.Start) && !at.After(w.End)
}

// LostBetween is what is still missing of the gaps detected from from to
// to, ends included.
func (s SubscriberStats) LostBetween(from, to time.Time) int64 {
	var n int64
	for _, g := range s.Gaps {
		if at := time.Unix(0, g.DetectedUnixNano); !at.Before(from) && !at.After(to) {
			n += g.Lost()
		}
	}
	return n
}

// LostIn is what is still missing of publisher's sequence numbers first
// to last, ends included, by the gaps kept (GapsDropped are not seen).
// Of a gap that reaches outside the range and of which some numbers
// arrived late, at most its missing count is taken.
func (s SubscriberStats) LostIn(publisher string, first, last uint64) int64 {
	var n int64
	for _, g := range s.Gaps {
		if g.Publisher != publisher || g.Count <= 0 {
			continue
		}
		lo, hi := max(g.First, first), min(g.First+uint64(g.Count)-1, last)
		if lo > hi {
			continue
		}
		n += min(int64(hi-lo+1), g.Lost())
	}
	return n
}

// GapsOutside returns the gaps detected at or after since that no window
// contains and that are still (partly) missing.
func (s SubscriberStats) GapsOutside(since time.Time, windows []Window) []Gap {
	var out []Gap
	for _, g := range s.Gaps {
		at := time.Unix(0, g.DetectedUnixNano)
		if at.Before(since) || g.Lost() == 0 {
			continue
		}
		inside := false
		for _, w := range windows {
			if w.Contains(at) {
				inside = true
				break
			}
		}
		if !inside {
			out = append(out, g)
		}
	}
	return out
}

// DescribeGaps lists gaps for a failure message, times relative to ref.
func DescribeGaps(gaps []Gap, ref time.Time) string {
	parts := make([]string, 0, len(gaps))
	for _, g := range gaps {
		parts = append(parts, fmt.Sprintf("%d lost from %s#%d, detected at %+v",
			g.Lost(), g.Publisher, g.First, time.Unix(0, g.DetectedUnixNano).Sub(ref).Round(time.Millisecond)))
	}
	return strings.Join(parts, "; ")
}

// FirstTransitionAfter returns the first transition to outcome to whose
// outcome was known at or after t.
func (r RequesterStats) FirstTransitionAfter(to Outcome, t time.Time) (Transition, bool) {
	for _, tr := range r.Transitions {
		if tr.To == to && tr.AtUnixNano >= t.UnixNano() {
			return tr, true
		}
	}
	return Transition{}, false
}

// State is the outcome of the latest transition: what requests get now
// (ok or fast-failure), or empty before any answer.
func (r RequesterStats) State() Outcome {
	if n := len(r.Transitions); n > 0 {
		return r.Transitions[n-1].To
	}
	return ""
}

// At is a transition's time.
func (t Transition) At() time.Time { return time.Unix(0, t.AtUnixNano) }
