package report_test

import (
	"regexp"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/sidecar"
	"github.com/weighstation/weighstation/sidecar/pending"
	"github.com/weighstation/weighstation/sidecar/policy"
	"github.com/weighstation/weighstation/sidecar/report"
)

// Each report's histograms hold the values recorded in its interval, and
// only those: the recorders are cumulative, the reports are not.
func TestHistogramsHoldOnlyTheIntervalsValues(t *testing.T) {
	op, conn := startOperator(t)
	src := newSource()
	src.configure([]string{"orders"}, nil)
	r := newReporter(t, src, tokenFile(t, "token"))
	run(t, r, conn)

	start := time.Now()
	steps := []struct {
		name            string
		replace         bool // the sidecar's recorders start over
		dwell, endToEnd []time.Duration
	}{
		{name: "the first interval", dwell: ms(1, 2, 50), endToEnd: ms(3, 4, 60)},
		{name: "the second interval", dwell: ms(2, 700), endToEnd: ms(5)},
		{name: "an interval without values"},
		{name: "only end-to-end values", endToEnd: ms(9, 9, 9)},
		{name: "recorders that started over", replace: true, dwell: ms(8)},
	}
	var previous *xdsv1.Report
	for i, step := range steps {
		if step.replace {
			src.replaceRecorders("orders")
		}
		src.record("orders", step.dwell, step.endToEnd)
		end := start.Add(time.Duration(i+1) * 10 * time.Second)
		r.CollectNow(end)
		got := op.next(t).report
		if got.GetSequence() != uint64(i+1) {
			t.Fatalf("%s: sequence %d, want %d", step.name, got.GetSequence(), i+1)
		}
		if len(got.GetSubscriptions()) != 1 || got.GetSubscriptions()[0].GetName() != "orders" {
			t.Fatalf("%s: subscriptions %v, want orders alone", step.name, got.GetSubscriptions())
		}
		sub := got.GetSubscriptions()[0]
		checkHistogram(t, step.name+", dwell", sub.GetDwellBuckets(), step.dwell...)
		checkHistogram(t, step.name+", end to end", sub.GetEndToEndBuckets(), step.endToEnd...)
		if !got.GetEnd().AsTime().Equal(end) {
			t.Errorf("%s: the interval ends at %v, want %v", step.name, got.GetEnd().AsTime(), end)
		}
		if previous != nil && !proto.Equal(got.GetStart(), previous.GetEnd()) {
			t.Errorf("%s: the interval starts at %v, not where the previous one ended (%v)", step.name, got.GetStart().AsTime(), previous.GetEnd().AsTime())
		}
		previous = got
	}
}

// The counters are totals since the sidecar started, reported as they are
// (a lost report loses none of them), with the reasons the sidecar's
// metrics use.
func TestCountersAreTotals(t *testing.T) {
	op, conn := startOperator(t)
	src := newSource()
	src.configure([]string{"orders"}, []string{"payments"})
	r := newReporter(t, src, tokenFile(t, "token"))
	run(t, r, conn)

	counts := func(delivered uint64, dropped map[pending.Reason]uint64) pending.Counts {
		c := pending.Counts{Arrived: delivered, Delivered: delivered}
		for reason, n := range dropped {
			c.Dropped[reason] = n
			c.Arrived += n
		}
		return c
	}
	steps := []struct {
		name        string
		totals      pending.Counts
		counters    policy.CountsSnapshot
		wantDropped []*xdsv1.ReasonCount
		wantTopic   *xdsv1.TopicReport
	}{
		{
			name:        "first",
			totals:      counts(5, map[pending.Reason]uint64{pending.ReasonOverflow: 2}),
			counters:    policy.CountsSnapshot{Attempts: 10, Forwarded: 7, RefusedAccess: 1, RefusedSize: 2},
			wantDropped: []*xdsv1.ReasonCount{{Reason: "overflow", Count: 2}},
			wantTopic: &xdsv1.TopicReport{Name: "payments", Attempts: 10, Forwarded: 7,
				Refused: []*xdsv1.ReasonCount{{Reason: "access", Count: 1}, {Reason: "size", Count: 2}}},
		},
		{
			name:        "second: totals again, not what changed",
			totals:      counts(8, map[pending.Reason]uint64{pending.ReasonOverflow: 2, pending.ReasonKilled: 1, pending.ReasonShed: 4}),
			counters:    policy.CountsSnapshot{Attempts: 16, Forwarded: 9, RefusedAccess: 1, RefusedSize: 2, RefusedRate: 3, FailedUpstream: 1},
			wantDropped: []*xdsv1.ReasonCount{{Reason: "overflow", Count: 2}, {Reason: "shed", Count: 4}, {Reason: "killed", Count: 1}},
			// FailedUpstream is no refusal: attempts - forwarded - refused.
			wantTopic: &xdsv1.TopicReport{Name: "payments", Attempts: 16, Forwarded: 9,
				Refused: []*xdsv1.ReasonCount{{Reason: "access", Count: 1}, {Reason: "size", Count: 2}, {Reason: "rate", Count: 3}}},
		},
	}
	for i, step := range steps {
		src.setTotals("orders", step.totals)
		src.setCounters("payments", step.counters)
		r.CollectNow(time.Now())
		got := op.next(t).report
		if got.GetSequence() != uint64(i+1) {
			t.Fatalf("%s: sequence %d", step.name, got.GetSequence())
		}
		want := &xdsv1.SubscriptionReport{Name: "orders", Delivered: step.totals.Delivered, Dropped: step.wantDropped, Kill: &xdsv1.KillState{}}
		if len(got.GetSubscriptions()) != 1 || !proto.Equal(got.GetSubscriptions()[0], want) {
			t.Errorf("%s: subscriptions\n%v\nwant\n%v", step.name, got.GetSubscriptions(), want)
		}
		if len(got.GetTopics()) != 1 || !proto.Equal(got.GetTopics()[0], step.wantTopic) {
			t.Errorf("%s: topics\n%v\nwant\n%v", step.name, got.GetTopics(), step.wantTopic)
		}
	}
}

// Only the configuration's policies are reported (the operator refuses a
// report naming another), and only those the applications used: a
// Subscription under which they subscribed, a Topic under which they
// published. A policy that leaves the configuration and comes back reports
// the values recorded since the previous report, never some twice.
func TestOnlyTheConfigurationsPoliciesInUseAreReported(t *testing.T) {
	op, conn := startOperator(t)
	src := newSource()
	r := newReporter(t, src, tokenFile(t, "token"))
	run(t, r, conn)
	for _, name := range []string{"a", "b", ""} { // "": SUBs no Subscription covers
		src.record(name, ms(1), nil)
		src.setTotals(name, pending.Counts{Delivered: 1})
	}
	for _, name := range []string{"t", "u", ""} { // "": the default policy
		src.setCounters(name, policy.CountsSnapshot{Attempts: 1, Forwarded: 1})
	}
	src.setCounters("unused", policy.CountsSnapshot{})

	names := func(got *xdsv1.Report) (subscriptions, topics []string) {
		for _, s := range got.GetSubscriptions() {
			subscriptions = append(subscriptions, s.GetName())
		}
		for _, tr := range got.GetTopics() {
			topics = append(topics, tr.GetName())
		}
		return subscriptions, topics
	}
	steps := []struct {
		name                  string
		subscriptions, topics []string // configured
		record                map[string][]time.Duration
		wantSubs, wantTopics  []string
		wantDwell             map[string][]time.Duration
	}{
		{
			name:          "a and t; c and unused are configured but unused",
			subscriptions: []string{"c", "a"}, topics: []string{"unused", "t"},
			wantSubs: []string{"a"}, wantTopics: []string{"t"},
			wantDwell: map[string][]time.Duration{"a": ms(1)},
		},
		{
			name:          "a leaves, b comes: b reports only what it recorded since the previous report",
			subscriptions: []string{"b"}, topics: []string{"u"},
			record:   map[string][]time.Duration{"a": ms(2), "b": ms(3)},
			wantSubs: []string{"b"}, wantTopics: []string{"u"},
			wantDwell: map[string][]time.Duration{"b": ms(3)},
		},
		{
			name:          "a comes back: the values it recorded while out are not reported",
			subscriptions: []string{"a", "b"},
			record:        map[string][]time.Duration{"a": ms(4)},
			wantSubs:      []string{"a", "b"},
			wantDwell:     map[string][]time.Duration{"a": ms(4), "b": nil},
		},
	}
	for _, step := range steps {
		src.configure(step.subscriptions, step.topics)
		for name, values := range step.record {
			src.record(name, values, nil)
		}
		r.CollectNow(time.Now())
		got := op.next(t).report
		subs, topics := names(got)
		if !slices.Equal(subs, step.wantSubs) || !slices.Equal(topics, step.wantTopics) {
			t.Errorf("%s: reported Subscriptions %q and Topics %q, want %q and %q", step.name, subs, topics, step.wantSubs, step.wantTopics)
			continue
		}
		for _, s := range got.GetSubscriptions() {
			checkHistogram(t, step.name+": "+s.GetName(), s.GetDwellBuckets(), step.wantDwell[s.GetName()]...)
		}
	}
}

// A Subscription's kill state says whether delivery is stopped, and why:
// Manual when the switch is engaged (whatever the breaker says), Auto when
// only the breaker tripped.
func TestKillStates(t *testing.T) {
	op, conn := startOperator(t)
	src := newSource()
	src.configure([]string{"orders"}, nil)
	src.setTotals("orders", pending.Counts{})
	r := newReporter(t, src, tokenFile(t, "token"))
	run(t, r, conn)
	since := time.Date(2026, 11, 23, 16, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		kill sidecar.KillSwitchStatus
		want *xdsv1.KillState
	}{
		{"not killed", sidecar.KillSwitchStatus{Reason: "configured", Since: since},
			&xdsv1.KillState{Reason: "configured", Since: timestamppb.New(since)}},
		{"engaged by hand", sidecar.KillSwitchStatus{Killed: true, Engaged: true, Reason: "kill switch engaged by hand: incident 42", Since: since},
			&xdsv1.KillState{Killed: true, Cause: "Manual", Reason: "kill switch engaged by hand: incident 42", Since: timestamppb.New(since)}},
		{"tripped", sidecar.KillSwitchStatus{Killed: true, Auto: true, Reason: "tripped: p99 2s over 1s", Since: since},
			&xdsv1.KillState{Killed: true, Cause: "Auto", Reason: "tripped: p99 2s over 1s", Since: timestamppb.New(since)}},
		{"engaged by hand with a breaker", sidecar.KillSwitchStatus{Killed: true, Engaged: true, Auto: true, Reason: "kill switch engaged by hand", Since: since},
			&xdsv1.KillState{Killed: true, Cause: "Manual", Reason: "kill switch engaged by hand", Since: timestamppb.New(since)}},
		{"tripped, then released", sidecar.KillSwitchStatus{Auto: true, Reason: "kill switch disengaged", Since: since},
			&xdsv1.KillState{Reason: "kill switch disengaged", Since: timestamppb.New(since)}},
	}
	for _, tc := range tests {
		src.setKill("orders", tc.kill)
		r.CollectNow(time.Now())
		got := op.next(t).report.GetSubscriptions()
		if len(got) != 1 || !proto.Equal(got[0].GetKill(), tc.want) {
			t.Errorf("%s: kill state %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Every Reporter is a new series: its own random boot ID, its sequence
// numbers from 1; every report names the pod and the schema.
func TestEachReporterIsANewBoot(t *testing.T) {
	op, conn := startOperator(t)
	src := newSource()
	token := tokenFile(t, "token")
	hex32 := regexp.MustCompile(`^[0-9a-f]{32}$`)
	seen := map[string]bool{}
	for i := range 3 {
		r := newReporter(t, src, token)
		if !hex32.MatchString(r.BootID()) || seen[r.BootID()] {
			t.Fatalf("reporter %d: boot ID %q: not 16 random bytes in hex, or seen before (%v)", i, r.BootID(), seen)
		}
		seen[r.BootID()] = true
		run(t, r, conn)
		for seq := uint64(1); seq <= 2; seq++ {
			r.CollectNow(time.Now())
			got := op.next(t).report
			if got.GetBootId() != r.BootID() || got.GetSequence() != seq || got.GetPodUid() != "pod-uid" || got.GetSchemaVersion() != report.SchemaVersion {
				t.Fatalf("reporter %d: boot %q sequence %d pod %q schema %d, want %q %d %q %d",
					i, got.GetBootId(), got.GetSequence(), got.GetPodUid(), got.GetSchemaVersion(), r.BootID(), seq, "pod-uid", report.SchemaVersion)
			}
		}
	}
}
