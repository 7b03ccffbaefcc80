// Command benchreports is `make bench-reports`: what the sidecars' reports
// cost the operator, and how often they make it write status, at 1,000
// sidecars (issue 12, must-show 3). test/bench/reports/README.md says what
// it measures and how.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/weighstation/weighstation/test/bench/harness"
	"github.com/weighstation/weighstation/test/bench/harness/kubeenv"
)

type options struct {
	bin, crdDir, outDir string
	sidecars, topics    int
	values, movingEvery int
	inflight            int
	interval, window    time.Duration
	writeInterval       time.Duration
	duration, warmup    time.Duration
	sampling            string
	seed                uint64
	profile             bool
	profileSeconds      int
	operatorArgs        []string
	operatorEnv         []string
	configuredTimeout   time.Duration
	tokenLifetime       time.Duration
	progressEvery       time.Duration
	operatorLog         string
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin/weighstation", "the weighstation binary (the operator)")
	flag.StringVar(&o.crdDir, "crd", "config/crd/bases", "the CRDs to install")
	flag.StringVar(&o.outDir, "out", "bin/bench-reports", "directory for the JSON summary, the operator's log and the profiles")
	flag.IntVar(&o.sidecars, "sidecars", 1000, "simulated sidecars, one per pod (a multiple of 10); 3/10 as many Subscriptions, each selecting 10 pods")
	flag.IntVar(&o.topics, "topics", 10, "Topics, each applying to every pod; pod i publishes under Topic i mod this")
	flag.IntVar(&o.values, "values", 1000, "values per histogram (end-to-end and dwell) per Subscription per report")
	flag.IntVar(&o.movingEvery, "moving-every", 10, "one Subscription in this many moves: its distribution's scale switches between 2 ms and 3 ms every window")
	flag.StringVar(&o.sampling, "samples", samplingFresh, "repeat: the same values every interval (a steady flow: its window's distribution never moves); fresh: new values every interval (real traffic: its window's percentiles carry sampling noise)")
	flag.Uint64Var(&o.seed, "seed", 1, "the seed of the values and of the sidecars' phases")
	flag.DurationVar(&o.interval, "interval", 10*time.Second, "the sidecars' report interval (and the operator's -report-interval)")
	flag.DurationVar(&o.window, "window", time.Minute, "the operator's -report-window")
	flag.DurationVar(&o.writeInterval, "write-interval", 10*time.Second, "the operator's -report-write-interval")
	flag.DurationVar(&o.duration, "duration", 3*time.Minute, "how long the load is measured, after the warm-up")
	flag.DurationVar(&o.warmup, "warmup", 0, "the warm-up after the last sidecar started reporting (0: one window, plus an interval for the pods' windows to fill and an interval for the writes they deferred)")
	flag.IntVar(&o.inflight, "inflight", 16, "create calls in flight at once")
	flag.BoolVar(&o.profile, "profile", false, "serve the operator's pprof and save a CPU profile of the measured period (at most -profile-seconds) and a heap profile at its end into -out, with pprof's top functions beside them")
	flag.IntVar(&o.profileSeconds, "profile-seconds", 60, "the CPU profile's length")
	flag.DurationVar(&o.configuredTimeout, "configured-timeout", 0, "how long the sidecars may take to hold their configuration before the load starts (0: 5 min, or 100 ms per sidecar if longer)")
	opArgs := flag.String("operator-args", "", "extra flags for the operator, space-separated")
	opEnv := flag.String("operator-env", "", "extra environment for the operator, space-separated KEY=value (e.g. GOGC=50)")
	goMemLimit := flag.String("go-memlimit", "chart", "the operator's GOMEMLIMIT: chart for the Helm chart's default (operator.goMemLimit in "+benchharness.ChartValues+"), empty for none, or a value such as 400MiB")
	flag.Parse()
	if o.sampling != samplingFresh && o.sampling != samplingRepeat {
		fmt.Fprintf(os.Stderr, "bench-reports: -samples %q is neither %s nor %s\n", o.sampling, samplingFresh, samplingRepeat)
		os.Exit(2)
	}
	if o.values < 1 || o.duration <= 0 || o.interval < time.Second || o.window < 2*o.interval {
		fmt.Fprintln(os.Stderr, "bench-reports: -values must be positive, -duration positive, -interval at least 1s and -window at least two intervals")
		os.Exit(2)
	}
	if o.warmup == 0 {
		o.warmup = o.window + 2*o.interval
	}
	o.operatorArgs, o.operatorEnv = strings.Fields(*opArgs), strings.Fields(*opEnv)
	memLimit, err := benchharness.GoMemLimitEnv(*goMemLimit)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-reports: %v\n", err)
		os.Exit(2)
	}
	o.operatorEnv = append(o.operatorEnv, memLimit...)
	if o.configuredTimeout == 0 {
		// Every sidecar's first stream waits for its TokenReview: at 5,000
		// on a 2-core machine that takes minutes.
		o.configuredTimeout = max(5*time.Minute, time.Duration(o.sidecars)*100*time.Millisecond)
	}
	o.tokenLifetime, o.progressEvery = 3*time.Hour, 10*time.Second
	o.operatorLog = filepath.Join(o.outDir, "operator.log")
	// envtest logs through controller-runtime's logger, which complains
	// with a stack trace when nothing was set.
	ctrllog.SetLogger(logr.Discard())
	benchharness.CleanUpOnSignal("bench-reports")
	s, err := benchmark(o)
	benchharness.RunCleanups()
	if s != nil && len(s.Targets) > 0 { // measured
		printSummary(s)
		if werr := benchharness.WriteSummary(o.outDir, s); werr != nil {
			err = errors.Join(err, werr)
		} else {
			fmt.Printf("JSON summary: %s\n", filepath.Join(o.outDir, "summary.json"))
		}
		for _, t := range s.Targets {
			if !t.Met {
				err = errors.Join(err, fmt.Errorf("not met: %s: %s", t.Target, t.Measured))
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-reports:", err)
		os.Exit(1)
	}
}

func newSummary(o options, w *world, l *load) *summary {
	s := &summary{Date: time.Now().UTC().Format(time.RFC3339), Cores: runtime.NumCPU(), OperatorArgs: o.operatorArgs, OperatorEnv: o.operatorEnv}
	s.Load.Sidecars, s.Load.Subscriptions, s.Load.Topics = w.pods, w.subscriptions(), w.topics
	s.Load.MovingSubscriptions = (w.subscriptions() + w.movingEvery - 1) / w.movingEvery
	s.Load.SubscriptionsPerPod, s.Load.PodsPerSubscription = len(partitionLabels), podsPerGroup
	s.Load.ValuesPerHistogram, s.Load.Sampling = l.values, l.sampling
	s.Load.IntervalSeconds, s.Load.WindowSeconds, s.Load.WriteIntervalSeconds = o.interval.Seconds(), o.window.Seconds(), o.writeInterval.Seconds()
	s.Load.MovingHalfPeriod = l.halfPeriod
	s.Load.ExpectedReportsPerSec = float64(w.pods) / o.interval.Seconds()
	return s
}

func benchmark(o options) (*summary, error) {
	if err := os.MkdirAll(o.outDir, 0o755); err != nil {
		return nil, err
	}
	w, err := newWorld(o.sidecars, o.topics, o.movingEvery)
	if err != nil {
		return nil, err
	}
	// A moving Subscription keeps each scale for one window: switched
	// every interval instead, a window of an even number of reports would
	// always hold as many of each, and its summary would not move.
	l := &load{interval: o.interval, values: o.values, sampling: o.sampling, seed: o.seed,
		halfPeriod: max(1, int(math.Round(float64(o.window)/float64(o.interval))))}
	s := newSummary(o, w, l)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	cl, err := kubeenv.Start("bench-reports", o.crdDir, kubeenv.OperatorNamespace, podNamespace)
	if err != nil {
		return nil, err
	}
	// The watch and the sidecars end before the apiserver does.
	defer benchharness.AtExit(func() { cancel(); cl.Stop() })()
	watch := startWriteWatch(ctx, cl.Client)

	args := []string{"-report-interval", o.interval.String(), "-report-window", o.window.String(),
		"-report-write-interval", o.writeInterval.String(), "-zap-log-level=debug"}
	var pprofURL string
	if o.profile {
		addr, err := benchharness.FreeAddr()
		if err != nil {
			return nil, err
		}
		args, pprofURL = append(args, "-pprof-bind-address", addr), "http://"+addr+"/debug/pprof/"
	}
	op, err := benchharness.StartOperator(benchharness.OperatorOptions{Bin: o.bin, Kubeconfig: cl.Kubeconfig, Namespace: kubeenv.OperatorNamespace,
		LogPath: o.operatorLog, Args: append(args, o.operatorArgs...), Env: o.operatorEnv})
	if err != nil {
		return nil, err
	}
	defer op.Stop()
	benchharness.Progress("operator ready (pid %d); creating %d pods with their ServiceAccounts and tokens, %d in flight", op.Pid(), w.pods, o.inflight)

	start := time.Now()
	pods, err := createPods(ctx, cl, w, o)
	if err != nil {
		return s, err
	}
	s.Setup.PodsSeconds = time.Since(start).Seconds()
	caFile, err := cl.WaitBundle(ctx, podNamespace, 60*time.Second, op.Alive)
	if err != nil {
		return s, err
	}
	benchharness.Progress("%d pods in %.1f s; creating %d Topics and %d Subscriptions and starting the sidecars", w.pods, s.Setup.PodsSeconds, w.topics, w.subscriptions())
	if err := createObjects(ctx, cl, w, o.inflight); err != nil {
		return s, err
	}
	start = time.Now()
	fl, err := startFleet(ctx, w, l, op.XDSAddr, caFile, pods)
	if err != nil {
		return s, err
	}
	defer benchharness.AtExit(func() { cancel(); fl.stop() })()
	if err := benchharness.Poll(o.configuredTimeout, 200*time.Millisecond, op.Alive, func() (bool, string) {
		n := fl.configured()
		return n == w.pods, fmt.Sprintf("%d of %d sidecars hold their configuration", n, w.pods)
	}); err != nil {
		return s, fmt.Errorf("the sidecars' configuration: %w", err)
	}
	s.Setup.ConfiguredSeconds = time.Since(start).Seconds()
	benchharness.Progress("every sidecar holds its configuration (%.1f s); starting their reports over one interval (%s)", s.Setup.ConfiguredSeconds, o.interval)
	if err := fl.startReporting(l); err != nil {
		return s, err
	}

	benchharness.Progress("warming up for %s", o.warmup)
	if _, err := run(o.warmup, o.progressEvery, op); err != nil {
		return s, fmt.Errorf("warming up: %w", err)
	}
	s.WarmupSeconds = o.warmup.Seconds()
	s.ReportingSubsAtStart = watch.reporting("subscription")
	benchharness.Progress("measuring for %s (%d of %d Subscriptions report)", o.duration, s.ReportingSubsAtStart, w.subscriptions())
	before, err := sampleNow(op)
	if err != nil {
		return s, err
	}
	profiled := make(chan error, 1)
	if o.profile {
		secs := min(o.profileSeconds, int(o.duration/time.Second))
		s.Profile = filepath.Join(o.outDir, "operator.cpu.pprof")
		go func() {
			profiled <- fetchProfile(fmt.Sprintf("%sprofile?seconds=%d", pprofURL, secs), s.Profile, time.Duration(secs+60)*time.Second)
		}()
	}
	maxRSS, err := run(o.duration, o.progressEvery, op)
	if err != nil {
		return s, fmt.Errorf("measuring: %w", err)
	}
	after, err := sampleNow(op)
	if err != nil {
		return s, err
	}
	s.fill(before, after)
	s.MaxRSSMeasuredMiB = float64(maxRSS) / (1 << 20)
	s.PeakRSSMiB = benchharness.MiB(op.PeakRSS())
	writes, other := watch.between(before.at, after.at)
	s.Writes = countWrites(writes, w, s.MeasuredSeconds/60)
	s.OtherStatusWrites = other
	s.WatchErrors = watch.errors()
	s.Fleet = fl.stats()
	if s.Reasons, err = writeReasons(o.operatorLog, before.at, after.at, w); err != nil {
		benchharness.Progress("reading the operator's reasons: %v", err)
	}
	if o.profile {
		// pprof reads the profiles once the period is over: it takes a
		// core for a while.
		heap := filepath.Join(o.outDir, "operator.heap.pprof")
		err := errors.Join(<-profiled, topOf(s.Profile, o.bin),
			fetchProfile(pprofURL+"heap", heap, time.Minute), topOf(heap, o.bin, "-sample_index=inuse_space"))
		if err != nil {
			benchharness.Progress("profiles: %v", err)
		}
	}
	s.Targets = targets(s)
	return s, nil
}

// run waits for d, checking that the operator is alive and printing the
// rates every progressEvery, and returns the operator's largest RSS it
// saw. A scrape that fails (a busy machine) is only printed.
func run(d, progressEvery time.Duration, op *benchharness.Operator) (int64, error) {
	end := time.Now().Add(d)
	var maxRSS int64
	prev, prevErr := takeSample(op)
	for time.Now().Before(end) {
		time.Sleep(min(time.Until(end), progressEvery))
		if err := op.Alive(); err != nil {
			return maxRSS, err
		}
		rss, err := op.RSS()
		if err != nil {
			return maxRSS, err
		}
		maxRSS = max(maxRSS, rss)
		cur, err := takeSample(op)
		switch {
		case err != nil:
			benchharness.Progress("  %v; RSS %.0f MiB", err, float64(rss)/(1<<20))
		case prevErr == nil:
			benchharness.Progress("  %s, RSS %.0f MiB", rateLine(prev, cur), float64(rss)/(1<<20))
		}
		prev, prevErr = cur, err
	}
	return maxRSS, nil
}

// sampleNow takes a sample, trying up to three times.
func sampleNow(op *benchharness.Operator) (sample, error) {
	var err error
	for range 3 {
		var s sample
		if s, err = takeSample(op); err == nil {
			return s, nil
		}
		benchharness.Progress("  %v; trying again", err)
	}
	return sample{}, err
}
