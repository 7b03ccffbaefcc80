package reports

import (
	"math"
	"runtime/debug"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
)

// referenceSummary recomputes what Subscription must answer from the
// slices themselves, as the store did before it kept running sums and
// pods' summaries: every slice in its pod's window added up anew.
func referenceSummary(t *testing.T, s *Store, namespace, name string) (endToEnd, dwell Latency, pods map[string][2]Latency) {
	t.Helper()
	now := s.opts.Now()
	ns := s.rlockNamespace(namespace)
	if ns == nil {
		return Latency{}, Latency{}, nil
	}
	defer ns.mu.RUnlock()
	w := ns.subscriptions[name]
	if w == nil {
		return Latency{}, Latency{}, nil
	}
	var all [2]dense
	pods = map[string][2]Latency{}
	for _, p := range w.pods {
		var pod [2]dense
		from := podCutoff(s, p.slices, s.opts.cutoff(now))
		n := 0
		for _, sl := range p.slices {
			if !sl.at.After(from) {
				continue
			}
			n++
			for k, h := range []sparse{sl.endToEnd, sl.dwell} {
				pod[k].add(h, 1)
				all[k].add(h, 1)
			}
		}
		if n > 0 {
			pods[p.podUID] = [2]Latency{pod[0].latency(), pod[1].latency()}
		}
	}
	return all[0].latency(), all[1].latency(), pods
}

// The running sums and the pods' kept summaries answer what adding up
// the window anew answers, after every step of pods that report on time,
// early, late, not at all for a while, restart, or report faster than the
// interval, with sweeps in between.
func TestRunningSumsAreTheWindowAddedUpAnew(t *testing.T) {
	steps := []struct {
		name    string
		advance time.Duration
		pods    []int // the pods that report, in this order
		sweep   bool
		reboot  int // a pod whose sidecar restarts before reporting (-1: none)
	}{
		{"everyone reports", 0, []int{0, 1, 2, 3}, false, -1},
		{"an interval later", 10 * time.Second, []int{0, 1, 2, 3}, false, -1},
		{"pod 3 is silent", 10 * time.Second, []int{0, 1, 2}, true, -1},
		{"pod 0 reports twice in an interval", 2 * time.Second, []int{0}, false, -1},
		{"and again", 1 * time.Second, []int{0, 0, 0}, false, -1},
		{"late: past the window's edge for pod 3", 45 * time.Second, []int{1}, false, -1},
		{"summarized before the sweep", 4 * time.Second, nil, false, -1},
		{"swept", 1 * time.Second, nil, true, -1},
		{"pod 2 restarts", 10 * time.Second, []int{2, 0}, false, 2},
		{"pod 3 comes back", 10 * time.Second, []int{3}, true, -1},
		{"a minute of silence, summarized unswept", time.Minute, nil, false, -1},
		{"swept empty", 0, nil, true, -1},
		{"they come back", 10 * time.Second, []int{0, 1, 2, 3}, false, -1},
	}
	clk := newClock()
	svc, _ := newTestService(t, clk, nil)
	store := svc.Store()
	rng := newRand(5)
	seq := map[int]uint64{}
	boot := map[int]string{0: "a", 1: "a", 2: "a", 3: "a"}
	for _, step := range steps {
		clk.Advance(step.advance)
		if step.reboot >= 0 {
			boot[step.reboot] += "'"
			seq[step.reboot] = 0
		}
		for _, pod := range step.pods {
			seq[pod]++
			scale := float64(1 + pod)
			mustAccept(t, svc, pod, report(identity(pod).PodUID, boot[pod], seq[pod], []*xdsv1.SubscriptionReport{
				subReport(t, "billing", seq[pod]*100, lognormal(rng, 300, 2000*scale, 1), lognormal(rng, 100, 300*scale, 1.2)),
			}))
			clk.Advance(100 * time.Millisecond)
		}
		if step.sweep {
			store.sweep()
		}
		// Twice: the second from what the first kept.
		for range 2 {
			sum, ok := store.Subscription("shop", "billing")
			e2e, dwell, pods := referenceSummary(t, store, "shop", "billing")
			if ok != (len(pods) > 0) {
				t.Fatalf("%s: summary %v, but %d pods in the window", step.name, ok, len(pods))
			}
			if sum.EndToEnd != e2e || sum.Dwell != dwell {
				t.Fatalf("%s: aggregate end-to-end %+v, dwell %+v\nadded up anew: %+v, %+v", step.name, sum.EndToEnd, sum.Dwell, e2e, dwell)
			}
			if len(sum.Pods) != len(pods) {
				t.Fatalf("%s: %d pods, want %d", step.name, len(sum.Pods), len(pods))
			}
			for _, p := range sum.Pods {
				if want := pods[p.PodUID]; p.EndToEnd != want[0] || p.Dwell != want[1] {
					t.Fatalf("%s: %s: %+v, %+v\nadded up anew: %+v, %+v", step.name, p.Pod, p.EndToEnd, p.Dwell, want[0], want[1])
				}
			}
		}
	}
	clk.Advance(2 * time.Minute)
	store.sweep()
	if b := store.bytes.Load(); b != 0 {
		t.Fatalf("%d bytes still counted with nothing held", b)
	}
}

// Past the memory cap the store sheds the reports' latency, keeps their
// counters, counts what it shed and says so in the summaries; past the
// cap's headroom it refuses. Once the window turns over, latency is kept
// again.
func TestAtTheMemoryCapLatencyIsShedFirst(t *testing.T) {
	rng := newRand(9)
	first := func(t *testing.T) *xdsv1.Report {
		return report("uid-0", "a", 1, []*xdsv1.SubscriptionReport{subReport(t, "billing", 100, lognormal(rng, 1000, 2000, 1), lognormal(rng, 1000, 300, 1))},
			topicRep("orders", 10, 10))
	}
	second := func(t *testing.T) *xdsv1.Report {
		return report("uid-1", "a", 1, []*xdsv1.SubscriptionReport{subReport(t, "billing", 50, lognormal(rng, 1000, 2000, 1), nil, reason("overflow", 2))},
			topicRep("orders", 5, 5))
	}
	// What the first report alone holds.
	probe, _ := newTestService(t, newClock(), nil)
	mustAccept(t, probe, 0, first(t))
	held := probe.Store().bytes.Load()

	cases := []struct {
		name     string
		maxBytes int64
		// Of the second report (another pod's).
		wantCode    codes.Code
		wantShed    float64
		wantValues  int64 // end-to-end values in the summary
		wantShedIn  int   // SubscriptionSummary.ShedReports
		wantDeliver int64
	}{
		{"under the cap", 10 * held, codes.OK, 0, 2000, 0, 150},
		{"past the cap: shed", held - 1, codes.OK, 1, 1000, 1, 150},
		{"past the cap's headroom: refused", held * 3 / 4, codes.ResourceExhausted, 0, 1000, 0, 100},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			svc, _ := newTestService(t, clk, func(o *Options) { o.MaxBytes = tc.maxBytes })
			mustAccept(t, svc, 0, first(t))
			got := codes.OK
			if refused := svc.accept(identity(1), second(t)); refused != nil {
				got = status.Code(refused)
			}
			if got != tc.wantCode {
				t.Fatalf("the second report: %v, want %v", got, tc.wantCode)
			}
			if got := value(svc.metrics.shed); got != tc.wantShed {
				t.Errorf("shed %v, want %v", got, tc.wantShed)
			}
			sum, _ := svc.Store().Subscription("shop", "billing")
			if sum.EndToEnd.Count != tc.wantValues || sum.ShedReports != tc.wantShedIn || sum.Delivered != tc.wantDeliver {
				t.Errorf("summary: %d values, %d reports shed, %d delivered; want %d, %d, %d", sum.EndToEnd.Count, sum.ShedReports, sum.Delivered, tc.wantValues, tc.wantShedIn, tc.wantDeliver)
			}
			if tc.wantShedIn > 0 {
				i := slices.IndexFunc(sum.Pods, func(p PodSummary) bool { return p.PodUID == "uid-1" })
				if i < 0 || sum.Pods[i].ShedReports != 1 || sum.Pods[i].EndToEnd.Count != 0 || sum.Pods[i].Delivered != 50 || len(sum.Pods[i].Dropped) != 1 {
					t.Errorf("the shedding pod: %+v", sum.Pods)
				}
				// The window turns over: the cap has room again.
				clk.Advance(2 * time.Minute)
				svc.Store().sweep()
				mustAccept(t, svc, 1, report("uid-1", "a", 2, []*xdsv1.SubscriptionReport{subReport(t, "billing", 60, []int64{100}, nil)}))
				if sum, _ := svc.Store().Subscription("shop", "billing"); sum.ShedReports != 0 || sum.EndToEnd.Count != 1 {
					t.Errorf("after the window: %d values, %d shed; want 1, 0", sum.EndToEnd.Count, sum.ShedReports)
				}
			}
		})
	}
}

func TestMaxBytesDerivesFromTheMemoryLimit(t *testing.T) {
	cases := []struct {
		name  string
		limit int64
		want  int64
	}{
		{"no GOMEMLIMIT", math.MaxInt64, DefaultMaxBytes},
		{"the chart's 400MiB", 400 << 20, 100 << 20},
		{"1GiB", 1 << 30, 256 << 20},
		{"a tiny one", 3, 1},
		{"nonsense", -1, DefaultMaxBytes},
	}
	for _, tc := range cases {
		if got := MaxBytesFor(tc.limit); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}

	// New reads the process's limit, unless Options.MaxBytes is set.
	before := debug.SetMemoryLimit(400 << 20)
	defer debug.SetMemoryLimit(before)
	for _, tc := range []struct {
		name     string
		maxBytes int64
		want     int64
	}{
		{"from GOMEMLIMIT", 0, 100 << 20},
		{"set explicitly", 5 << 20, 5 << 20},
	} {
		svc, _ := newTestService(t, newClock(), func(o *Options) { o.MaxBytes = tc.maxBytes })
		if svc.opts.MaxBytes != tc.want || value(svc.metrics.maxBytes) != float64(tc.want) {
			t.Errorf("%s: cap %d (metric %v), want %d", tc.name, svc.opts.MaxBytes, value(svc.metrics.maxBytes), tc.want)
		}
	}
}
