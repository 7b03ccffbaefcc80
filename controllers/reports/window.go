package reports

import (
	"sync/atomic"
	"time"
	"unsafe"
)

// windowSlice is one accepted report's share of one policy in one pod.
type windowSlice[S any] interface {
	acceptedAt() time.Time
	// bytes estimates the memory the slice holds.
	bytes() int64
	// absorb adds a newer slice into this one, which takes its time.
	absorb(newer S)
	// addTo adds the slice's histograms to a policy's running sums (sign
	// 1), or takes them out (-1); it returns how many bytes the sums grew
	// by.
	addTo(sums *runningSums, sign int64) int64
}

// subscriptionSlice is one report of one Subscription in one pod.
type subscriptionSlice struct {
	at time.Time // when the operator accepted the report
	// endToEnd and dwell are the values recorded in the report's
	// interval, at 2 significant digits; empty: none.
	endToEnd, dwell sparse
	// delivered and dropped grew by this much since the series' previous
	// accepted report.
	delivered int64
	dropped   reasons
	// shed counts the reports in the slice whose histograms were left out
	// at the memory cap (Options.MaxBytes): 0 or 1, more once absorbed.
	shed int32
}

// subscriptionSliceBytes is a subscriptionSlice's size beside its
// histograms' data and its reasons, with its pointer in the pod's window.
const subscriptionSliceBytes = int64(unsafe.Sizeof(subscriptionSlice{})) + 8

func (s *subscriptionSlice) acceptedAt() time.Time { return s.at }

func (s *subscriptionSlice) bytes() int64 {
	return subscriptionSliceBytes + s.endToEnd.bytes() + s.dwell.bytes() + s.dropped.bytes()
}

func (s *subscriptionSlice) absorb(newer *subscriptionSlice) {
	s.at = newer.at
	s.endToEnd = merge(s.endToEnd, newer.endToEnd)
	s.dwell = merge(s.dwell, newer.dwell)
	s.delivered = saturatingAdd(s.delivered, newer.delivered)
	s.dropped = s.dropped.plus(newer.dropped)
	s.shed += newer.shed
}

func (s *subscriptionSlice) addTo(sums *runningSums, sign int64) int64 {
	if sums == nil {
		return 0
	}
	before := sums.bytes()
	sums.endToEnd.add(s.endToEnd, sign)
	sums.dwell.add(s.dwell, sign)
	return sums.bytes() - before
}

// runningSums are a Subscription's histograms summed over every slice
// its pods hold: a summary reads them instead of adding up the window's
// slices. Each slice is added when stored and taken out when evicted.
type runningSums struct {
	endToEnd, dwell dense
}

func (r *runningSums) bytes() int64 { return r.endToEnd.bytes() + r.dwell.bytes() }

// topicSlice is one report of one Topic in one pod.
type topicSlice struct {
	at                  time.Time
	attempts, forwarded int64   // deltas
	refused             reasons // deltas
}

func (s *topicSlice) acceptedAt() time.Time { return s.at }

func (s *topicSlice) bytes() int64 { return int64(unsafe.Sizeof(*s)) + 8 + s.refused.bytes() }

func (s *topicSlice) absorb(newer *topicSlice) {
	s.at = newer.at
	s.attempts = saturatingAdd(s.attempts, newer.attempts)
	s.forwarded = saturatingAdd(s.forwarded, newer.forwarded)
	s.refused = s.refused.plus(newer.refused)
}

func (s *topicSlice) addTo(*runningSums, int64) int64 { return 0 }

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
	// version counts the changes to slices, so that a summary of them
	// can be kept until they change (Subscriptions only).
	version uint64
	summary atomic.Pointer[podSummary]
}

// podSummary is a pod's slices of a Subscription summed up, as of its
// window's version and with its first `from` slices left out.
type podSummary struct {
	version         uint64
	from            int
	endToEnd, dwell Latency
	delivered       int64
	dropped         []ReasonCount
	shed            int
}

// podSummaryBytes is what a kept podSummary holds, beside its reasons.
const podSummaryBytes = int64(unsafe.Sizeof(podSummary{}))

// podWindowBytes is the estimated overhead of a podWindow and its map
// entry, beside its slices, and with its summary.
const podWindowBytes = int64(unsafe.Sizeof(podWindow[*topicSlice]{})) + 64 + podSummaryBytes

// add appends a newly accepted slice, after dropping the slices that left
// the window. Past max slices, s is merged into the newest one instead: a
// sidecar reporting faster than its interval cannot grow the window. It
// returns how many bytes the window grew by (negative: shrank), sums
// included.
func (p *podWindow[S]) add(s S, cutoff time.Time, max int, sums *runningSums) int64 {
	grown := -p.evict(cutoff, sums)
	p.version++
	grown += s.addTo(sums, 1)
	if n := len(p.slices); n >= max {
		newest := p.slices[n-1]
		before := newest.bytes()
		newest.absorb(s)
		return grown + newest.bytes() - before
	}
	p.slices = append(p.slices, s)
	return grown + s.bytes()
}

// evict drops the slices accepted at or before cutoff, takes them out of
// sums, and returns the bytes they held (sums included).
func (p *podWindow[S]) evict(cutoff time.Time, sums *runningSums) (freed int64) {
	n := 0
	for n < len(p.slices) && !p.slices[n].acceptedAt().After(cutoff) {
		freed += p.slices[n].bytes() - p.slices[n].addTo(sums, -1)
		n++
	}
	if n > 0 {
		p.version++
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
	// sums are the running sums of every slice of pods (Subscriptions;
	// nil for Topics).
	sums *runningSums
}

func newPolicyWindow[S windowSlice[S]](withSums bool) *policyWindow[S] {
	w := &policyWindow[S]{pods: map[string]*podWindow[S]{}}
	if withSums {
		w.sums = &runningSums{}
	}
	return w
}

// policyWindowBytes is a policyWindow's estimated overhead with its map
// entry, beside its pods and sums.
const policyWindowBytes = int64(unsafe.Sizeof(policyWindow[*topicSlice]{})) + 64

// bytes is the memory of the window's own structures: itself and its
// running sums.
func (w *policyWindow[S]) bytes() int64 {
	if w.sums == nil {
		return policyWindowBytes
	}
	return policyWindowBytes + w.sums.bytes()
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

// add stores a slice of a pod's, returning the bytes the window grew by.
func (w *policyWindow[S]) add(p *podWindow[S], s S, cutoff time.Time, max int) int64 {
	return p.add(s, cutoff, max, w.sums)
}

// sweep evicts what left the window, forgets pods left with nothing, and
// records staleness. It returns the bytes freed and whether anything a
// summary shows changed (a slice left, a pod turned stale or went).
func (w *policyWindow[S]) sweep(now, cutoff time.Time, interval time.Duration) (freed int64, changed bool) {
	for uid, p := range w.pods {
		if f := p.evict(cutoff, w.sums); f > 0 {
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
