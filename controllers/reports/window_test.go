package reports

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
)

// billingAt is a report of pod's billing with delivered as its total and
// one end-to-end value.
func billingAt(t testing.TB, pod int, boot string, seq, delivered uint64, value int64) *xdsv1.Report {
	return report(identity(pod).PodUID, boot, seq, []*xdsv1.SubscriptionReport{subReport(t, "billing", delivered, []int64{value}, nil)},
		topicRep("orders", 2*delivered, delivered))
}

func TestSlicesLeaveTheWindow(t *testing.T) {
	clk := newClock()
	t0 := clk.Now()
	svc, _ := newTestService(t, clk, nil) // window 1 min, interval 10 s
	store := svc.Store()
	// Six reports, 10 s apart: each delivered 10 more and recorded one value.
	for seq := uint64(1); seq <= 6; seq++ {
		if seq > 1 {
			clk.Advance(10 * time.Second)
		}
		mustAccept(t, svc, 0, billingAt(t, 0, "a", seq, 10*seq, 1000))
	}
	cases := []struct {
		at        time.Duration // since the first report
		delivered int64         // want; 0: nothing in the window
		values    int64
	}{
		{at: 50 * time.Second, delivered: 60, values: 6},
		// The first report is a window old, but no newer report replaced
		// it (the next is due now): it stays for half an interval more.
		{at: 60 * time.Second, delivered: 60, values: 6},
		{at: 65*time.Second - time.Nanosecond, delivered: 60, values: 6},
		// A window and half an interval old: out.
		{at: 65 * time.Second, delivered: 50, values: 5},
		{at: 105 * time.Second, delivered: 10, values: 1},
		{at: 115*time.Second - time.Nanosecond, delivered: 10, values: 1},
		{at: 115 * time.Second},
	}
	for _, tc := range cases {
		clk.mu.Lock()
		clk.now = t0.Add(tc.at)
		clk.mu.Unlock()
		sum, ok := store.Subscription("shop", "billing")
		topic, topicOK := store.Topic("shop", "orders")
		if tc.delivered == 0 {
			if ok || topicOK {
				t.Errorf("at +%v: a summary of nothing: %+v, %+v", tc.at, sum, topic)
			}
			continue
		}
		if !ok || sum.Delivered != tc.delivered || sum.EndToEnd.Count != tc.values || sum.Pods[0].Delivered != tc.delivered {
			t.Errorf("at +%v: delivered %d, values %d; want %d, %d", tc.at, sum.Delivered, sum.EndToEnd.Count, tc.delivered, tc.values)
		}
		if !topicOK || topic.Forwarded != tc.delivered || topic.Attempts != 2*tc.delivered {
			t.Errorf("at +%v: Topic %+v; want forwarded %d, attempts %d", tc.at, topic, tc.delivered, 2*tc.delivered)
		}
	}
}

func TestWindowStartIsTheLaterOfWindowAndStarted(t *testing.T) {
	clk := newClock()
	started := clk.Now()
	svc, _ := newTestService(t, clk, nil)
	cases := []struct {
		since time.Duration // of Started, when asked
		want  time.Time
	}{
		{since: 0, want: started},
		{since: 30 * time.Second, want: started},
		{since: time.Minute, want: started},
		{since: 90 * time.Second, want: started.Add(30 * time.Second)},
	}
	for _, tc := range cases {
		clk.mu.Lock()
		clk.now = started.Add(tc.since)
		clk.mu.Unlock()
		mustAccept(t, svc, 0, billingAt(t, 0, "a", uint64(tc.since/time.Second)+1, 1, 1))
		sum, ok := svc.Store().Subscription("shop", "billing")
		if !ok || !sum.WindowStart.Equal(tc.want) || sum.Window != time.Minute {
			t.Errorf("at Started+%v: window start %v (window %v), want %v", tc.since, sum.WindowStart, sum.Window, tc.want)
		}
		topic, _ := svc.Store().Topic("shop", "orders")
		if !topic.WindowStart.Equal(tc.want) {
			t.Errorf("at Started+%v: Topic window start %v, want %v", tc.since, topic.WindowStart, tc.want)
		}
	}
}

func TestAPodTurnsStaleAfterTwoIntervals(t *testing.T) {
	clk := newClock()
	t0 := clk.Now()
	svc, _ := newTestService(t, clk, nil)
	store := svc.Store()
	rec := newRecorder(store)
	killed := func(pod int, seq uint64, cause string) *xdsv1.Report {
		r := billingAt(t, pod, "a", seq, seq, 100)
		r.Subscriptions[0].Kill = &xdsv1.KillState{Killed: true, Cause: cause, Reason: "test", Since: timestamppb.New(t0)}
		return r
	}
	mustAccept(t, svc, 0, killed(0, 1, KillCauseAuto))
	mustAccept(t, svc, 1, killed(1, 1, KillCauseManual))
	clk.Advance(10 * time.Second)
	mustAccept(t, svc, 1, killed(1, 2, KillCauseManual))
	clk.Advance(10 * time.Second)
	mustAccept(t, svc, 1, killed(1, 3, KillCauseManual))
	store.sweep() // tells what the reports changed
	rec.take()

	// Exactly 2 intervals since pod-0's report: not stale yet.
	store.sweep()
	sum, _ := store.Subscription("shop", "billing")
	if sum.StalePods != 0 || sum.KilledAuto != 1 || sum.KilledManual != 1 || sum.Pods[0].Stale || sum.Pods[1].Stale {
		t.Fatalf("at 2 intervals: %+v", sum)
	}
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("notified %v with nothing changed", got)
	}

	clk.Advance(time.Nanosecond)
	sum, _ = store.Subscription("shop", "billing")
	if sum.StalePods != 1 || sum.ReportingPods != 2 || !sum.Pods[0].Stale || sum.Pods[0].Pod != "pod-0" || sum.Pods[1].Stale {
		t.Fatalf("past 2 intervals: pods %+v", sum.Pods)
	}
	// A stale pod's kill state is not counted: it may be gone.
	if sum.KilledAuto != 0 || sum.KilledManual != 1 {
		t.Fatalf("killed auto %d, manual %d; want 0, 1", sum.KilledAuto, sum.KilledManual)
	}
	if !sum.Pods[0].LastReport.Equal(t0) || sum.Pods[0].Kill.Cause != KillCauseAuto || !sum.Pods[0].Kill.Since.Equal(t0) {
		t.Fatalf("pod-0 %+v", sum.Pods[0])
	}
	store.sweep()
	if got, want := rec.take(), []string{"Subscription shop/billing", "Topic shop/orders"}; !equalSets(got, want) {
		t.Fatalf("turning stale notified %v, want %v", got, want)
	}
	store.sweep()
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("a second sweep notified %v", got)
	}
	// Reporting again makes it fresh.
	mustAccept(t, svc, 0, killed(0, 2, KillCauseAuto))
	if sum, _ = store.Subscription("shop", "billing"); sum.StalePods != 0 || sum.KilledAuto != 1 {
		t.Fatalf("after a new report: %+v", sum)
	}
}

func TestAPodIsForgottenOnceItsLastReportLeavesTheWindow(t *testing.T) {
	clk := newClock()
	svc, reg := newTestService(t, clk, nil)
	_ = reg
	store := svc.Store()
	rec := newRecorder(store)
	mustAccept(t, svc, 0, billingAt(t, 0, "a", 1, 5, 100))
	mustAccept(t, svc, 1, billingAt(t, 1, "a", 1, 5, 100))
	clk.Advance(30 * time.Second)
	mustAccept(t, svc, 1, billingAt(t, 1, "a", 2, 7, 100))
	rec.take()
	if store.bytes.Load() <= 0 || store.series.Load() != 2 {
		t.Fatalf("holding %d bytes, %d series", store.bytes.Load(), store.series.Load())
	}

	clk.Advance(35*time.Second - time.Nanosecond)
	store.sweep()
	if sum, _ := store.Subscription("shop", "billing"); len(sum.Pods) != 2 {
		t.Fatalf("pods %+v, want both until a window and half an interval have passed", sum.Pods)
	}
	rec.take() // pod-0 turned stale

	clk.Advance(time.Nanosecond) // pod-0's report is a window and half an interval old
	store.sweep()
	sum, _ := store.Subscription("shop", "billing")
	if len(sum.Pods) != 1 || sum.Pods[0].Pod != "pod-1" || sum.Delivered != 2 {
		t.Fatalf("pods %+v, delivered %d; want pod-1 alone, 2", sum.Pods, sum.Delivered)
	}
	if got, want := rec.take(), []string{"Subscription shop/billing", "Topic shop/orders"}; !equalSets(got, want) {
		t.Fatalf("forgetting pod-0 notified %v, want %v", got, want)
	}
	if store.series.Load() != 1 {
		t.Fatalf("%d series, want 1", store.series.Load())
	}

	clk.Advance(30 * time.Second)
	store.sweep()
	if _, ok := store.Subscription("shop", "billing"); ok {
		t.Fatal("billing is summarized with every report out of the window")
	}
	if _, ok := store.Topic("shop", "orders"); ok {
		t.Fatal("orders is summarized with every report out of the window")
	}
	// Everything accounted for was given back.
	if b, n := store.bytes.Load(), store.series.Load(); b != 0 || n != 0 {
		t.Fatalf("holding %d bytes, %d series with nothing in the window", b, n)
	}
	if len(store.namespaces) != 0 {
		t.Fatalf("namespaces %v left", store.namespaces)
	}
	if got := value(svc.metrics.bytes); got != 0 {
		t.Fatalf("memory gauge %v", got)
	}
}

func TestReportsFasterThanTheIntervalAreMergedNotAdded(t *testing.T) {
	clk := newClock()
	svc, _ := newTestService(t, clk, nil)
	const n = 40
	for seq := uint64(1); seq <= n; seq++ {
		clk.Advance(100 * time.Millisecond)
		mustAccept(t, svc, 0, billingAt(t, 0, "a", seq, 3*seq, int64(seq)))
	}
	ns := svc.Store().namespaces["shop"]
	if got, want := len(ns.subscriptions["billing"].pods["uid-0"].slices), svc.Store().maxSlices; got != want {
		t.Fatalf("%d slices, want the cap %d", got, want)
	}
	sum, _ := svc.Store().Subscription("shop", "billing")
	if sum.Delivered != 3*n || sum.EndToEnd.Count != n || sum.EndToEnd.Max != n*time.Microsecond {
		t.Fatalf("delivered %d, values %d, max %v; want %d, %d, %dµs", sum.Delivered, sum.EndToEnd.Count, sum.EndToEnd.Max, 3*n, n, n)
	}
}

func TestASeriesFirstSeenLateCountsFromItsNextReport(t *testing.T) {
	clk := newClock()
	svc, _ := newTestService(t, clk, nil)
	// A new leader hears from a sidecar that has counted for hours.
	mustAccept(t, svc, 0, billingAt(t, 0, "a", 4000, 1_000_000, 100))
	sum, _ := svc.Store().Subscription("shop", "billing")
	if sum.Delivered != 0 || sum.EndToEnd.Count != 1 {
		t.Fatalf("delivered %d, values %d; want 0 (a baseline), 1", sum.Delivered, sum.EndToEnd.Count)
	}
	clk.Advance(10 * time.Second)
	// A report was lost: its counts are in the next one's totals.
	mustAccept(t, svc, 0, billingAt(t, 0, "a", 4002, 1_000_025, 100))
	if sum, _ = svc.Store().Subscription("shop", "billing"); sum.Delivered != 25 {
		t.Fatalf("delivered %d, want 25", sum.Delivered)
	}
}

// TestACounterThatShrinksCountsNothing: and the metric says it happened.
func TestACounterThatShrinksCountsNothing(t *testing.T) {
	clk := newClock()
	svc, _ := newTestService(t, clk, nil)
	mustAccept(t, svc, 0, billingAt(t, 0, "a", 1, 50, 100))
	mustAccept(t, svc, 0, billingAt(t, 0, "a", 2, 40, 100)) // a sidecar bug
	mustAccept(t, svc, 0, billingAt(t, 0, "a", 3, 45, 100))
	if sum, _ := svc.Store().Subscription("shop", "billing"); sum.Delivered != 55 {
		t.Fatalf("delivered %d, want 50 + 0 + 5", sum.Delivered)
	}
	// The second report's delivered, and its Topic's attempts and
	// forwarded, shrank.
	if got := value(svc.metrics.counterShrinks); got != 3 {
		t.Fatalf("weighstation_operator_reports_counter_shrinks_total = %v, want 3", got)
	}
}

func TestCapsRefuseWithResourceExhausted(t *testing.T) {
	t.Run("series", func(t *testing.T) {
		clk := newClock()
		svc, _ := newTestService(t, clk, func(o *Options) { o.MaxSeries = 2 })
		mustAccept(t, svc, 0, billingAt(t, 0, "a", 1, 1, 1))
		mustAccept(t, svc, 1, billingAt(t, 1, "a", 1, 1, 1))
		refused := svc.accept(identity(0), billingAt(t, 0, "b", 1, 1, 1))
		if status.Code(refused) != codes.ResourceExhausted {
			t.Fatalf("a third series: %v, want ResourceExhausted", refused)
		}
		// Known series go on.
		mustAccept(t, svc, 0, billingAt(t, 0, "a", 2, 2, 1))
		// Once the window forgot one, there is room.
		clk.Advance(time.Minute)
		mustAccept(t, svc, 1, billingAt(t, 1, "a", 2, 2, 1))
		svc.Store().sweep()
		mustAccept(t, svc, 0, billingAt(t, 0, "b", 1, 1, 1))
	})
	t.Run("series of one pod", func(t *testing.T) {
		clk := newClock()
		svc, _ := newTestService(t, clk, nil)
		for boot := range MaxSeriesPerPod {
			mustAccept(t, svc, 0, billingAt(t, 0, string(rune('a'+boot)), 1, 1, 1))
		}
		refused := svc.accept(identity(0), billingAt(t, 0, "z", 1, 1, 1))
		if status.Code(refused) != codes.ResourceExhausted {
			t.Fatalf("series %d of one pod: %v, want ResourceExhausted", MaxSeriesPerPod+1, refused)
		}
		// Other pods are not held back by it.
		mustAccept(t, svc, 1, billingAt(t, 1, "z", 1, 1, 1))
		clk.Advance(time.Minute)
		svc.Store().sweep()
		mustAccept(t, svc, 0, billingAt(t, 0, "z", 1, 1, 1))
	})
	t.Run("memory", func(t *testing.T) {
		svc, _ := newTestService(t, newClock(), func(o *Options) { o.MaxBytes = 1 })
		mustAccept(t, svc, 0, billingAt(t, 0, "a", 1, 1, 1))
		refused := svc.accept(identity(0), billingAt(t, 0, "a", 2, 1, 1))
		if status.Code(refused) != codes.ResourceExhausted {
			t.Fatalf("past the memory cap: %v, want ResourceExhausted", refused)
		}
	})
}

func TestPodsAreOrderedStaleFirstThenSlowest(t *testing.T) {
	clk := newClock()
	svc, _ := newTestService(t, clk, nil)
	mustAccept(t, svc, 4, billingAt(t, 4, "a", 1, 1, 50)) // will be stale
	clk.Advance(25 * time.Second)
	for pod, value := range map[int]int64{0: 100, 1: 5000, 2: 5000, 3: 70_000} {
		mustAccept(t, svc, pod, billingAt(t, pod, "a", 1, 1, value))
	}
	sum, _ := svc.Store().Subscription("shop", "billing")
	var got []string
	for _, p := range sum.Pods {
		got = append(got, p.Pod)
	}
	if want := []string{"pod-4", "pod-3", "pod-1", "pod-2", "pod-0"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

// A report that only adds to the latencies and counts of pods already in
// the window is told at a sweep an interval after the last were, once per
// object; one that changes what status shows at a glance is told at once.
func TestWhatAReportChangesIsToldAtOnceOrAtTheNextSweep(t *testing.T) {
	plain := func(pod int, seq uint64) *xdsv1.Report { return billingAt(t, pod, "a", seq, seq, 100) }
	both := []string{"Subscription shop/billing", "Topic shop/orders"}
	cases := []struct {
		name   string
		report func(seq uint64) *xdsv1.Report // the report after pod 0's first (seq 2), and the next (3)
		pod    int
		now    []string // told at once, of the report seq 2
		sweep  []string // told at the next sweep, after the report seq 3
	}{
		{"the same pod again", func(seq uint64) *xdsv1.Report { return plain(0, seq) }, 0, nil, both},
		{"a pod that joins, then reports again", func(seq uint64) *xdsv1.Report { return plain(1, seq-1) }, 1, both, both},
		{"a kill switch engaged, then still", func(seq uint64) *xdsv1.Report {
			r := plain(0, seq)
			r.Subscriptions[0].Kill = &xdsv1.KillState{Killed: true, Cause: KillCauseManual}
			return r
		}, 0, []string{"Subscription shop/billing"}, both},
		{"drops, and more", func(seq uint64) *xdsv1.Report {
			r := plain(0, seq)
			r.Subscriptions[0].Dropped = []*xdsv1.ReasonCount{reason("overflow", seq)}
			return r
		}, 0, []string{"Subscription shop/billing"}, []string{"Topic shop/orders"}},
		{"refused publishes, and more", func(seq uint64) *xdsv1.Report {
			r := plain(0, seq)
			r.Topics[0].Refused = []*xdsv1.ReasonCount{reason("rate", seq)}
			return r
		}, 0, []string{"Topic shop/orders"}, []string{"Subscription shop/billing"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			svc, _ := newTestService(t, clk, nil)
			store := svc.Store()
			rec := newRecorder(store)
			mustAccept(t, svc, 0, plain(0, 1))
			store.sweep()
			rec.take()
			clk.Advance(time.Second)
			mustAccept(t, svc, tc.pod, tc.report(2))
			if got := rec.take(); !equalSets(got, tc.now) {
				t.Fatalf("told at once %v, want %v", got, tc.now)
			}
			clk.Advance(time.Second)
			mustAccept(t, svc, tc.pod, tc.report(3))
			rec.take()
			store.sweep()
			if got := rec.take(); len(got) != 0 {
				t.Fatalf("a sweep within the interval told %v", got)
			}
			clk.Advance(10 * time.Second)
			store.sweep()
			// Both reports' other changes, once, an interval after the last
			// were told.
			if got := rec.take(); !equalSets(got, tc.sweep) {
				t.Fatalf("told at the sweep %v, want %v", got, tc.sweep)
			}
			clk.Advance(5 * time.Second)
			store.sweep()
			if got := rec.take(); len(got) != 0 {
				t.Fatalf("the next sweep told %v", got)
			}
		})
	}
}

func TestAReportNotifiesItsPolicies(t *testing.T) {
	svc, _ := newTestService(t, newClock(), nil)
	rec := newRecorder(svc.Store())
	mustAccept(t, svc, 0, report("uid-0", "a", 1,
		[]*xdsv1.SubscriptionReport{subReport(t, "billing", 1, nil, nil), subReport(t, "fraud", 1, nil, nil)},
		topicRep("audit", 1, 0)))
	if got, want := rec.take(), []string{"Subscription shop/billing", "Subscription shop/fraud", "Topic shop/audit"}; !equalSets(got, want) {
		t.Fatalf("notified %v, want %v", got, want)
	}
	// A duplicate changes nothing.
	mustAccept(t, svc, 0, report("uid-0", "a", 1, nil))
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("a duplicate notified %v", got)
	}
}

// The Store runs in the manager, on the leader alone.
var (
	_ manager.Runnable               = (*Store)(nil)
	_ manager.LeaderElectionRunnable = (*Store)(nil)
)

func TestStartSweepsUntilStopped(t *testing.T) {
	clk := newClock()
	svc, _ := newTestService(t, clk, func(o *Options) { o.Interval = 20 * time.Millisecond })
	store := svc.Store()
	if !store.NeedLeaderElection() {
		t.Fatal("the store must run on the leader alone")
	}
	rec := newRecorder(store)
	mustAccept(t, svc, 0, billingAt(t, 0, "a", 1, 1, 1))
	<-rec.ch // the report's own notifications
	<-rec.ch

	becameLeader := clk.Advance(time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- store.Start(ctx) }()
	select {
	case got := <-rec.ch:
		if got != "Subscription shop/billing" && got != "Topic shop/orders" {
			t.Fatalf("notified %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no sweep within 10s")
	}
	if !store.Started().Equal(becameLeader) {
		t.Fatalf("started %v, want %v (when Start ran)", store.Started(), becameLeader)
	}
	if _, ok := store.Subscription("shop", "billing"); ok {
		t.Fatal("still summarized after the sweep")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return within 10s of its context's end")
	}
}

func equalSets(got, want []string) bool {
	got, want = slices.Clone(got), slices.Clone(want)
	slices.Sort(got)
	slices.Sort(want)
	return slices.Equal(got, want)
}

func TestTheStoreDedupesOnItsOwn(t *testing.T) {
	// Two streams of one pod (an old one not yet closed, and its
	// reconnection) may both pass the service's shortcut check with the
	// same report: the store decides under its lock.
	svc, _ := newTestService(t, newClock(), nil)
	checked, refused := decodeReport(identity(0), billingAt(t, 0, "a", 1, 10, 100))
	if refused != nil {
		t.Fatal(refused)
	}
	for i, want := range []bool{false, true, true} {
		duplicate, refused := svc.Store().add(checked)
		if refused != nil || duplicate != want {
			t.Fatalf("add #%d: duplicate %v (%v), want %v", i+1, duplicate, refused, want)
		}
	}
	if sum, _ := svc.Store().Subscription("shop", "billing"); sum.Delivered != 10 || sum.EndToEnd.Count != 1 {
		t.Fatalf("delivered %d, values %d; want 10, 1", sum.Delivered, sum.EndToEnd.Count)
	}
}

func TestASteadyPodHoldsOneWindowOfSlicesAndGivesEveryByteBack(t *testing.T) {
	clk := newClock()
	svc, _ := newTestService(t, clk, nil)
	store := svc.Store()
	rng := newRand(1)
	var peak int64
	for seq := uint64(1); seq <= 30; seq++ {
		r := report("uid-0", "a", seq, []*xdsv1.SubscriptionReport{
			subReport(t, "billing", seq*100, lognormal(rng, 200, 2000, 1), lognormal(rng, 200, 200, 1), reason("overflow", seq)),
		}, topicRep("orders", seq, seq, reason("rate", seq)))
		mustAccept(t, svc, 0, r)
		// Reports every interval fill the window with 6 slices: each report
		// drops the one that left, sweep or no sweep.
		if got, want := len(store.namespaces["shop"].subscriptions["billing"].pods["uid-0"].slices), min(int(seq), 6); got != want {
			t.Fatalf("after report %d: %d slices, want %d", seq, got, want)
		}
		peak = max(peak, store.bytes.Load())
		clk.Advance(10 * time.Second)
	}
	// The next report is due: the oldest stays until it replaces it.
	if sum, _ := store.Subscription("shop", "billing"); sum.Delivered != 600 || sum.EndToEnd.Count != 1200 {
		t.Fatalf("delivered %d, values %d; want 6×100, 6×200 (the report at the window's edge stays until the next)", sum.Delivered, sum.EndToEnd.Count)
	}
	clk.Advance(time.Minute)
	store.sweep()
	if b := store.bytes.Load(); b != 0 {
		t.Fatalf("%d bytes still counted with nothing held (peak %d)", b, peak)
	}
}

// TestASteadyFlowSummarizesTheSameAtEveryReport: a pod reporting the same
// traffic every interval, each report up to just under a quarter interval early or
// late, has the same window totals after every report once the window is
// full, and just before each report too (a Subscription's other pods
// report all through the interval, and each has it summarized): what
// status compares to decide whether to write.
func TestASteadyFlowSummarizesTheSameAtEveryReport(t *testing.T) {
	clk := newClock()
	svc, _ := newTestService(t, clk, nil) // window 1 min, interval 10 s
	store := svc.Store()
	// Seven jitters against a window of six reports: a report and the one
	// a window before it are rarely equally late.
	jitter := []time.Duration{0, 2400 * time.Millisecond, -2400 * time.Millisecond, 1 * time.Second, -2 * time.Second, 2400 * time.Millisecond, -1500 * time.Millisecond}
	var prev time.Duration
	var delivered int64
	for seq := uint64(1); seq <= 30; seq++ {
		j := jitter[int(seq)%len(jitter)]
		clk.Advance(10*time.Second + j - prev)
		prev = j
		if seq > 7 {
			// The report is due, or late: the one it replaces is still in.
			store.sweep()
			if sum, _ := store.Subscription("shop", "billing"); sum.Delivered != 600 || sum.EndToEnd.Count != 6 {
				t.Fatalf("before report %d (jitter %s): delivered %d, values %d; want 600 and 6", seq, j, sum.Delivered, sum.EndToEnd.Count)
			}
			if topic, _ := store.Topic("shop", "orders"); topic.Attempts != 1200 {
				t.Fatalf("before report %d: topic attempts %d, want 1200", seq, topic.Attempts)
			}
		}
		mustAccept(t, svc, 0, billingAt(t, 0, "a", seq, 100*seq, 500))
		store.sweep()
		sum, ok := store.Subscription("shop", "billing")
		if !ok {
			t.Fatalf("report %d: no summary", seq)
		}
		if seq <= 6 {
			delivered = sum.Delivered
			continue
		}
		// The first report's totals are its delta (a series starts at
		// zero), so from the seventh on, six reports of 100 each.
		if sum.Delivered != 600 || sum.EndToEnd.Count != 6 {
			t.Fatalf("report %d (jitter %s): delivered %d, values %d; want 600 and 6 at every report (before: %d)", seq, j, sum.Delivered, sum.EndToEnd.Count, delivered)
		}
		topic, _ := store.Topic("shop", "orders")
		if topic.Attempts != 1200 {
			t.Fatalf("report %d: topic attempts %d, want 1200", seq, topic.Attempts)
		}
	}
}
