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
// pod reported it in the window. It adds up the window's histograms: a few
// microseconds per slice (BenchmarkSubscriptionSummary), under the
// namespace's read lock.
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
	var allEndToEnd, allDwell, endToEnd, dwell accumulator
	defer func() {
		for _, a := range []*accumulator{&allEndToEnd, &allDwell, &endToEnd, &dwell} {
			a.release()
		}
	}()
	dropped := reasonSum{}
	for _, p := range w.pods {
		endToEnd.reset()
		dwell.reset()
		var delivered int64
		podDropped := reasonSum{}
		n := 0
		from := podCutoff(s, p.slices, cutoff)
		for _, sl := range p.slices {
			if !sl.at.After(from) {
				continue // before the pod's window, or sweep has not come by yet
			}
			n++
			endToEnd.add(sl.endToEnd)
			dwell.add(sl.dwell)
			allEndToEnd.add(sl.endToEnd)
			allDwell.add(sl.dwell)
			delivered = saturatingAdd(delivered, sl.delivered)
			podDropped.add(sl.dropped)
		}
		if n == 0 {
			continue
		}
		out.Pods = append(out.Pods, PodSummary{
			Pod: p.pod, PodUID: p.podUID,
			EndToEnd: endToEnd.latency(), Dwell: dwell.latency(),
			Delivered: delivered, Dropped: podDropped.sorted(),
			Kill: p.kill, LastReport: p.lastReport, Stale: p.isStale(now, s.opts.Interval),
		})
		out.Delivered = saturatingAdd(out.Delivered, delivered)
		for reason, c := range podDropped {
			dropped[reason] = saturatingAdd(dropped[reason], c)
		}
	}
	ns.mu.RUnlock()
	if len(out.Pods) == 0 {
		return SubscriptionSummary{}, false
	}
	out.EndToEnd, out.Dwell = allEndToEnd.latency(), allDwell.latency()
	out.Dropped = dropped.sorted()
	slices.SortFunc(out.Pods, comparePods)
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
	from := slices[len(slices)-1].acceptedAt().Add(-s.opts.Window + s.opts.Interval/2)
	if from.After(cutoff) {
		return from
	}
	return cutoff
}

// comparePods orders stale pods first, then the slowest.
func comparePods(a, b PodSummary) int {
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
