package reports

import (
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"google.golang.org/grpc/codes"
)

// Store keeps the accepted reports over a sliding window and answers
// summaries. It is a manager Runnable of the leader: Start evaluates
// staleness and eviction every Interval/2.
//
// A new leader starts empty: Started says when this Store began
// receiving, and summaries start their window at max(now−Window,
// Started).
type Store struct {
	opts      Options
	metrics   *metrics
	maxSlices int

	// mu guards the map of namespaces only; each namespace has its lock.
	mu         sync.Mutex
	namespaces map[string]*namespace

	series  atomic.Int64 // series held, against Options.MaxSeries
	bytes   atomic.Int64 // the memory estimate, against Options.MaxBytes
	started atomic.Pointer[time.Time]

	listenMu  sync.Mutex
	listeners []func(kind, namespace, name string)

	// gathered are changes to notify at a sweep once per interval
	// (gather); gatheredTaken is when they last were.
	gatheredMu    sync.Mutex
	gathered      map[change]struct{}
	gatheredTaken time.Time
}

// namespace is one namespace's series and windows.
type namespace struct {
	mu sync.RWMutex
	// dead is set when the namespace left Store.namespaces: whoever locked
	// it after looking it up must look it up again.
	dead   bool
	series map[seriesKey]*series
	// podSeries counts the series of each pod UID.
	podSeries     map[string]int
	subscriptions map[string]*policyWindow[*subscriptionSlice]
	topics        map[string]*policyWindow[*topicSlice]
}

func (ns *namespace) empty() bool {
	return len(ns.series) == 0 && len(ns.subscriptions) == 0 && len(ns.topics) == 0
}

// seriesKey is one sidecar process: its counters count from zero.
type seriesKey struct{ podUID, bootID string }

// series is what dedupes a sidecar process's reports and turns its totals
// into deltas.
type series struct {
	lastSequence uint64
	lastReport   time.Time
	// The totals of the last accepted report, per policy.
	subscriptions map[string]subscriptionTotals
	topics        map[string]topicTotals
	// bytes is what this series adds to the memory estimate.
	bytes int64
}

type subscriptionTotals struct {
	delivered int64
	dropped   reasons
}

type topicTotals struct {
	attempts, forwarded int64
	refused             reasons
}

// Estimated overheads of a series and of one policy's totals in it.
const (
	seriesBytes       = int64(unsafe.Sizeof(series{})) + 2*48 + 128
	policyTotalsBytes = 96
)

func newStore(opts Options, m *metrics) *Store {
	s := &Store{opts: opts, metrics: m, maxSlices: opts.maxSlices(), namespaces: map[string]*namespace{}}
	now := opts.Now()
	s.started.Store(&now)
	return s
}

// Started is when this Store began receiving: when it was created, or
// when it was started as the leader's.
func (s *Store) Started() time.Time { return *s.started.Load() }

// lockNamespace returns the namespace locked for writing, creating it.
func (s *Store) lockNamespace(name string) *namespace {
	for {
		s.mu.Lock()
		ns, ok := s.namespaces[name]
		if !ok {
			ns = &namespace{
				series:        map[seriesKey]*series{},
				podSeries:     map[string]int{},
				subscriptions: map[string]*policyWindow[*subscriptionSlice]{},
				topics:        map[string]*policyWindow[*topicSlice]{},
			}
			s.namespaces[name] = ns
		}
		s.mu.Unlock()
		ns.mu.Lock()
		if !ns.dead {
			return ns
		}
		ns.mu.Unlock()
	}
}

// rlockNamespace returns the namespace locked for reading, or nil.
func (s *Store) rlockNamespace(name string) *namespace {
	for {
		s.mu.Lock()
		ns, ok := s.namespaces[name]
		s.mu.Unlock()
		if !ok {
			return nil
		}
		ns.mu.RLock()
		if !ns.dead {
			return ns
		}
		ns.mu.RUnlock()
	}
}

// isDuplicate says whether the report numbered sequence of a series was
// accepted already. It is a shortcut: add checks again.
func (s *Store) isDuplicate(namespace, podUID, bootID string, sequence uint64) bool {
	ns := s.rlockNamespace(namespace)
	if ns == nil {
		return false
	}
	defer ns.mu.RUnlock()
	ser, ok := ns.series[seriesKey{podUID, bootID}]
	return ok && sequence <= ser.lastSequence
}

// add stores a checked report. A report of a sequence that its series
// accepted already is a duplicate: not stored again.
//
// A series first seen at sequence 1 started at zero with this report, so
// its totals are the delta. A series first seen later counted before
// this Store saw it (this replica just became the leader, or the series
// was silent for longer than the window): its totals are only a baseline,
// its counters count from its next report, and its first slice holds its
// histograms alone.
//
// Past the memory cap (Options.MaxBytes) the report's histograms are shed:
// its counters and kill states are stored, its latency is not (counted,
// and summaries say how many of their reports shed it). Past the cap and
// its headroom (a quarter more), which only counters can fill, the report
// is refused.
func (s *Store) add(r *checkedReport) (duplicate bool, refused *refusal) {
	b := s.bytes.Load()
	if hard := s.opts.hardMaxBytes(); b > hard {
		return false, refuse(codes.ResourceExhausted, refusedMemoryCap, "the operator holds about %d bytes of reports, past its cap of %d and the headroom above it (%d in all); retry later", b, s.opts.MaxBytes, hard)
	}
	shed := b > s.opts.MaxBytes
	now := s.opts.Now()
	cutoff := s.opts.replacedBy(now)
	ns := s.lockNamespace(r.namespace)
	defer ns.mu.Unlock()

	key := seriesKey{r.podUID, r.bootID}
	ser, known := ns.series[key]
	if known && r.sequence <= ser.lastSequence {
		return true, nil
	}
	var grown int64
	if !known {
		if ns.podSeries[r.podUID] >= MaxSeriesPerPod {
			return false, refuse(codes.ResourceExhausted, refusedPodSeriesCap, "pod %s/%s has %d report series (sidecar processes) in the window, the most one pod may have; retry later", r.namespace, r.pod, MaxSeriesPerPod)
		}
		if n := s.series.Add(1); n > int64(s.opts.MaxSeries) {
			s.series.Add(-1)
			return false, refuse(codes.ResourceExhausted, refusedSeriesCap, "the operator holds %d report series, its cap; retry later", s.opts.MaxSeries)
		}
		ser = &series{subscriptions: map[string]subscriptionTotals{}, topics: map[string]topicTotals{}, bytes: seriesBytes}
		ns.series[key] = ser
		ns.podSeries[r.podUID]++
		grown += seriesBytes
	}
	// Only a series seen from its start knows what its totals grew by.
	baseline := !known && r.sequence > 1
	grown += s.addSubscriptions(ns, ser, r, baseline, shed, now, cutoff)
	grown += s.addTopics(ns, ser, r, baseline, now, cutoff)
	ser.lastSequence, ser.lastReport = r.sequence, now
	s.bytes.Add(grown)
	s.metrics.series.Set(float64(s.series.Load()))
	s.metrics.bytes.Set(float64(s.bytes.Load()))
	return false, nil
}

// grew is delta(cur, prev), counting a total that shrank: a sidecar bug,
// since totals never shrink within a series (a restart is a new series).
func (s *Store) grew(cur, prev int64) int64 {
	if cur < prev {
		s.metrics.counterShrinks.Inc()
	}
	return delta(cur, prev)
}

// addSubscriptions stores the Subscriptions of r, a report of ser, and
// returns the bytes it grew the store by.
func (s *Store) addSubscriptions(ns *namespace, ser *series, r *checkedReport, baseline, shed bool, now, cutoff time.Time) (grown int64) {
	for i := range r.subscriptions {
		rep := &r.subscriptions[i]
		prev, had := ser.subscriptions[rep.name]
		if !had {
			ser.bytes += policyTotalsBytes
			grown += policyTotalsBytes
		}
		ser.subscriptions[rep.name] = subscriptionTotals{delivered: rep.delivered, dropped: rep.dropped}
		slice := &subscriptionSlice{at: now, endToEnd: rep.endToEnd, dwell: rep.dwell}
		if shed && !(slice.endToEnd.empty() && slice.dwell.empty()) {
			slice.endToEnd, slice.dwell, slice.shed = sparse{}, sparse{}, 1
			s.metrics.shed.Inc()
		}
		if !baseline {
			slice.delivered = s.grew(rep.delivered, prev.delivered)
			slice.dropped = rep.dropped.minus(prev.dropped, s.metrics.counterShrinks.Inc)
		}
		w := ns.subscriptions[rep.name]
		if w == nil {
			w = newPolicyWindow[*subscriptionSlice](true)
			ns.subscriptions[rep.name] = w
			grown += w.bytes()
		}
		p, created := w.pod(r.pod, r.podUID)
		if created {
			grown += podWindowBytes
		}
		grown += w.add(p, slice, cutoff, s.maxSlices)
		// A pod that joins or comes back, a kill switch that moved and
		// drops are told at once; the rest at the next sweep.
		c := change{KindSubscription, r.namespace, rep.name}
		if created || p.stale || p.kill != rep.kill || len(slice.dropped) > 0 {
			r.changed = append(r.changed, c)
		} else {
			r.gathered = append(r.gathered, c)
		}
		p.lastReport, p.kill, p.stale = now, rep.kill, false
	}
	return grown
}

// addTopics stores the Topics of r, a report of ser, and returns the
// bytes it grew the store by.
func (s *Store) addTopics(ns *namespace, ser *series, r *checkedReport, baseline bool, now, cutoff time.Time) (grown int64) {
	for i := range r.topics {
		rep := &r.topics[i]
		prev, had := ser.topics[rep.name]
		if !had {
			ser.bytes += policyTotalsBytes
			grown += policyTotalsBytes
		}
		ser.topics[rep.name] = topicTotals{attempts: rep.attempts, forwarded: rep.forwarded, refused: rep.refused}
		slice := &topicSlice{at: now}
		if !baseline {
			slice.attempts = s.grew(rep.attempts, prev.attempts)
			slice.forwarded = s.grew(rep.forwarded, prev.forwarded)
			slice.refused = rep.refused.minus(prev.refused, s.metrics.counterShrinks.Inc)
		}
		w := ns.topics[rep.name]
		if w == nil {
			w = newPolicyWindow[*topicSlice](false)
			ns.topics[rep.name] = w
			grown += w.bytes()
		}
		p, created := w.pod(r.pod, r.podUID)
		if created {
			grown += podWindowBytes
		}
		grown += w.add(p, slice, cutoff, s.maxSlices)
		c := change{KindTopic, r.namespace, rep.name}
		if created || p.stale || len(slice.refused) > 0 {
			r.changed = append(r.changed, c)
		} else {
			r.gathered = append(r.gathered, c)
		}
		p.lastReport, p.stale = now, false
	}
	return grown
}
