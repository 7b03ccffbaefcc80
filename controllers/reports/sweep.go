package reports

import (
	"context"
	"time"
)

// NeedLeaderElection is true: only the leader receives reports, and a
// replica that becomes the leader starts empty.
func (s *Store) NeedLeaderElection() bool { return true }

// Start marks when this Store began receiving, then evaluates staleness
// and eviction every Interval/2 until ctx ends.
func (s *Store) Start(ctx context.Context) error {
	now := s.opts.Now()
	s.started.Store(&now)
	ticker := time.NewTicker(max(s.opts.Interval/2, time.Millisecond))
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			s.sweep()
		}
	}
}

// change names an object whose summary changed.
type change struct{ kind, namespace, name string }

// sweep evicts the slices that left the window (Options.cutoff), forgets
// the pods left with none, the policies left with no pod and the series
// silent for the window, records which pods turned stale, and tells the
// listeners what changed, and, once per interval, what reports changed
// since (gather).
func (s *Store) sweep() {
	now := s.opts.Now()
	cutoff, silent := s.opts.cutoff(now), now.Add(-s.opts.Window)
	s.mu.Lock()
	names := make(map[string]*namespace, len(s.namespaces))
	for name, ns := range s.namespaces {
		names[name] = ns
	}
	s.mu.Unlock()

	var changes []change
	var emptied []string
	for name, ns := range names {
		ns.mu.Lock()
		if ns.dead {
			ns.mu.Unlock()
			continue
		}
		freed := sweepWindows(ns.subscriptions, KindSubscription, name, now, cutoff, s.opts.Interval, &changes)
		freed += sweepWindows(ns.topics, KindTopic, name, now, cutoff, s.opts.Interval, &changes)
		for key, ser := range ns.series {
			if !ser.lastReport.After(silent) {
				delete(ns.series, key)
				if ns.podSeries[key.podUID]--; ns.podSeries[key.podUID] <= 0 {
					delete(ns.podSeries, key.podUID)
				}
				freed += ser.bytes
				s.series.Add(-1)
			}
		}
		if ns.empty() {
			emptied = append(emptied, name)
		}
		ns.mu.Unlock()
		s.bytes.Add(-freed)
	}
	for _, name := range emptied {
		s.mu.Lock()
		if ns := s.namespaces[name]; ns != nil {
			ns.mu.Lock()
			// A report may have landed since: look again under both locks.
			if ns.empty() {
				ns.dead = true
				delete(s.namespaces, name)
			}
			ns.mu.Unlock()
		}
		s.mu.Unlock()
	}
	s.metrics.series.Set(float64(s.series.Load()))
	s.metrics.bytes.Set(float64(s.bytes.Load()))
	gathered := s.takeGathered(now)
	for _, c := range changes {
		delete(gathered, c)
	}
	for c := range gathered {
		changes = append(changes, c)
	}
	s.notify(changes)
}

// sweepWindows sweeps the windows of one kind of policy of namespace,
// adds those that changed to changes, forgets those left with no pod, and
// returns the bytes freed.
func sweepWindows[S windowSlice[S]](windows map[string]*policyWindow[S], kind, namespace string, now, cutoff time.Time, interval time.Duration, changes *[]change) (freed int64) {
	for policy, w := range windows {
		f, changed := w.sweep(now, cutoff, interval)
		freed += f
		if changed {
			*changes = append(*changes, change{kind, namespace, policy})
		}
		if len(w.pods) == 0 {
			delete(windows, policy)
			freed += w.bytes()
		}
	}
	return freed
}

// OnChange registers fn to be called with the kind (KindSubscription or
// KindTopic), namespace and name of every object whose summary changed:
// a report named it, a slice left its window, one of its pods turned
// stale or was forgotten. A report that only adds to the latencies and
// counts of a pod already in the window is told at a sweep once per
// Interval, once per object however many came (gather); the rest at
// once. fn is called with no lock held, on the
// goroutine of a report's stream or of Start: it must not block (queue
// the object, as a workqueue does).
func (s *Store) OnChange(fn func(kind, namespace, name string)) {
	s.listenMu.Lock()
	defer s.listenMu.Unlock()
	s.listeners = append(s.listeners, fn)
}

func (s *Store) notify(changes []change) {
	if len(changes) == 0 {
		return
	}
	s.listenMu.Lock()
	listeners := s.listeners
	s.listenMu.Unlock()
	for _, c := range changes {
		for _, fn := range listeners {
			fn(c.kind, c.namespace, c.name)
		}
	}
}

// gather keeps changes to notify once per interval, at a sweep, once
// each: the latencies and counts of pods that were reporting already. The
// status writer writes an object at most once per write interval and only
// on a material change, and a Subscription's pods report all through the
// interval: told of each report, it would summarize each object at every
// report (about once a second for 10 pods) to find nothing to write.
// Gathered, each object is summarized about once per interval, with every
// pod's report of that interval in it, plus when a pod joins, comes back,
// changes its kill state or drops messages (told at once).
func (s *Store) gather(changes []change) {
	if len(changes) == 0 {
		return
	}
	s.gatheredMu.Lock()
	if s.gathered == nil {
		s.gathered = map[change]struct{}{}
	}
	for _, c := range changes {
		s.gathered[c] = struct{}{}
	}
	s.gatheredMu.Unlock()
}

// takeGathered returns the gathered changes and forgets them, if the
// last were taken an interval ago (give or take a quarter, the sweeps'
// ticks); else nothing.
func (s *Store) takeGathered(now time.Time) map[change]struct{} {
	s.gatheredMu.Lock()
	defer s.gatheredMu.Unlock()
	if now.Sub(s.gatheredTaken) < s.opts.Interval-s.opts.Interval/4 && now.After(s.gatheredTaken) {
		return nil
	}
	g := s.gathered
	s.gathered, s.gatheredTaken = nil, now
	return g
}
