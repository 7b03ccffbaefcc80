package breaker_test

import (
	"testing"
	"time"

	"github.com/weighstation/weighstation/sidecar/breaker"
)

// step is one evaluation: after advancing the clock, observe o and expect
// the state that follows.
type step struct {
	after time.Duration
	o     breaker.Observation
	want  breaker.State
}

func TestBreakerStates(t *testing.T) {
	cfg := breaker.Config{MaxPending: 100, MaxLatency: 50 * time.Millisecond, Window: time.Second, Cooldown: 2 * time.Second}
	healthy := breaker.Observation{Pending: 10, P99: time.Millisecond, Replies: 100}
	tests := []struct {
		name  string
		steps []step
	}{
		{"healthy stays closed", []step{{0, healthy, breaker.Closed}, {time.Hour, healthy, breaker.Closed}}},
		{"pending under the threshold does not trip", []step{{0, breaker.Observation{Pending: 99}, breaker.Closed}}},
		{"pending reaching the threshold trips", []step{{0, breaker.Observation{Pending: 100}, breaker.Open}}},
		{"slow replies trip", []step{{0, breaker.Observation{P99: 51 * time.Millisecond, Replies: 10}, breaker.Open}}},
		{"too few replies are not judged", []step{{0, breaker.Observation{P99: time.Second, Replies: breaker.MinSamples - 1}, breaker.Closed}}},
		{"open until the cooldown, then on trial", []step{
			{0, breaker.Observation{Pending: 101}, breaker.Open},
			{1999 * time.Millisecond, healthy, breaker.Open},
			{time.Millisecond, healthy, breaker.HalfOpen},
		}},
		{"a healthy trial closes after a window", []step{
			{0, breaker.Observation{Pending: 101}, breaker.Open},
			{2 * time.Second, healthy, breaker.HalfOpen},
			{999 * time.Millisecond, healthy, breaker.HalfOpen},
			{time.Millisecond, healthy, breaker.Closed},
		}},
		{"on trial, half the pending threshold reopens", []step{
			{0, breaker.Observation{Pending: 101}, breaker.Open},
			{2 * time.Second, healthy, breaker.HalfOpen},
			{100 * time.Millisecond, breaker.Observation{Pending: 50}, breaker.Open},
		}},
		{"on trial, pending under half the threshold is healthy", []step{
			{0, breaker.Observation{Pending: 101}, breaker.Open},
			{2 * time.Second, healthy, breaker.HalfOpen},
			{time.Second, breaker.Observation{Pending: 49}, breaker.Closed},
		}},
		{"on trial, slow replies reopen", []step{
			{0, breaker.Observation{Pending: 101}, breaker.Open},
			{2 * time.Second, healthy, breaker.HalfOpen},
			{500 * time.Millisecond, breaker.Observation{P99: time.Second, Replies: 20}, breaker.Open},
			{2 * time.Second, healthy, breaker.HalfOpen},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1_000_000, 0)
			b := breaker.New(cfg, now)
			for i, s := range tc.steps {
				now = now.Add(s.after)
				tr, changed := b.Evaluate(now, s.o)
				got, reason, since := b.State()
				if got != s.want {
					t.Fatalf("step %d: state %s (%s), want %s", i, got, reason, s.want)
				}
				if changed && (tr.To != got || !since.Equal(now) || tr.Reason == "" || reason != tr.Reason) {
					t.Fatalf("step %d: transition %+v disagrees with state %s since %s (%s)", i, tr, got, since, reason)
				}
			}
		})
	}
}

func TestBreakerCountsTransitions(t *testing.T) {
	now := time.Unix(0, 0)
	b := breaker.New(breaker.Config{MaxPending: 1, Window: time.Second, Cooldown: time.Second}, now)
	over, fine := breaker.Observation{Pending: 2}, breaker.Observation{}
	for _, o := range []breaker.Observation{over, fine, fine, fine, over, fine} { // trip, trial, close, -, trip, trial
		now = now.Add(time.Second)
		b.Evaluate(now, o)
	}
	got := b.Transitions()
	want := map[[2]breaker.State]uint64{
		{breaker.Closed, breaker.Open}:     2,
		{breaker.Open, breaker.HalfOpen}:   2,
		{breaker.HalfOpen, breaker.Closed}: 1,
	}
	if len(got) != len(want) {
		t.Fatalf("transitions %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("transitions %v, want %v", got, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  breaker.Config
		ok   bool
	}{
		{"pending only", breaker.Config{MaxPending: 1, Window: time.Second, Cooldown: time.Second}, true},
		{"latency only", breaker.Config{MaxLatency: time.Millisecond, Window: time.Second, Cooldown: time.Second}, true},
		{"nothing to trip on", breaker.Config{Window: time.Second, Cooldown: time.Second}, false},
		{"no window", breaker.Config{MaxPending: 1, Cooldown: time.Second}, false},
		{"negative", breaker.Config{MaxPending: -1, Window: time.Second, Cooldown: time.Second}, false},
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func TestWindowJudgesOneToTwoWindows(t *testing.T) {
	now := time.Unix(0, 0)
	w := breaker.NewWindow(time.Second, now)
	for range 99 {
		w.Record(time.Millisecond, now)
	}
	w.Record(time.Second, now)
	w.Record(time.Second, now)
	if p99, n := w.P99(now); n != 101 || p99 < 990*time.Millisecond {
		t.Fatalf("p99 %s over %d replies, want about 1s over 101 (2 of 101 are slow)", p99, n)
	}
	// A window later the old replies still count; two windows later they
	// are gone.
	if _, n := w.P99(now.Add(1500 * time.Millisecond)); n != 101 {
		t.Fatalf("after 1.5 windows: %d replies, want 101", n)
	}
	if _, n := w.P99(now.Add(2 * time.Second)); n != 0 {
		t.Fatalf("after 2 windows: %d replies, want 0", n)
	}
	w.Record(time.Hour, now.Add(10*time.Second)) // clamped, not lost
	if p99, n := w.P99(now.Add(10 * time.Second)); n != 1 || p99 < 9*time.Minute {
		t.Fatalf("after an idle spell: p99 %s over %d, want the clamped maximum over 1", p99, n)
	}
	w.Reset(now.Add(10 * time.Second))
	if _, n := w.P99(now.Add(10 * time.Second)); n != 0 {
		t.Fatalf("after Reset: %d replies", n)
	}
}
