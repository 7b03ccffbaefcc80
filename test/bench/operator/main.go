// Command benchoperator is `make bench-operator`: what each change costs
// the operator at scale, against the real apiserver.
//
// Everything is real and in its own process: a kube-apiserver and etcd
// (envtest), the operator (bin/weighstation operator), and a swarm of
// simulated sidecars (test/bench/operator/swarm), one per pod, each an xDS
// client with its own ADS stream, its own pod-bound token and TLS to the
// operator's CA, whose Apply records what it got and ACKs it, so that
// Ready means acknowledged.
//
// Three worlds (world.go's worldSizes): small (one namespace of 200 pods,
// 300 Topics, 300 Subscriptions), large (2,000, 3,000, 3,000) and cluster
// (100 namespaces of 100, 30, 30: 10,000 sidecars). Each Subscription
// selects one group of 10 pods of its namespace (`group: g<k>`); one Topic
// in three has a publishers selector matching one group, the others apply
// to every pod; subjects overlap as in config/samples. The small and large
// worlds create their pods and sidecars first, then the Topics and
// Subscriptions; the cluster world creates its Topics and Subscriptions,
// then its pods, and starts every sidecar together after the last create,
// so that its Ready covers every sidecar's TokenReview (their share is
// reported apart, and if the operator's default TokenReview rate alone
// would keep it from its target, the bench sets the rate and says so).
// The operator runs with the chart's GOMEMLIMIT (-go-memlimit). For each
// world the bench reports the time to Ready from the last create, the
// operator's peak RSS, and per change
// (engage a kill switch, move a pod to another group, create a pod, change
// a Topic's size limit; -repeats each, medians) the reconciles by
// controller (the operator's controller_runtime_reconcile_total), the
// status writes (a watch in the bench: updates that kept the generation
// and changed the status), the operator's CPU (/proc, until the change
// settled), the time until every affected sidecar applied it, and the
// configuration bytes the sidecars received; beside the issues' targets
// (issue 11's for every world, and each world's own: report.go).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/weighstation/weighstation/test/bench/harness"
	"github.com/weighstation/weighstation/test/bench/harness/kubeenv"
	"github.com/weighstation/weighstation/test/bench/operator/opproto"
)

type options struct {
	bin, swarm, crdDir, outDir string
	worlds                     []string
	repeats                    int
	scale                      float64
	inflight                   int
	streamsPerConn             int
	namespaces                 int
	readyTimeout               time.Duration
	changeTimeout              time.Duration
	settleTimeout              time.Duration
	quiet                      time.Duration
	idle                       time.Duration
	profile                    bool
	operatorArgs               []string
	operatorEnv                []string
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin/weighstation", "the weighstation binary (the operator)")
	flag.StringVar(&o.swarm, "swarm", "", "the swarm binary (empty: go build ./test/bench/operator/swarm into -out)")
	flag.StringVar(&o.crdDir, "crd", "config/crd/bases", "the CRDs to install")
	flag.StringVar(&o.outDir, "out", "bin/bench-operator", "directory for the JSON summary, the logs and the profiles")
	worlds := flag.String("world", strings.Join(worldNames, ","), "the worlds to run, in order, comma-separated ("+strings.Join(worldNames, ", ")+"); each on a fresh apiserver and operator")
	flag.IntVar(&o.repeats, "repeats", 5, "how many times each change is made (medians are reported; a world may make more: the cluster world's 20 kill switches, for their p99)")
	flag.Float64Var(&o.scale, "scale", 1, "scale the large world's pods, Topics and Subscriptions by this factor (the small world is never scaled), for a machine where it does not finish")
	flag.IntVar(&o.namespaces, "namespaces", 0, "the cluster world's namespaces (0: its 100), for a quick check of the bench; its targets are for 100")
	flag.IntVar(&o.inflight, "inflight", 16, "create calls in flight at once")
	flag.IntVar(&o.streamsPerConn, "streams-per-conn", 0, "simulated sidecars per gRPC connection, each on its own ADS stream with its own token (0: the world's, 1 for small and large, 10 for cluster; 1: a connection each, as pods have; more, for a machine where that many connections do not fit: each connection then dials from its own loopback address and stands for that many pods, and the bench gives the operator that many pods' per-peer TokenReview limit)")
	flag.DurationVar(&o.readyTimeout, "ready-timeout", 15*time.Minute, "how long a world may take to be Ready after its last create")
	flag.DurationVar(&o.changeTimeout, "change-timeout", 5*time.Minute, "how long one change may take to reach every affected sidecar")
	flag.DurationVar(&o.settleTimeout, "settle-timeout", 5*time.Minute, "how long a change may take to settle (no reconcile, no status write for -quiet)")
	flag.DurationVar(&o.quiet, "quiet", 2*time.Second, "a change has settled once no reconcile counter moved and no status write was seen for this long")
	flag.DurationVar(&o.idle, "idle", 10*time.Second, "how long the operator's idle CPU is measured before the changes")
	flag.BoolVar(&o.profile, "profile", false, "record the operator with `perf record -g` during each kind of change (its CPU numbers then include perf's cost) into -out/<world>-<change>.perf.data, with a report beside it")
	opArgs := flag.String("operator-args", "", "extra flags for the operator, space-separated")
	goMemLimit := flag.String("go-memlimit", "chart", "the operator's GOMEMLIMIT: chart for the Helm chart's (operator.goMemLimit in "+benchharness.ChartValues+"), empty for none, or a value such as 400MiB")
	flag.Parse()
	for _, w := range strings.Split(*worlds, ",") {
		w = strings.TrimSpace(w)
		if _, ok := worldSizes[w]; !ok {
			fmt.Fprintf(os.Stderr, "bench-operator: -world: %q is not one of %s\n", w, strings.Join(worldNames, ", "))
			os.Exit(2)
		}
		o.worlds = append(o.worlds, w)
	}
	if o.repeats < 1 || o.scale <= 0 || o.streamsPerConn < 0 {
		fmt.Fprintln(os.Stderr, "bench-operator: -repeats must be at least 1, -scale positive and -streams-per-conn not negative")
		os.Exit(2)
	}
	if *opArgs != "" {
		o.operatorArgs = strings.Fields(*opArgs)
	}
	memLimit, err := benchharness.GoMemLimitEnv(*goMemLimit)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-operator: %v\n", err)
		os.Exit(2)
	}
	o.operatorEnv = append(o.operatorEnv, memLimit...)
	// envtest logs through controller-runtime's logger, which complains
	// with a stack trace when nothing was set.
	ctrllog.SetLogger(logr.Discard())
	benchharness.CleanUpOnSignal("bench-operator")
	err = benchmark(o)
	benchharness.RunCleanups()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-operator:", err)
		os.Exit(1)
	}
}

func benchmark(o options) error {
	if err := os.MkdirAll(o.outDir, 0o755); err != nil {
		return err
	}
	if err := benchharness.BuildUnlessGiven(&o.swarm, o.outDir, "./test/bench/operator/swarm"); err != nil {
		return err
	}
	env := "no GOMEMLIMIT"
	if len(o.operatorEnv) > 0 {
		env = strings.Join(o.operatorEnv, " ")
	}
	fmt.Printf("# bench-operator: %d repeats per change, %d cores; %s; the operator with %s\n\n", o.repeats, runtime.NumCPU(), time.Now().UTC().Format("2006-01-02"), env)
	sum := &summary{Date: time.Now().UTC().Format(time.RFC3339), Cores: runtime.NumCPU(), Repeats: o.repeats, OperatorEnv: o.operatorEnv, OperatorArgs: o.operatorArgs}
	var failures []string
	for _, name := range o.worlds {
		scale := 1.0
		if name == "large" {
			scale = o.scale
		}
		size := scaled(worldSizes[name], scale)
		if o.namespaces > 0 && size.Namespaces > 1 {
			size.Namespaces = o.namespaces
		}
		if o.streamsPerConn > 0 {
			size.StreamsPerConn = o.streamsPerConn
		}
		size.StreamsPerConn = max(size.StreamsPerConn, 1)
		if size.Namespaces > 1 {
			progress("== world %s: %d namespaces of %d pods, %d Topics, %d Subscriptions (scale %g)", name, size.Namespaces, size.Pods, size.Topics, size.Subs, scale)
		} else {
			progress("== world %s: %d pods, %d Topics, %d Subscriptions (scale %g)", name, size.Pods, size.Topics, size.Subs, scale)
		}
		r, err := measureWorld(o, size)
		if err != nil && r != nil && r.Failure == "" {
			r.Failure = err.Error()
		}
		if r != nil {
			sum.Worlds = append(sum.Worlds, r)
			printWorld(r)
		}
		if err != nil {
			failures = append(failures, fmt.Sprintf("%s: %v", name, err))
			progress("world %s FAILED: %v", name, err)
		}
		if err := benchharness.WriteSummary(o.outDir, sum); err != nil {
			return err
		}
	}
	sum.Targets = targets(sum.Worlds, o.operatorEnv)
	printTargets(sum.Targets)
	if err := benchharness.WriteSummary(o.outDir, sum); err != nil {
		return err
	}
	fmt.Printf("JSON summary: %s\n", filepath.Join(o.outDir, "summary.json"))
	for _, t := range sum.Targets {
		if !t.Met {
			failures = append(failures, fmt.Sprintf("not met (%s): %s: %s", t.World, t.Target, t.Measured))
		}
	}
	if len(failures) > 0 {
		return errors.New(strings.Join(failures, "\n"))
	}
	return nil
}

// env is one world's running processes.
type env struct {
	o           options
	cl          *cluster
	w           *world
	op          *benchharness.LoggedProc
	swarm       *swarmConn
	watch       *statusWatch
	metricsURL  string
	xdsAddr     string
	idlePerSec  float64 // operator CPU seconds per second, idle
	profileDir  string
	worldResult *worldResult
}

func measureWorld(o options, size worldSize) (*worldResult, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &worldResult{World: size.Name, Namespaces: size.Namespaces, StreamsPerConn: size.StreamsPerConn, Pods: size.totalPods(), Topics: size.Namespaces * size.Topics, Subscriptions: size.Namespaces * size.Subs,
		Scale: size.Scale, Groups: size.Groups, FullPods: size.FullPods, FullTopics: size.FullTopics, FullSubscriptions: size.FullSubs}
	w := newWorld(size)
	cl, err := startCluster(o.crdDir, w.namespaces)
	if err != nil {
		return nil, err
	}
	// The bench's watches end before the apiserver does.
	defer benchharness.AtExit(func() { cancel(); cl.Stop() })()
	e := &env{o: o, cl: cl, w: w, worldResult: r}
	e.watch = startStatusWatch(ctx, cl.Client, w)

	// The operator, its own process, with an admin kubeconfig: the bench
	// measures what changes cost, not RBAC.
	args, reviews := reviewLimitArgs(o, size)
	r.Ready.TokenReviews = reviews
	args = append(args, sharedConnArgs(o, size.StreamsPerConn)...)
	r.OperatorArgs = append(args, o.operatorArgs...)
	op, err := benchharness.StartOperator(benchharness.OperatorOptions{Bin: o.bin, Kubeconfig: cl.Kubeconfig, Namespace: operatorNamespace,
		LogPath: filepath.Join(o.outDir, size.Name+".operator.log"), Args: r.OperatorArgs, Env: o.operatorEnv})
	if err != nil {
		return r, err
	}
	defer op.Stop()
	e.op, e.metricsURL, e.xdsAddr = op.LoggedProc, op.MetricsURL, op.XDSAddr

	// The world's objects and pods, in its order; the sidecars start
	// together once their pods exist. Ready is timed from the last create.
	var cpu0 time.Duration
	var createStart, lastCreate time.Time
	var m0 metrics // the operator's counters at the last create (ObjectsFirst)
	defer benchharness.AtExit(func() { e.stopSwarm() })()
	if size.ObjectsFirst {
		progress("operator ready (pid %d); creating %d Topics and %d Subscriptions in %d namespaces, then %d pods with their ServiceAccounts and tokens, %d in flight",
			e.op.Pid(), r.Topics, r.Subscriptions, size.Namespaces, r.Pods, o.inflight)
		if cpu0, err = e.op.CPU(); err != nil {
			return r, err
		}
		if createStart, _, err = e.createObjects(ctx); err != nil {
			return r, err
		}
		specs, last, err := e.createPods(ctx)
		if err != nil {
			return r, err
		}
		lastCreate = last
		if m0, err = scrape(e.metricsURL); err != nil {
			return r, err
		}
		progress("%d objects created in %.1f s, %d pods in %.1f s; starting their %d sidecars together; waiting for Ready (up to %s)",
			r.Topics+r.Subscriptions, r.Creation.ObjectsSeconds, r.Pods, r.Creation.PodsSeconds, len(specs), o.readyTimeout)
		if err := e.startSidecars(ctx, specs); err != nil {
			return r, err
		}
	} else {
		progress("operator ready (pid %d); creating %d pods with their ServiceAccounts and tokens, %d in flight", e.op.Pid(), r.Pods, o.inflight)
		specs, _, err := e.createPods(ctx)
		if err != nil {
			return r, err
		}
		if err := e.startSidecars(ctx, specs); err != nil {
			return r, err
		}
		swarmStart := time.Now()
		if err := poll(5*time.Minute, 100*time.Millisecond, e.op.Alive, func() (bool, string) {
			n := e.swarm.configured()
			return n == r.Pods, fmt.Sprintf("%d of %d sidecars configured", n, r.Pods)
		}); err != nil {
			return r, fmt.Errorf("the sidecars' first configuration: %w", err)
		}
		r.Creation.SidecarsSeconds = time.Since(swarmStart).Seconds()
		progress("%d pods created in %.1f s; every sidecar configured %.1f s later; creating %d Topics and %d Subscriptions, %d in flight",
			r.Pods, r.Creation.PodsSeconds, r.Creation.SidecarsSeconds, r.Topics, r.Subscriptions, o.inflight)
		// Topics and Subscriptions, interleaved, then until Ready.
		if cpu0, err = e.op.CPU(); err != nil {
			return r, err
		}
		if createStart, lastCreate, err = e.createObjects(ctx); err != nil {
			return r, err
		}
		progress("%d objects created in %.1f s; waiting for Ready (up to %s)", r.Topics+r.Subscriptions, r.Creation.ObjectsSeconds, o.readyTimeout)
	}
	var stopReviews func() *tokenReviews
	if reviews != nil {
		stopReviews = watchReviews(e.metricsURL, m0, lastCreate, reviews)
	}
	var readyAt time.Time
	err = poll(o.readyTimeout, 20*time.Millisecond, e.op.Alive, func() (bool, string) {
		st, nReady := e.watch.ready()
		hold, nHold := e.swarm.holdingSince()
		if st.IsZero() || hold == 0 {
			return false, fmt.Sprintf("%d of %d counted objects Ready, %d of %d sidecars hold their configuration",
				nReady, w.counted(), nHold, r.Pods)
		}
		readyAt = st
		h := time.Unix(0, hold)
		if h.After(readyAt) {
			readyAt = h
		}
		r.Ready.StatusSeconds, r.Ready.SidecarsSeconds = st.Sub(lastCreate).Seconds(), h.Sub(lastCreate).Seconds()
		return true, ""
	})
	if stopReviews != nil {
		stopReviews()
	}
	cpu1, cerr := e.op.CPU()
	if cerr == nil {
		r.Ready.OperatorCPUSeconds = (cpu1 - cpu0).Seconds()
	}
	r.Ready.PeakRSSMiB = benchharness.MiB(e.op.PeakRSS())
	r.Ready.SidecarApplies = e.swarm.applies()
	if m, err := scrape(e.metricsURL); err == nil {
		r.Ready.Reconciles, r.Ready.QueueDepth = m.reconciles(), m.queueDepth()
		r.Ready.Runtime = m.runtime()
	}
	if err != nil {
		r.Failure = fmt.Sprintf("not Ready within %s of the last create: %v", o.readyTimeout, err)
		return r, errors.New(r.Failure)
	}
	r.Ready.Seconds = readyAt.Sub(lastCreate).Seconds()
	r.Ready.FromFirstCreateSeconds = readyAt.Sub(createStart).Seconds()
	progress("Ready %.2f s after the last create (%.1f s after the first); operator CPU %.1f s, peak RSS %.0f MiB",
		r.Ready.Seconds, r.Ready.FromFirstCreateSeconds, r.Ready.OperatorCPUSeconds, r.Ready.PeakRSSMiB)
	if tr := r.Ready.TokenReviews; tr != nil {
		progress("  of which the sidecars' TokenReviews: %s", tr.summary())
	}

	// Idle: the background each change's CPU is judged against.
	if _, err := e.settle(time.Now()); err != nil {
		if m, err := scrape(e.metricsURL); err == nil {
			r.AfterSettleTimeout = &backlog{Reconciles: m.reconciles(), QueueDepth: m.queueDepth()}
			if c, err := e.op.CPU(); err == nil {
				r.AfterSettleTimeout.OperatorCPUSeconds = (c - cpu0).Seconds()
			}
		}
		return r, fmt.Errorf("settling after Ready: %w", err)
	}
	c0, err := e.op.CPU()
	if err != nil {
		return r, err
	}
	// Scraped as often as settle scrapes, so that the scrapes' own cost
	// is part of the idle rate that each change's net CPU leaves out.
	idleStart := time.Now()
	for time.Since(idleStart) < o.idle {
		time.Sleep(500 * time.Millisecond)
		if _, err := scrape(e.metricsURL); err != nil {
			return r, err
		}
	}
	c1, err := e.op.CPU()
	if err != nil {
		return r, err
	}
	e.idlePerSec = (c1 - c0).Seconds() / time.Since(idleStart).Seconds()
	r.IdleCPUMillisPerSecond = e.idlePerSec * 1000

	if o.profile {
		e.profileDir, _ = filepath.Abs(o.outDir)
	}
	for _, ch := range changeKinds {
		if err := e.runChanges(ctx, ch); err != nil {
			r.Failure = fmt.Sprintf("%s: %v", ch.name, err)
			return r, err
		}
	}
	r.PeakRSSMiB = benchharness.MiB(e.op.PeakRSS())
	if m, err := scrape(e.metricsURL); err == nil {
		r.Runtime = m.runtime()
	}
	r.SwarmPeakRSSMiB = benchharness.MiB(e.swarm.proc.PeakRSS())
	r.WatchErrors = e.watch.errors()
	if stats := e.stopSwarm(); stats != nil {
		r.Swarm = &swarmResult{Connects: stats.Connects, Applied: stats.Applied, Refused: stats.Refused, HeapInuseMiB: float64(stats.HeapInuse) / (1 << 20)}
		if r.Swarm.Connects > uint64(e.w.podCount()) {
			progress("note: %d stream connects for %d sidecars (reconnections)", r.Swarm.Connects, e.w.podCount())
		}
	}
	return r, nil
}

// createPods creates every pod of the world with its ServiceAccount and
// token, and returns the sidecars to start and when the last create
// returned.
func (e *env) createPods(ctx context.Context) ([]opproto.Pod, time.Time, error) {
	start := time.Now()
	specs := make([]opproto.Pod, len(e.w.podNames))
	last, err := kubeenv.CreateAll(ctx, e.w.podNames, e.o.inflight, func(ctx context.Context, i int, name string) error {
		ns := e.w.namespaces[e.w.namespaceOf(i)]
		if err := e.cl.CreateServiceAccount(ctx, ns, name); err != nil {
			return err
		}
		p := newPod(ns, name, e.w.group(i))
		if err := e.cl.Client.Create(ctx, p); err != nil {
			return fmt.Errorf("creating pod %s/%s: %w", ns, name, err)
		}
		spec, err := e.cl.token(ctx, p, i)
		specs[i] = spec
		return err
	})
	e.worldResult.Creation.PodsSeconds = time.Since(start).Seconds()
	return specs, last, err
}

// createObjects creates the Topics and Subscriptions, and returns when
// the first create started and the last returned.
func (e *env) createObjects(ctx context.Context) (time.Time, time.Time, error) {
	objs := interleave(e.w)
	start := time.Now()
	last, err := kubeenv.CreateAll(ctx, objs, e.o.inflight, func(ctx context.Context, _ int, obj createObj) error {
		if err := e.cl.Client.Create(ctx, obj.obj.DeepCopyObject().(ctrlObject)); err != nil {
			return fmt.Errorf("creating %s/%s: %w", obj.obj.GetNamespace(), obj.obj.GetName(), err)
		}
		return nil
	})
	e.worldResult.Creation.ObjectsSeconds = last.Sub(start).Seconds()
	return start, last, err
}

// startSidecars starts the swarm with a sidecar for each of pods, once
// the operator published its CA bundle (the same in every namespace).
func (e *env) startSidecars(ctx context.Context, pods []opproto.Pod) error {
	caFile, err := e.cl.WaitBundle(ctx, e.w.namespaces[0], 60*time.Second, e.op.Alive)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	setup := opproto.Setup{XDSAddress: e.xdsAddr, ServerName: kubeenv.XDSServerName(), CAFile: caFile, Namespace: e.w.namespaces[0], StreamsPerConn: e.w.size.StreamsPerConn}
	file := filepath.Join(e.cl.Dir, "swarm.json")
	b, err := json.Marshal(setup)
	if err != nil {
		return err
	}
	if err := os.WriteFile(file, b, 0o600); err != nil {
		return err
	}
	p, err := benchharness.StartLogged("swarm", filepath.Join(e.o.outDir, e.w.size.Name+".swarm.log"), e.o.swarm, "-setup", file, "-bench", ln.Addr().String())
	if err != nil {
		return err
	}
	benchharness.AtExit(p.Stop)
	if e.swarm, err = acceptSwarm(ln, p, e.w, 30*time.Second); err != nil {
		p.Stop()
		return err
	}
	return e.swarm.add(pods...)
}

func (e *env) stopSwarm() *opproto.Event {
	if e.swarm == nil {
		return nil
	}
	s := e.swarm
	e.swarm = nil
	stats := s.close(20 * time.Second)
	s.proc.Stop()
	return stats
}

// progress and poll are the harness's.
var (
	progress = benchharness.Progress
	poll     = benchharness.Poll
)
