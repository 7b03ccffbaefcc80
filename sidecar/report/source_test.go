package report_test

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/weighstation/weighstation/sidecar"
	"github.com/weighstation/weighstation/sidecar/latency"
	"github.com/weighstation/weighstation/sidecar/pending"
	"github.com/weighstation/weighstation/sidecar/policy"
	"github.com/weighstation/weighstation/sidecar/report"
)

// The sidecar is the source of the reports.
var _ report.Source = (*sidecar.Server)(nil)

// source is a sidecar's measurements as a test sets them, with real
// latency recorders.
type source struct {
	mu            sync.Mutex
	subscriptions []string
	topics        []string
	recorders     map[string]*[2]*latency.Recorder
	totals        map[string]pending.Counts
	kills         map[string]sidecar.KillSwitchStatus
	counters      map[string]policy.CountsSnapshot
}

func newSource() *source {
	return &source{recorders: map[string]*[2]*latency.Recorder{}, totals: map[string]pending.Counts{},
		kills: map[string]sidecar.KillSwitchStatus{}, counters: map[string]policy.CountsSnapshot{}}
}

// configure sets the configuration's Subscriptions and Topics.
func (s *source) configure(subscriptions, topics []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subscriptions, s.topics = subscriptions, topics
}

// record adds latency values to a policy: dwell and end-to-end.
func (s *source) record(policyName string, dwell, endToEnd []time.Duration) {
	s.mu.Lock()
	r := s.recorders[policyName]
	if r == nil {
		r = &[2]*latency.Recorder{latency.NewRecorder(), latency.NewRecorder()}
		s.recorders[policyName] = r
	}
	s.mu.Unlock()
	for _, d := range dwell {
		r[0].Record(d)
	}
	for _, d := range endToEnd {
		r[1].Record(d)
	}
}

// replaceRecorders gives a policy new, empty recorders, as if the
// sidecar's had been reset.
func (s *source) replaceRecorders(policyName string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recorders[policyName] = &[2]*latency.Recorder{latency.NewRecorder(), latency.NewRecorder()}
}

func (s *source) setTotals(policyName string, c pending.Counts) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.totals[policyName] = c
}

func (s *source) setKill(policyName string, k sidecar.KillSwitchStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kills[policyName] = k
}

func (s *source) setCounters(topic string, c policy.CountsSnapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counters[topic] = c
}

func (s *source) ConfiguredPolicies() (subscriptions, topics []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.subscriptions), slices.Clone(s.topics)
}

func (s *source) Latency() map[string][2]latency.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][2]latency.Snapshot{}
	for name, r := range s.recorders {
		out[name] = [2]latency.Snapshot{r[0].Snapshot(), r[1].Snapshot()}
	}
	return out
}

func (s *source) PolicyTotals() map[string]pending.Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.totals)
}

func (s *source) KillSwitches() map[string]sidecar.KillSwitchStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.kills)
}

func (s *source) TopicCounters() map[string]policy.CountsSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.counters)
}
