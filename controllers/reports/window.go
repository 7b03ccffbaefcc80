package reports

import (
	"time"
	"unsafe"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// windowSlice is one accepted report's share of one policy in one pod.
type windowSlice[S any] interface {
	acceptedAt() time.Time
	// bytes estimates the memory the slice holds.
	bytes() int64
	// absorb adds a newer slice into this one, which takes its time.
	absorb(newer S)
}

// subscriptionSlice is one report of one Subscription in one pod.
type subscriptionSlice struct {
	at time.Time // when the operator accepted the report
	// endToEnd and dwell are the values recorded in the report's
	// interval, at 2 significant digits; nil: none.
	endToEnd, dwell *hdr.PackedHistogram
	// delivered and dropped grew by this much since the series' previous
	// accepted report.
	delivered int64
	dropped   reasons
}

func (s *subscriptionSlice) acceptedAt() time.Time { return s.at }

func (s *subscriptionSlice) bytes() int64 {
	return int64(unsafe.Sizeof(*s)) + histogramBytes(s.endToEnd) + histogramBytes(s.dwell) + s.dropped.bytes()
}

func (s *subscriptionSlice) absorb(newer *subscriptionSlice) {
	s.at = newer.at
	mergeInto(&s.endToEnd, newer.endToEnd)
	mergeInto(&s.dwell, newer.dwell)
	compact(s.endToEnd)
	compact(s.dwell)
	s.delivered = saturatingAdd(s.delivered, newer.delivered)
	s.dropped = s.dropped.plus(newer.dropped)
}

func compact(h *hdr.PackedHistogram) {
	if h != nil {
		h.Compact()
	}
}

// topicSlice is one report of one Topic in one pod.
type topicSlice struct {
	at                  time.Time
	attempts, forwarded int64   // deltas
	refused             reasons // deltas
}

func (s *topicSlice) acceptedAt() time.Time { return s.at }

func (s *topicSlice) bytes() int64 { return int64(unsafe.Sizeof(*s)) + s.refused.bytes() }

func (s *topicSlice) absorb(newer *topicSlice) {
	s.at = newer.at
	s.attempts = saturatingAdd(s.attempts, newer.attempts)
	s.forwarded = saturatingAdd(s.forwarded, newer.forwarded)
	s.refused = s.refused.plus(newer.refused)
}

// podWindow is one pod's slices of one policy: the pod's reports that
// named the policy, whichever series (sidecar process) sent them.
type podWindow[S windowSlice[S]] struct {
	pod, podUID string
	slices      []S // by ascending acceptedAt
	// lastReport is when the last report naming the policy was accepted.
	lastReport time.Time
	// kill is the latest report's kill state (Subscriptions only).
	kill KillState
	// stale is the staleness the last sweep saw, to notify its changes.
	stale bool
}

// podWindowBytes is the estimated overhead of a podWindow and its map
// entry, beside its slices.
const podWindowBytes = int64(unsafe.Sizeof(podWindow[*topicSlice]{})) + 64

// add appends a newly accepted slice, after dropping the slices that left
// the window. Past max slices, s is merged into the newest one instead: a
// sidecar reporting faster than its interval cannot grow the window. It
// returns how many bytes the window grew by (negative: shrank).
func (p *podWindow[S]) add(s S, cutoff time.Time, max int) int64 {
	grown := -p.evict(cutoff)
	if n := len(p.slices); n >= max {
		newest := p.slices[n-1]
		before := newest.bytes()
		newest.absorb(s)
		return grown + newest.bytes() - before
	}
	p.slices = append(p.slices, s)
	return grown + s.bytes()
}

// evict drops the slices accepted at or before cutoff and returns the
// bytes they held.
func (p *podWindow[S]) evict(cutoff time.Time) (freed int64) {
	n := 0
	for n < len(p.slices) && !p.slices[n].acceptedAt().After(cutoff) {
		freed += p.slices[n].bytes()
		n++
	}
	if n > 0 {
		clear(p.slices[:n]) // let the histograms go
		p.slices = p.slices[n:]
		if len(p.slices) == 0 {
			p.slices = nil
		}
	}
	return freed
}

// isStale says whether the pod missed 2 intervals of reports.
func (p *podWindow[S]) isStale(now time.Time, interval time.Duration) bool {
	return now.Sub(p.lastReport) > 2*interval
}

// policyWindow is one policy's pods, by pod UID.
type policyWindow[S windowSlice[S]] struct {
	pods map[string]*podWindow[S]
}

func newPolicyWindow[S windowSlice[S]]() *policyWindow[S] {
	return &policyWindow[S]{pods: map[string]*podWindow[S]{}}
}

// pod returns the pod's window, creating it.
func (w *policyWindow[S]) pod(pod, podUID string) (p *podWindow[S], created bool) {
	if p, ok := w.pods[podUID]; ok {
		return p, false
	}
	p = &podWindow[S]{pod: pod, podUID: podUID}
	w.pods[podUID] = p
	return p, true
}

// sweep evicts what left the window, forgets pods left with nothing, and
// records staleness. It returns the bytes freed and whether anything a
// summary shows changed (a slice left, a pod turned stale or went).
func (w *policyWindow[S]) sweep(now, cutoff time.Time, interval time.Duration) (freed int64, changed bool) {
	for uid, p := range w.pods {
		if f := p.evict(cutoff); f > 0 {
			freed += f
			changed = true
		}
		if len(p.slices) == 0 {
			delete(w.pods, uid)
			freed += podWindowBytes
			changed = true
			continue
		}
		if stale := p.isStale(now, interval); stale != p.stale {
			p.stale = stale
			changed = true
		}
	}
	return freed, changed
}
