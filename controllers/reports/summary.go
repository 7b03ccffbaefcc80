package reports

import (
	"cmp"
	"slices"
	"time"
)

// SubscriptionSummary is what the pods reported of one Subscription over
// the window.
type SubscriptionSummary struct {
	// WindowStart is max(now−Window, Started): a new leader knows nothing
	// from before it started.
	WindowStart time.Time
	Window      time.Duration
	// EndToEnd and Dwell summarize every value every pod recorded in the
	// window, from their merged histogram.
	EndToEnd, Dwell Latency
	// Delivered and Dropped are counted over the window; Dropped is sorted
	// by reason.
	Delivered int64
	Dropped   []ReasonCount
	// Pods are the pods that reported in the window: stale ones first,
	// then by end-to-end p99 descending (then dwell p99), then name.
	Pods []PodSummary
	// ReportingPods is len(Pods); StalePods counts those of them that
	// missed 2 intervals of reports.
	ReportingPods, StalePods int
	// KilledManual, KilledAuto and KilledShed count the pods, stale ones
	// left out, whose latest report had delivery stopped, by cause.
	KilledManual, KilledAuto, KilledShed int
	// ShedReports counts the pods' reports in the window whose latency
	// histograms the operator shed at its memory cap (Options.MaxBytes):
	// EndToEnd and Dwell summarize the other reports alone. Their counters
	// and kill states are counted.
	ShedReports int
}

// PodSummary is one pod's share of a Subscription over the window.
type PodSummary struct {
	Pod, PodUID     string
	EndToEnd, Dwell Latency
	Delivered       int64
	Dropped         []ReasonCount
	// Kill is the latest report's.
	Kill KillState
	// LastReport is when the pod's latest report naming the Subscription
	// was accepted (the operator's clock).
	LastReport time.Time
	// Stale: no report for 2 intervals.
	Stale bool
	// ShedReports counts the pod's reports in the window whose latency
	// histograms were shed (SubscriptionSummary.ShedReports).
	ShedReports int
}

// TopicSummary is what the pods reported of one Topic over the window.
type TopicSummary struct {
	WindowStart         time.Time
	Window              time.Duration
	Attempts, Forwarded int64
	// Refused is sorted by reason.
	Refused []ReasonCount
	// Pods counts the pods that reported in the window; StalePods those of
	// them that missed 2 intervals of reports.
	Pods, StalePods int
}

func (s *Store) windowStart(now time.Time) time.Time {
	start := now.Add(-s.opts.Window)
	if started := s.Started(); started.After(start) {
		return started
	}
	return start
}

// Subscription summarizes a Subscription over the window; false when no
// pod reported it in the window. It adds nothing up: the aggregate
// latencies are the window's running sums (less the slices of pods that
// are late by more than an interval, which are in the sums until the next
// sweep), and each pod's are kept from one summary to the next until its
// slices change (podSummaryOf). Under the namespace's read lock.
func (s *Store) Subscription(namespace, name string) (SubscriptionSummary, bool) {
	now := s.opts.Now()
	cutoff := s.opts.cutoff(now)
	ns := s.rlockNamespace(namespace)
	if ns == nil {
		return SubscriptionSummary{}, false
	}
	w := ns.subscriptions[name]
	if w == nil {
		ns.mu.RUnlock()
		return SubscriptionSummary{}, false
	}
	out := SubscriptionSummary{WindowStart: s.windowStart(now), Window: s.opts.Window, Pods: make([]PodSummary, 0, len(w.pods))}
	dropped := reasonSum{}
	var left []*subscriptionSlice // held, but out of the window
	for _, p := range w.pods {
		if len(p.slices) == 0 {
			continue
		}
		from := s.podCutoffAt(p.slices[len(p.slices)-1].at, cutoff)
		sum := podSummaryOf(p, from)
		for _, sl := range p.slices {
			if !sl.at.After(from) {
				left = append(left, sl)
			}
		}
		if sum == nil {
			continue
		}
		out.Pods = append(out.Pods, PodSummary{
			Pod: p.pod, PodUID: p.podUID,
			EndToEnd: sum.endToEnd, Dwell: sum.dwell,
			Delivered: sum.delivered, Dropped: sum.dropped, ShedReports: sum.shed,
			Kill: p.kill, LastReport: p.lastReport, Stale: p.isStale(now, s.opts.Interval),
		})
		out.Delivered = saturatingAdd(out.Delivered, sum.delivered)
		dropped.add(sum.dropped)
		out.ShedReports += sum.shed
	}
	if len(out.Pods) > 0 {
		if len(left) == 0 {
			out.EndToEnd, out.Dwell = w.sums.endToEnd.latency(), w.sums.dwell.latency()
		} else {
			out.EndToEnd = latencyLess(&w.sums.endToEnd, left, func(sl *subscriptionSlice) sparse { return sl.endToEnd })
			out.Dwell = latencyLess(&w.sums.dwell, left, func(sl *subscriptionSlice) sparse { return sl.dwell })
		}
	}
	ns.mu.RUnlock()
	if len(out.Pods) == 0 {
		return SubscriptionSummary{}, false
	}
	out.Dropped = dropped.sorted()
	out.Pods = sortPods(out.Pods)
	out.ReportingPods = len(out.Pods)
	for _, p := range out.Pods {
		if p.Stale {
			out.StalePods++
			continue
		}
		if !p.Kill.Killed {
			continue
		}
		switch p.Kill.Cause {
		case KillCauseManual:
			out.KilledManual++
		case KillCauseAuto:
			out.KilledAuto++
		case KillCauseShed:
			out.KilledShed++
		}
	}
	return out, true
}

// latencyLess summarizes a running sum less some of its slices.
func latencyLess(sum *dense, less []*subscriptionSlice, of func(*subscriptionSlice) sparse) Latency {
	d := getDense()
	defer putDense(d)
	d.copyFrom(sum)
	for _, sl := range less {
		d.add(of(sl), -1)
	}
	return d.latency()
}

// podSummaryOf sums up a pod's slices accepted after from: kept in the
// pod's window until its slices change, so that a Subscription's summary
// recomputes only the pods that reported since the last one. Nil: none
// in the window. Called under the namespace's read lock, concurrently:
// the kept summary is swapped atomically.
func podSummaryOf(p *podWindow[*subscriptionSlice], from time.Time) *podSummary {
	// The slices in the window are the newest ones (they ascend): the
	// summary is known by how many older ones are left out.
	skip := 0
	for skip < len(p.slices) && !p.slices[skip].at.After(from) {
		skip++
	}
	if skip == len(p.slices) {
		return nil
	}
	if kept := p.summary.Load(); kept != nil && kept.version == p.version && kept.from == skip {
		return kept
	}
	endToEnd, dwell := getDense(), getDense()
	defer putDense(endToEnd)
	defer putDense(dwell)
	sum := &podSummary{version: p.version, from: skip}
	podDropped := reasonSum{}
	n := 0
	for _, sl := range p.slices[skip:] {
		if !sl.at.After(from) {
			continue // out of order (a clock that went back): left out all the same
		}
		n++
		endToEnd.add(sl.endToEnd, 1)
		dwell.add(sl.dwell, 1)
		sum.delivered = saturatingAdd(sum.delivered, sl.delivered)
		podDropped.add(sl.dropped)
		sum.shed += int(sl.shed)
	}
	if n == 0 {
		return nil
	}
	sum.endToEnd, sum.dwell, sum.dropped = endToEnd.latency(), dwell.latency(), podDropped.sorted()
	p.summary.Store(sum)
	return sum
}

// podCutoff is the start of one pod's window: the window's length before
// its newest report, less half an interval, unless the store's cutoff
// (now − window − interval/2, Options.cutoff) is later. Anchored at now
// alone, a report arriving a little early or late would make the window
// hold one report more or less than the time before, and a steady flow
// would seem to change by a whole interval's worth at every report,
// which status would write. Anchored at the newest report, a steady flow
// holds the same number of reports at every summary, and a sidecar
// reporting faster than the interval still has its whole window counted.
// The store's cutoff lies half an interval past the window so that it
// takes over only from a pod whose report is that late: one that stopped
// reporting leaves the window half an interval after its last report
// does.
func podCutoff[S windowSlice[S]](s *Store, slices []S, cutoff time.Time) time.Time {
	if len(slices) == 0 {
		return cutoff
	}
	return s.podCutoffAt(slices[len(slices)-1].acceptedAt(), cutoff)
}

// podCutoffAt is podCutoff of a pod whose newest slice was accepted at
// newest.
func (s *Store) podCutoffAt(newest, cutoff time.Time) time.Time {
	if from := newest.Add(-s.opts.Window + s.opts.Interval/2); from.After(cutoff) {
		return from
	}
	return cutoff
}

// sortPods returns pods ordered by comparePods. A PodSummary is some 400
// bytes: their indexes are sorted, and each is copied once.
func sortPods(pods []PodSummary) []PodSummary {
	order := make([]int, len(pods))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return comparePods(&pods[a], &pods[b]) })
	out := make([]PodSummary, len(pods))
	for i, k := range order {
		out[i] = pods[k]
	}
	return out
}

// comparePods orders stale pods first, then the slowest.
func comparePods(a, b *PodSummary) int {
	if a.Stale != b.Stale {
		if a.Stale {
			return -1
		}
		return 1
	}
	return cmp.Or(
		cmp.Compare(b.EndToEnd.P99, a.EndToEnd.P99),
		cmp.Compare(b.Dwell.P99, a.Dwell.P99),
		cmp.Compare(a.Pod, b.Pod),
		cmp.Compare(a.PodUID, b.PodUID),
	)
}

// Topic summarizes a Topic over the window; false when no pod reported it
// in the window.
func (s *Store) Topic(namespace, name string) (TopicSummary, bool) {
	now := s.opts.Now()
	cutoff := s.opts.cutoff(now)
	ns := s.rlockNamespace(namespace)
	if ns == nil {
		return TopicSummary{}, false
	}
	defer ns.mu.RUnlock()
	w := ns.topics[name]
	if w == nil {
		return TopicSummary{}, false
	}
	out := TopicSummary{WindowStart: s.windowStart(now), Window: s.opts.Window}
	refused := reasonSum{}
	for _, p := range w.pods {
		n := 0
		from := podCutoff(s, p.slices, cutoff)
		for _, sl := range p.slices {
			if !sl.at.After(from) {
				continue
			}
			n++
			out.Attempts = saturatingAdd(out.Attempts, sl.attempts)
			out.Forwarded = saturatingAdd(out.Forwarded, sl.forwarded)
			refused.add(sl.refused)
		}
		if n == 0 {
			continue
		}
		out.Pods++
		if p.isStale(now, s.opts.Interval) {
			out.StalePods++
		}
	}
	if out.Pods == 0 {
		return TopicSummary{}, false
	}
	out.Refused = refused.sorted()
	return out, true
}
