package main

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/weighstation/weighstation/sidecar"
	"github.com/weighstation/weighstation/sidecar/latency"
	"github.com/weighstation/weighstation/sidecar/pending"
	"github.com/weighstation/weighstation/sidecar/policy"
	"github.com/weighstation/weighstation/sidecar/report"
)

// The distributions the simulated sidecars record, in microseconds: those
// of the reports package's own benchmark (controllers/reports), lognormal.
// A moving Subscription's scale is movingScale times this every other
// half-period.
const (
	endToEndMedian = 2000.0
	endToEndSigma  = 1.0
	dwellMedian    = 300.0
	dwellSigma     = 1.2
	movingScale    = 1.5 // 2 ms -> 3 ms
)

// Sampling modes.
const (
	// samplingFresh draws new values every interval: real traffic, whose
	// window percentiles (the tails above all) carry sampling noise.
	samplingFresh = "fresh"
	// samplingRepeat records the same values every interval (one draw per
	// pod, Subscription and histogram): a steady flow whose window holds
	// exactly the same distribution at every report.
	samplingRepeat = "repeat"
)

// load is what every simulated sidecar records, the same for all.
type load struct {
	interval time.Duration
	values   int // per histogram per interval
	sampling string
	// halfPeriod is how many intervals a moving Subscription keeps one
	// scale before it switches to the other.
	halfPeriod int
	seed       uint64
}

// source is one simulated sidecar's measurements: a report.Source for
// sidecar/report's Reporter, which builds and sends the reports exactly
// as a sidecar's does. Its Subscriptions and Topics are those of the
// configuration the sidecar last applied. Time is counted in intervals
// from start: whenever the Reporter reads it, it first records every
// interval that ended since, load.values values per histogram, and the
// counters grow by as much (totals since boot).
type source struct {
	load   *load
	pod    int
	moving func(subscription string) bool
	topic  string // the Topic the pod publishes under

	mu        sync.Mutex
	subs      []string // of the configuration in force
	topics    []string
	start     time.Time // zero until started
	recorded  int       // intervals recorded
	series    map[string]*subSeries
	published uint64 // under topic
}

// subSeries is one Subscription's cumulative distributions ([0] dwell,
// [1] end-to-end, as Source.Latency orders them), kept packed (a dense
// 3-digit histogram is 136 KiB; a thousand sidecars keep six each).
type subSeries struct {
	rng       *rand.Rand
	moving    bool
	sample    [2][]int64 // samplingRepeat: the values of every interval
	cum       [2]*hdr.PackedHistogram
	delivered uint64
}

var _ report.Source = (*source)(nil)

func newSource(l *load, pod int, topic string, moving func(string) bool) *source {
	return &source{load: l, pod: pod, topic: topic, moving: moving, series: map[string]*subSeries{}}
}

// apply takes a configuration's Subscriptions and Topics.
func (s *source) apply(subs, topics []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subs, s.topics = subs, topics
}

// begin starts the clock: the first interval ends one interval from now.
func (s *source) begin(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.start = now
}

// catchUp records the intervals that ended by now. Call with s.mu held.
func (s *source) catchUp(now time.Time) {
	if s.start.IsZero() {
		return
	}
	due := int(now.Sub(s.start) / s.load.interval)
	for ; s.recorded < due; s.recorded++ {
		for _, name := range s.subs {
			s.seriesOf(name).record(s.load, s.scale(name))
		}
		s.published += uint64(s.load.values)
	}
}

// scale is a Subscription's scale in the interval being recorded: 1, or
// for a moving one movingScale in every other half-period.
func (s *source) scale(name string) float64 {
	if s.moving(name) && (s.recorded/s.load.halfPeriod)%2 == 1 {
		return movingScale
	}
	return 1
}

func (s *source) seriesOf(name string) *subSeries {
	if ser, ok := s.series[name]; ok {
		return ser
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	ser := &subSeries{rng: rand.New(rand.NewPCG(s.load.seed, uint64(s.pod)<<32^h.Sum64()))}
	for k := range ser.cum {
		ser.cum[k] = hdr.NewPacked(latency.MinMicros, latency.MaxMicros, latency.SignificantDigits)
	}
	if s.load.sampling == samplingRepeat {
		ser.sample = [2][]int64{ser.draw(s.load.values, dwellMedian, dwellSigma), ser.draw(s.load.values, endToEndMedian, endToEndSigma)}
	}
	s.series[name] = ser
	return ser
}

// record adds one interval of values at scale.
func (ser *subSeries) record(l *load, scale float64) {
	for k, dist := range [2]struct{ median, sigma float64 }{{dwellMedian, dwellSigma}, {endToEndMedian, endToEndSigma}} {
		values := ser.sample[k]
		if values == nil {
			values = ser.draw(l.values, dist.median, dist.sigma)
		}
		for _, v := range values {
			_ = ser.cum[k].RecordValue(clamp(int64(float64(v) * scale)))
		}
	}
	ser.delivered += uint64(l.values)
}

// draw is n values of the lognormal distribution of median and sigma (µs).
func (ser *subSeries) draw(n int, median, sigma float64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = clamp(int64(median * math.Exp(sigma*ser.rng.NormFloat64())))
	}
	return out
}

func clamp(v int64) int64 { return max(latency.MinMicros, min(v, latency.MaxMicros)) }

// ConfiguredPolicies implements report.Source.
func (s *source) ConfiguredPolicies() (subscriptions, topics []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.catchUp(time.Now())
	return s.subs, s.topics
}

// Latency implements report.Source: each Subscription's cumulative
// distributions, dense, as a sidecar's recorders hold them.
func (s *source) Latency() map[string][2]latency.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.catchUp(time.Now())
	out := make(map[string][2]latency.Snapshot, len(s.series))
	for name, ser := range s.series {
		var snap [2]latency.Snapshot
		for k, cum := range ser.cum {
			dense := hdr.New(latency.MinMicros, latency.MaxMicros, latency.SignificantDigits)
			cum.MergeInto(dense)
			snap[k] = latency.Snapshot{Histogram: dense}
		}
		out[name] = snap
	}
	return out
}

// PolicyTotals implements report.Source: every value is a delivery.
func (s *source) PolicyTotals() map[string]pending.Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.catchUp(time.Now())
	out := make(map[string]pending.Counts, len(s.series))
	for name, ser := range s.series {
		out[name] = pending.Counts{Arrived: ser.delivered, Delivered: ser.delivered}
	}
	return out
}

// KillSwitches implements report.Source: no switch is engaged.
func (s *source) KillSwitches() map[string]sidecar.KillSwitchStatus { return nil }

// TopicCounters implements report.Source: the pod's Topic, every publish
// forwarded.
func (s *source) TopicCounters() map[string]policy.CountsSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.catchUp(time.Now())
	if s.published == 0 {
		return nil
	}
	return map[string]policy.CountsSnapshot{s.topic: {Attempts: s.published, Forwarded: s.published}}
}
