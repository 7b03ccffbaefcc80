package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/weighstation/weighstation/controllers/xds"
	"github.com/weighstation/weighstation/test/bench/harness"
	"github.com/weighstation/weighstation/test/bench/propagation/floodproto"
)

// leaseName is the operator's leader election Lease (main.LeaderElectionID).
const leaseName = "weighstation-operator.weighstation.io"

// floodResult is the changes made again under the flood.
type floodResult struct {
	Rate  float64 `json:"rate"`
	Peers int     `json:"peers"`
	// Generator is what the flood generator counted; GeneratorCPU its own
	// CPU over the flood, in % of one core.
	Generator    floodproto.Stats `json:"generator"`
	GeneratorCPU float64          `json:"generatorCpuPercentOfACore"`
	Changes      int              `json:"changes"`
	Failure      string           `json:"failure,omitempty"`
	PerSidecar   dist             `json:"perSidecarMs"`
	LastSidecar  dist             `json:"lastSidecarMs"`
	// APIServerTokenReviews is the TokenReviews the apiserver counted
	// (apiserver_request_total) from the flood's start to its end; the
	// operator's own count by result, when it has the metric
	// (weighstation_operator_xds_tokenreviews_total).
	APIServerTokenReviews float64            `json:"apiserverTokenReviews"`
	OperatorTokenReviews  map[string]float64 `json:"operatorTokenReviews,omitempty"`
	// ReviewBound is what the operator's default limits allow over the
	// flood: the distinct valid tokens (1) plus the burst plus the rate
	// times the flood's seconds.
	ReviewBound float64            `json:"reviewBound"`
	Refused     map[string]float64 `json:"operatorRefusedByReason"`
	// The Lease: kept if its holder and transitions did not change and the
	// operator still runs; MaxRenewGap is the longest time between two
	// renewals the bench saw.
	LeaseKept        bool    `json:"leaseKept"`
	LeaseHolder      string  `json:"leaseHolder"`
	LeaseTransitions [2]int  `json:"leaseTransitions"`
	MaxRenewGap      float64 `json:"maxRenewGapSeconds"`
	OperatorAlive    bool    `json:"operatorAlive"`
	// CoresUsed is each process's CPU over the changes under the flood, in
	// cores.
	CoresUsed map[string]float64 `json:"coresUsed"`

	log string // the generator's
}

// floodPhase runs the flood generator and, after o.floodWarmup, the same
// changes again under it.
func floodPhase(ctx context.Context, o options, n int, cl *cluster, ev *events, engaged *bool, procs procSet, manifestFile, metricsAddr string,
	op *benchharness.Proc, opAlive func() error, progress func(string, ...any)) (*floodResult, error) {
	f := &floodResult{Rate: o.flood, Peers: o.floodPeers}
	apiReviews, err := apiserverTokenReviews(ctx, cl.Kubeconfig)
	if err != nil {
		return nil, err
	}
	metricsBefore, err := benchharness.Scrape("http://" + metricsAddr + "/metrics")
	if err != nil {
		return nil, err
	}
	lease, err := readLease(ctx, cl)
	if err != nil {
		return nil, err
	}
	f.LeaseHolder, f.LeaseTransitions[0] = ptrString(lease.Spec.HolderIdentity), ptrInt(lease.Spec.LeaseTransitions)
	watch := watchLease(ctx, cl, lease)

	statsFile := filepath.Join(cl.Dir, "flood-stats.json")
	gen, err := benchharness.Start("flood", o.floodBin, "-manifest", manifestFile, "-rate", strconv.FormatFloat(o.flood, 'f', -1, 64),
		"-peers", strconv.Itoa(o.floodPeers), "-stats", statsFile)
	if err != nil {
		watch.stop()
		return nil, err
	}
	stopGen := benchharness.AtExit(gen.Stop)
	defer stopGen()
	genStart, err := gen.CPU()
	if err != nil {
		watch.stop()
		return nil, err
	}
	floodStart := time.Now()
	time.Sleep(o.floodWarmup)

	before, cpuErr := procs.cpu()
	changesStart := time.Now()
	run := runChanges(ctx, o, n, cl, ev, engaged, opAlive, progress)
	after, cpuErr2 := procs.cpu()
	if cpuErr == nil && cpuErr2 == nil {
		f.CoresUsed = coresUsed(procs.names, before, after, time.Since(changesStart))
	}
	f.Failure, f.Changes = run.failure, run.changes
	f.PerSidecar, f.LastSidecar = summarize(run.perSidecar), summarize(run.lastSidecar)

	if rest := o.floodMin - time.Since(floodStart); rest > 0 {
		progress("the flood goes on for %.0f s more (-flood-min)", rest.Seconds())
		time.Sleep(rest)
	}
	genEnd, err := gen.CPU()
	if err == nil {
		f.GeneratorCPU = 100 * float64(genEnd-genStart) / float64(time.Since(floodStart))
	}
	stopGen()
	floodWall := time.Since(floodStart)
	f.MaxRenewGap, lease = watch.stop()
	if b, err := os.ReadFile(statsFile); err != nil {
		progress("the flood wrote no counts: %v\n%s", err, tail(gen.Log(), 20))
	} else if err := json.Unmarshal(b, &f.Generator); err != nil {
		return nil, fmt.Errorf("reading the flood's counts: %w", err)
	}
	f.log = gen.Log()
	f.OperatorAlive = opAlive() == nil
	if lease != nil {
		f.LeaseTransitions[1] = ptrInt(lease.Spec.LeaseTransitions)
		f.LeaseKept = f.OperatorAlive && ptrString(lease.Spec.HolderIdentity) == f.LeaseHolder && f.LeaseTransitions[1] == f.LeaseTransitions[0]
	}
	if apiAfter, err := apiserverTokenReviews(ctx, cl.Kubeconfig); err == nil {
		f.APIServerTokenReviews = apiAfter - apiReviews
	}
	limits := xds.DefaultReviewLimits
	f.ReviewBound = 1 + float64(limits.Burst) + limits.Rate*floodWall.Seconds()
	if f.OperatorAlive {
		if metricsAfter, err := benchharness.Scrape("http://" + metricsAddr + "/metrics"); err == nil {
			f.Refused = labelled(metricsBefore, metricsAfter, "weighstation_operator_xds_refused_total", "reason")
			if reviews := labelled(metricsBefore, metricsAfter, "weighstation_operator_xds_tokenreviews_total", "result"); len(reviews) > 0 {
				f.OperatorTokenReviews = reviews
			}
		}
	}
	return f, nil
}

// labelled is a counter's growth between two scrapes by one label's value.
func labelled(before, after map[string]float64, name, label string) map[string]float64 {
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(name) + `\{.*` + label + `="([^"]*)".*\}$`)
	out := map[string]float64{}
	for key, v := range after {
		if m := re.FindStringSubmatch(key); m != nil {
			if d := v - before[key]; d != 0 {
				out[m[1]] += d
			}
		}
	}
	return out
}

// apiserverTokenReviews is the TokenReviews the apiserver has answered,
// from its own /metrics: the same count whichever operator runs.
func apiserverTokenReviews(ctx context.Context, kubeconfig string) (float64, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return 0, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0, err
	}
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading the apiserver's /metrics: %w", err)
	}
	total := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="tokenreviews"`) {
			continue
		}
		if i := strings.LastIndexByte(line, ' '); i > 0 {
			if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
				total += v
			}
		}
	}
	return total, nil
}

func readLease(ctx context.Context, cl *cluster) (*coordinationv1.Lease, error) {
	lease := &coordinationv1.Lease{}
	if err := cl.Client.Get(ctx, types.NamespacedName{Namespace: operatorNamespace, Name: leaseName}, lease); err != nil {
		return nil, fmt.Errorf("reading the operator's Lease: %w", err)
	}
	return lease, nil
}

// leaseWatch polls the Lease and keeps the longest time between two
// renewals it saw.
type leaseWatch struct {
	done   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	maxGap time.Duration
	last   *coordinationv1.Lease
}

func watchLease(ctx context.Context, cl *cluster, first *coordinationv1.Lease) *leaseWatch {
	w := &leaseWatch{done: make(chan struct{}), last: first}
	renewed := time.Now()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-t.C:
			}
			l, err := readLease(ctx, cl)
			now := time.Now()
			w.mu.Lock()
			if err == nil {
				if !l.Spec.RenewTime.Equal(w.last.Spec.RenewTime) {
					renewed = now
				}
				w.last = l
			}
			w.maxGap = max(w.maxGap, now.Sub(renewed))
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *leaseWatch) stop() (maxGapSeconds float64, last *coordinationv1.Lease) {
	close(w.done)
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.maxGap.Seconds(), w.last
}

func ptrString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func ptrInt(p *int32) int {
	if p == nil {
		return 0
	}
	return int(*p)
}

// coresUsed is each process's CPU between two readings, in cores.
func coresUsed(names []string, before, after []time.Duration, wall time.Duration) map[string]float64 {
	out := map[string]float64{}
	for i, name := range names {
		out[name] = float64(after[i]-before[i]) / float64(wall)
	}
	return out
}

// reportFlood prints the changes without and under the flood side by side.
func reportFlood(r *result) {
	f := r.Flood
	fmt.Printf("### Under a flood of %.0f junk xDS calls a second\n\n", f.Rate)
	if f.Failure != "" {
		fmt.Printf("**FAILED under the flood**: %s (%d of the changes reached every sidecar)\n\n", f.Failure, f.Changes)
	}
	fmt.Println("Kill switch change, PATCH returned → the sidecar's SetConfig returned, ms, each sidecar:\n\n| | p50 | p90 | p99 | p99.9 | max | changes |\n|---|---|---|---|---|---|---|")
	fmt.Printf("| without the flood | %.1f | %.1f | %.1f | %.1f | %.1f | %d |\n", r.PerSidecar.P50, r.PerSidecar.P90, r.PerSidecar.P99, r.PerSidecar.P999, r.PerSidecar.Max, r.Changes)
	fmt.Printf("| under the flood | %.1f | %.1f | %.1f | %.1f | %.1f | %d |\n\n", f.PerSidecar.P50, f.PerSidecar.P90, f.PerSidecar.P99, f.PerSidecar.P999, f.PerSidecar.Max, f.Changes)
	if r.Target > 0 {
		verdict := map[bool]string{true: "met", false: "NOT MET"}[f.Failure == "" && f.PerSidecar.P99 <= r.Target]
		fmt.Printf("Target p99 ≤ %.0f ms under the flood: %.1f ms, **%s**.\n\n", r.Target, f.PerSidecar.P99, verdict)
	}
	g := f.Generator
	fmt.Printf("The flood: %d attempts in %.1f s (%.0f/s asked, %.0f/s sent; %d skipped with 4,096 waiting for an answer) over %d connections from as many loopback addresses; nine in ten a forged token of a real pod, one in ten a valid token replayed. Answers %s; valid token %s, forged %s; answer time avg %.1f ms, max %.0f ms. The generator's own CPU: %.0f%% of one core.\n\n",
		g.Launched, g.Seconds, f.Rate, float64(g.Launched)/max(g.Seconds, 1e-9), g.Skipped, f.Peers, counts(g.Outcomes), counts(g.Valid), counts(g.Forged), g.AnswerMsAvg, g.AnswerMsMax, f.GeneratorCPU)
	fmt.Printf("TokenReviews the apiserver received during the flood: %.0f (%.0f/s).", f.APIServerTokenReviews, f.APIServerTokenReviews/max(g.Seconds, 1e-9))
	if f.OperatorTokenReviews != nil {
		fmt.Printf(" The operator counted %s; its bound with the default limits (1 valid token + burst + rate × %.1f s): %.0f: **%s**.",
			counts64(f.OperatorTokenReviews), g.Seconds, f.ReviewBound, map[bool]string{true: "within", false: "OVER"}[f.APIServerTokenReviews <= f.ReviewBound])
	} else {
		fmt.Print(" (This operator has no weighstation_operator_xds_tokenreviews_total: no limit applies.)")
	}
	fmt.Print("\n\n")
	if len(f.Refused) > 0 {
		fmt.Printf("The operator's refusals by reason during the flood: %s.\n\n", counts64(f.Refused))
	}
	lease := "**kept**"
	if !f.LeaseKept {
		lease = "**LOST**"
	}
	fmt.Printf("The leader's Lease: %s (holder %q, transitions %d → %d, operator running: %t; longest time between two renewals seen: %.1f s, renew deadline 10 s).\n\n",
		lease, f.LeaseHolder, f.LeaseTransitions[0], f.LeaseTransitions[1], f.OperatorAlive, f.MaxRenewGap)
	if len(f.CoresUsed) > 0 {
		fmt.Printf("CPU during the changes, in cores (of %d), without → under the flood:", numCPU())
		for _, name := range slices.Sorted(maps.Keys(f.CoresUsed)) {
			fmt.Printf(" %s %.2f → %.2f;", name, r.CoresUsed[name], f.CoresUsed[name])
		}
		fmt.Print("\n\n")
	}
}

func counts(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func counts64(m map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
