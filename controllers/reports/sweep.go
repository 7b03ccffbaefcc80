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
// listeners what changed.
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
		var freed int64
		for policy, w := range ns.subscriptions {
			f, changed := w.sweep(now, cutoff, s.opts.Interval)
			freed += f
			if changed {
				changes = append(changes, change{KindSubscription, name, policy})
			}
			if len(w.pods) == 0 {
				delete(ns.subscriptions, policy)
			}
		}
		for policy, w := range ns.topics {
			f, changed := w.sweep(now, cutoff, s.opts.Interval)
			freed += f
			if changed {
				changes = append(changes, change{KindTopic, name, policy})
			}
			if len(w.pods) == 0 {
				delete(ns.topics, policy)
			}
		}
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
	s.notify(changes)
}

// OnChange registers fn to be called with the kind (KindSubscription or
// KindTopic), namespace and name of every object whose summary changed:
// a report named it, a slice left its window, one of its pods turned
// stale or was forgotten. fn is called with no lock held, on the
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

// changesOf names the objects a stored report changed.
func changesOf(r *checkedReport) []change {
	out := make([]change, 0, len(r.subscriptions)+len(r.topics))
	for _, sub := range r.subscriptions {
		out = append(out, change{KindSubscription, r.namespace, sub.name})
	}
	for _, t := range r.topics {
		out = append(out, change{KindTopic, r.namespace, t.name})
	}
	return out
}
