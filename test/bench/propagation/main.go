// Command benchpropagation is `make bench-propagation`: how long a kill
// switch change takes to reach every sidecar, end to end, at 100 and 1,000
// sidecars.
//
// Everything is real and in its own process: a kube-apiserver and etcd
// (envtest), the operator (bin/weighstation operator), and a swarm of N
// sidecars (test/bench/propagation/swarm), each with its own ADS stream,
// TLS to the operator's CA, and a token bound to its own Pod. The bench
// flips the Subscription's kill switch with a merge PATCH, CHANGES times,
// and measures, per sidecar, from the moment the PATCH call returned to the
// moment that sidecar's sidecar.Server.SetConfig returned with the new
// state. It reports HdrHistogram percentiles against the targets,
// the operator's CPU per change from /proc (less its idle CPU over the same
// wall time), and the swarm's memory.
//
// With -flood R, the same changes are made again while a flood generator
// (test/bench/propagation/flood, its own process) sends R junk xDS calls a
// second, and the two distributions are reported side by side, with the
// generator's own CPU, the TokenReviews the apiserver received, and
// whether the operator (then run with leader election) kept its Lease.
// Each sidecar dials from a loopback address of its own, as pods have
// their own IPs, so that the operator's per-peer limits see one pod each.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/weighstation/weighstation/controllers/pki"
	"github.com/weighstation/weighstation/test/bench/harness"
	"github.com/weighstation/weighstation/test/bench/propagation/swarmproto"
)

// targets are the p99 targets for a change to reach the sidecars,
// on 2 cores, by sidecar count.
var targets = map[int]time.Duration{100: 50 * time.Millisecond, 1000: 300 * time.Millisecond}

type options struct {
	bin, swarm, crdDir, outDir string
	sizes                      []int
	changes                    int
	changeTimeout              time.Duration
	startupTimeout             time.Duration
	idle, gap                  time.Duration
	startSidecars              bool
	swarmPprof                 string
	profile                    bool
	operatorMetrics            bool
	flood                      float64
	floodPeers                 int
	floodWarmup, floodMin      time.Duration
	floodBin                   string
	operatorArgs               []string
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin/weighstation", "the weighstation binary (the operator)")
	flag.StringVar(&o.swarm, "swarm", "", "the swarm binary (empty: go build ./test/bench/propagation/swarm into -out)")
	flag.StringVar(&o.crdDir, "crd", "config/crd/bases", "the CRDs to install")
	flag.StringVar(&o.outDir, "out", "bin/bench-propagation", "directory for the JSON summary and the distributions (.hgrm)")
	sizes := flag.String("n", "100,1000", "sidecar counts, comma-separated; each runs on a fresh apiserver and operator")
	flag.IntVar(&o.changes, "changes", 20, "kill switch changes per sidecar count")
	flag.DurationVar(&o.changeTimeout, "change-timeout", 30*time.Second, "how long one change may take to reach every sidecar (longer is a failure)")
	flag.DurationVar(&o.startupTimeout, "startup-timeout", 5*time.Minute, "how long every sidecar may take to receive its first configuration")
	flag.DurationVar(&o.idle, "idle", 10*time.Second, "how long the operator's idle CPU is measured, before the changes")
	flag.DurationVar(&o.gap, "gap", 250*time.Millisecond, "pause after each change has reached every sidecar (ACKs and status writes settle)")
	flag.BoolVar(&o.startSidecars, "start-sidecars", false, "Start each sidecar too (its application listener and its 50 ms kill switch loop)")
	flag.StringVar(&o.swarmPprof, "swarm-pprof", "", "serve the swarm's net/http/pprof at this loopback address, for diagnosis")
	flag.BoolVar(&o.profile, "profile", false, "profile the change phase (its numbers then include the profilers' cost): the operator with `perf record -g` (it serves no pprof), the swarm with pprof (CPU and heap), into -out/n<N>-profile/")
	flag.BoolVar(&o.operatorMetrics, "operator-metrics", false, "serve the operator's /metrics on a loopback port (instead of -metrics-bind-address 0) and report its reconciles, pushes and ACKs per change")
	flag.Float64Var(&o.flood, "flood", 0, "after the changes, make them again while junk xDS calls arrive at this many per second (forged tokens of real pods, one valid token replayed; test/bench/propagation/flood), and report both side by side; 0: no flood. The operator then runs with leader election, and its /metrics on")
	flag.IntVar(&o.floodPeers, "flood-peers", 64, "the flood's connections, each from a loopback address of its own")
	flag.DurationVar(&o.floodWarmup, "flood-warmup", 3*time.Second, "how long the flood runs before the changes under it start")
	flag.DurationVar(&o.floodMin, "flood-min", 30*time.Second, "the least time the flood runs, the changes done or not: the Lease is watched all along (the operator gives it up after 10 s without a renewal)")
	flag.StringVar(&o.floodBin, "flood-bin", "", "the flood binary (empty: go build ./test/bench/propagation/flood into -out)")
	operatorArgs := flag.String("operator-args", "", "more flags for the operator, space-separated (e.g. -xds-tokenreview-rate=50)")
	flag.Parse()
	o.operatorArgs = strings.Fields(*operatorArgs)
	if o.flood > 0 {
		o.operatorMetrics = true
	}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench-propagation: -n: %q is not a sidecar count\n", s)
			os.Exit(2)
		}
		o.sizes = append(o.sizes, n)
	}
	benchharness.CleanUpOnSignal("bench-propagation")
	if err := benchmark(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench-propagation:", err)
		os.Exit(1)
	}
}

func benchmark(o options) error {
	if err := os.MkdirAll(o.outDir, 0o755); err != nil {
		return err
	}
	if err := benchharness.BuildUnlessGiven(&o.swarm, o.outDir, "./test/bench/propagation/swarm"); err != nil {
		return err
	}
	if o.flood > 0 {
		if err := benchharness.BuildUnlessGiven(&o.floodBin, o.outDir, "./test/bench/propagation/flood"); err != nil {
			return err
		}
	}
	fmt.Printf("# bench-propagation: %d kill switch changes per sidecar count, %d cores; %s\n\n", o.changes, numCPU(), time.Now().UTC().Format("2006-01-02"))
	var results []*result
	var failures []string
	for _, n := range o.sizes {
		fmt.Fprintf(os.Stderr, "== %d sidecars\n", n)
		r, err := measure(o, n)
		if err != nil {
			return fmt.Errorf("%d sidecars: %w", n, err)
		}
		results = append(results, r)
		report(r)
		if err := writeDistributions(o.outDir, r); err != nil {
			return err
		}
		if r.Failure != "" {
			failures = append(failures, fmt.Sprintf("%d sidecars: %s", n, r.Failure))
		} else if r.Target > 0 && !r.TargetMet {
			failures = append(failures, fmt.Sprintf("%d sidecars: p99 %.1f ms over the %.0f ms target", n, r.PerSidecar.P99, r.Target))
		}
		if f := r.Flood; f != nil {
			switch {
			case f.Failure != "":
				failures = append(failures, fmt.Sprintf("%d sidecars under the flood: %s", n, f.Failure))
			case !f.LeaseKept:
				failures = append(failures, fmt.Sprintf("%d sidecars under the flood: the operator lost its Lease", n))
			case r.Target > 0 && f.PerSidecar.P99 > r.Target:
				failures = append(failures, fmt.Sprintf("%d sidecars under the flood: p99 %.1f ms over the %.0f ms target", n, f.PerSidecar.P99, r.Target))
			}
		}
	}
	summary(results)
	b, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	file := filepath.Join(o.outDir, "summary.json")
	if err := os.WriteFile(file, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("JSON summary: %s\n", file)
	if len(failures) > 0 {
		return fmt.Errorf("not met: %s", strings.Join(failures, "; "))
	}
	return nil
}

// measure runs one sidecar count on a fresh apiserver and operator.
func measure(o options, n int) (*result, error) {
	ctx := context.Background()
	progress := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
	cl, err := startCluster(o.crdDir)
	if err != nil {
		return nil, err
	}
	defer benchharness.AtExit(cl.Stop)()
	progress("apiserver up; creating %d pods, service accounts and tokens", n)
	pods, err := cl.populate(ctx, n)
	if err != nil {
		return nil, err
	}

	// The operator, its own process, with an admin kubeconfig: the
	// bench measures propagation, not RBAC.
	xdsAddr, err1 := benchharness.FreeAddr()
	probeAddr, err2 := benchharness.FreeAddr()
	metricsAddr, err3 := "0", error(nil)
	if o.operatorMetrics {
		metricsAddr, err3 = benchharness.FreeAddr()
	}
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, err
	}
	if err := os.Setenv("KUBECONFIG", cl.Kubeconfig); err != nil {
		return nil, err
	}
	// Under a flood the operator elects itself, so that the bench can
	// tell whether the flood cost it its Lease.
	opArgs := append([]string{"operator", "-namespace", operatorNamespace, "-xds-listen", xdsAddr,
		"-metrics-bind-address", metricsAddr, "-health-probe-bind-address", probeAddr, fmt.Sprintf("-leader-elect=%t", o.flood > 0),
		"-zap-time-encoding=rfc3339nano"}, // a log that lines up with the changes' timeline
		o.operatorArgs...)
	op, err := benchharness.Start("operator", o.bin, opArgs...)
	if err != nil {
		return nil, err
	}
	stopOperator := benchharness.AtExit(op.Stop)
	defer stopOperator()
	opAlive := func() error {
		if _, err := op.CPU(); err != nil {
			return fmt.Errorf("the operator exited:\n%s", tail(op.Log(), 40))
		}
		return nil
	}
	if err := benchharness.WaitHTTPReady("http://"+probeAddr+"/readyz", 60*time.Second, opAlive); err != nil {
		return nil, err
	}
	caFile, err := cl.WaitBundle(ctx, podNamespace, 60*time.Second, opAlive)
	if err != nil {
		return nil, err
	}
	progress("operator ready (pid %d); starting the swarm", op.Pid())

	// The swarm, its own process, reporting back over TCP.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	manifest := swarmproto.Manifest{
		XDSAddress: xdsAddr, ServerName: pki.ServiceDNSNames(xdsService, operatorNamespace)[2], CAFile: caFile,
		Namespace: podNamespace, Subscription: subscriptionName, Pods: pods,
	}
	manifestFile := filepath.Join(cl.Dir, "manifest.json")
	b, err := json.Marshal(manifest)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(manifestFile, b, 0o600); err != nil {
		return nil, err
	}
	args := []string{"-manifest", manifestFile, "-report", ln.Addr().String(), fmt.Sprintf("-start=%t", o.startSidecars), "-own-ips"}
	if o.swarmPprof != "" {
		args = append(args, "-pprof", o.swarmPprof)
	}
	profileDir := ""
	if o.profile {
		if profileDir, err = filepath.Abs(filepath.Join(o.outDir, fmt.Sprintf("n%d-profile", n))); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(profileDir, 0o755); err != nil {
			return nil, err
		}
		args = append(args, "-profile-dir", profileDir)
	}
	swarmStart := time.Now()
	swarm, err := benchharness.Start("swarm", o.swarm, args...)
	if err != nil {
		return nil, err
	}
	stopSwarm := benchharness.AtExit(swarm.Stop)
	defer stopSwarm()
	ev, err := acceptEvents(ln, 30*time.Second, swarm)
	if err != nil {
		return nil, err
	}

	r := &result{Sidecars: n, Target: float64(targets[n].Milliseconds())}
	started, err := ev.waitKind(swarmproto.KindStarted, o.startupTimeout)
	if err != nil {
		return nil, err
	}
	if r.Memory.SwarmCreatedRSS, err = swarm.RSS(); err != nil {
		return nil, err
	}
	r.Memory.SwarmCreatedHeap = started.HeapInuse
	r.Memory.SwarmGoroutines = started.Goroutines
	progress("%d sidecars created (swarm RSS %.0f MiB); waiting for their first configuration", n, mib(r.Memory.SwarmCreatedRSS))
	if _, err := ev.waitAll(n, false, time.Now().Add(o.startupTimeout)); err != nil {
		return nil, fmt.Errorf("the first configuration: %w\noperator log:\n%s\nswarm log:\n%s", err, tail(op.Log(), 20), tail(swarm.Log(), 20))
	}
	r.StartupSeconds = time.Since(swarmStart).Seconds()
	progress("every sidecar configured after %.1f s", r.StartupSeconds)

	// Idle: the background the change CPU is judged against.
	time.Sleep(2 * time.Second)
	procs := processes(op, swarm)
	idleBefore, err := procs.cpu()
	if err != nil {
		return nil, err
	}
	idleStart := time.Now()
	time.Sleep(o.idle)
	idleAfter, err := procs.cpu()
	if err != nil {
		return nil, err
	}
	idleWall := time.Since(idleStart)

	// The changes.
	before, err := procs.cpu()
	if err != nil {
		return nil, err
	}
	var stopProfiles func()
	if o.profile {
		stopProfiles = startProfiles(profileDir, op.Pid(), swarm.Pid())
		defer benchharness.AtExit(stopProfiles)()
	}
	var metricsBefore map[string]float64
	if o.operatorMetrics {
		if metricsBefore, err = benchharness.Scrape("http://" + metricsAddr + "/metrics"); err != nil {
			return nil, err
		}
	}
	changesStart := time.Now()
	engaged := false
	run := runChanges(ctx, o, n, cl, ev, &engaged, opAlive, progress)
	r.Failure, r.Changes, r.Timeline, r.AppliedBeforePatchReturned = run.failure, run.changes, run.timeline, run.appliedBefore
	perSidecar, lastSidecar, patchCall := run.perSidecar, run.lastSidecar, run.patchCall
	changesWall := time.Since(changesStart)
	after, err := procs.cpu()
	if err != nil {
		return nil, err
	}
	if o.operatorMetrics {
		metricsAfter, err := benchharness.Scrape("http://" + metricsAddr + "/metrics")
		if err != nil {
			return nil, err
		}
		r.Operator = operatorCounts(metricsBefore, metricsAfter, max(r.Changes, 1))
	}
	if stopProfiles != nil {
		stopProfiles()
		progress("profiles in %s: perf report -i operator.perf.data --no-children --sort sym; go tool pprof -top swarm.cpu.pprof", profileDir)
	}
	r.PerSidecar, r.LastSidecar, r.PatchCall = summarize(perSidecar), summarize(lastSidecar), summarize(patchCall)
	r.perSidecarHist, r.lastSidecarHist = perSidecar, lastSidecar
	r.TargetMet = r.Failure == "" && r.Target > 0 && r.PerSidecar.P99 <= r.Target
	cpuPerChange(r, procs.names, idleBefore, idleAfter, idleWall, before, after, changesWall, max(r.Changes, 1))
	r.ChangesWallSeconds, r.IdleWallSeconds = changesWall.Seconds(), idleWall.Seconds()
	r.CoresUsed = coresUsed(procs.names, before, after, changesWall)

	if o.flood > 0 && r.Failure == "" {
		progress("the same %d changes under a flood of %.0f junk xDS calls a second", o.changes, o.flood)
		r.Flood, err = floodPhase(ctx, o, n, cl, ev, &engaged, procs, manifestFile, metricsAddr, op, opAlive, progress)
		if err != nil {
			return nil, fmt.Errorf("the flood: %w", err)
		}
	}

	if r.Memory.SwarmRSS, err = swarm.RSS(); err != nil {
		return nil, err
	}
	if r.Memory.SwarmPeakRSS, err = swarm.PeakRSS(); err != nil {
		return nil, err
	}
	// An operator that a flood brought down has no memory to read.
	operatorGone := r.Flood != nil && !r.Flood.OperatorAlive
	if r.Memory.OperatorRSS, err = op.RSS(); err != nil && !operatorGone {
		return nil, err
	}
	if r.Memory.OperatorPeakRSS, err = op.PeakRSS(); err != nil && !operatorGone {
		return nil, err
	}
	stopSwarm()
	if stats, err := ev.waitKind(swarmproto.KindStats, 15*time.Second); err == nil {
		r.Swarm = &swarmStats{Connects: stats.Connects, Applied: stats.Applied, Refused: stats.Refused, HeapInuse: stats.HeapInuse}
		r.Memory.SwarmHeap = stats.HeapInuse
	}
	r.Refused = ev.refused
	stopOperator()
	logs := map[string]string{"operator": op.Log(), "swarm": swarm.Log()}
	if r.Flood != nil {
		logs["flood"] = r.Flood.log
	}
	for name, log := range logs {
		if log == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(o.outDir, fmt.Sprintf("n%d.%s.log", n, name)), []byte(log), 0o644); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// changeRun is one run of kill switch changes.
type changeRun struct {
	perSidecar, lastSidecar, patchCall *hdrhistogram.Histogram
	timeline                           []changeTimes
	changes, appliedBefore             int
	failure                            string
}

// runChanges flips the kill switch o.changes times from *engaged, waiting
// for each change to reach every sidecar, and measures each; it stops at
// the first change that does not (or when alive says the operator is
// gone).
func runChanges(ctx context.Context, o options, n int, cl *cluster, ev *events, engaged *bool, alive func() error, progress func(string, ...any)) changeRun {
	run := changeRun{perSidecar: newHist(), lastSidecar: newHist(), patchCall: newHist()}
	for k := range o.changes {
		if err := alive(); err != nil {
			run.failure = fmt.Sprintf("before change %d: %v", k+1, err)
			progress("FAILED: %s", run.failure)
			break
		}
		*engaged = !*engaged
		called := time.Now()
		if err := cl.setKillSwitch(ctx, *engaged); err != nil {
			run.failure = fmt.Sprintf("change %d: %v", k+1, err)
			progress("FAILED: %s", run.failure)
			break
		}
		t0 := time.Now()
		_ = run.patchCall.RecordValue(t0.Sub(called).Microseconds())
		applied, err := ev.waitAll(n, *engaged, t0.Add(o.changeTimeout))
		if err != nil {
			run.failure = fmt.Sprintf("change %d (engaged=%t): %v", k+1, *engaged, err)
			progress("FAILED: %s", run.failure)
			break
		}
		var last int64
		ct := changeTimes{Engaged: *engaged, PatchCalled: called.UnixNano(), PatchReturned: t0.UnixNano(), FirstApplied: 1<<63 - 1}
		for _, at := range applied {
			ct.FirstApplied, ct.LastApplied = min(ct.FirstApplied, at), max(ct.LastApplied, at)
			d := (at - t0.UnixNano()) / int64(time.Microsecond)
			if d < 0 {
				run.appliedBefore++
				d = 0
			}
			_ = run.perSidecar.RecordValue(max(d, 1))
			last = max(last, d)
		}
		_ = run.lastSidecar.RecordValue(max(last, 1))
		run.timeline = append(run.timeline, ct)
		run.changes++
		progress("change %d (engaged=%t): last sidecar after %.1f ms", k+1, *engaged, float64(last)/1000)
		time.Sleep(o.gap)
	}
	return run
}

// startProfiles records the operator with perf (its binary serves no
// pprof) and signals the swarm to profile itself, until the returned
// function is called.
func startProfiles(dir string, operatorPid, swarmPid int) func() {
	var perf *exec.Cmd
	if path, err := exec.LookPath("perf"); err == nil {
		perf = exec.Command(path, "record", "-F", "499", "-g", "-p", strconv.Itoa(operatorPid), "-o", filepath.Join(dir, "operator.perf.data"))
		perf.Stdout, perf.Stderr = os.Stderr, os.Stderr
		if err := perf.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "bench-propagation: perf:", err)
			perf = nil
		}
	} else {
		fmt.Fprintln(os.Stderr, "bench-propagation: no perf on PATH: the operator is not profiled")
	}
	_ = syscall.Kill(swarmPid, syscall.SIGUSR1)
	time.Sleep(500 * time.Millisecond) // perf attaches to every thread
	return sync.OnceFunc(func() {
		_ = syscall.Kill(swarmPid, syscall.SIGUSR2)
		if perf != nil {
			benchharness.StopCommand(perf, syscall.SIGINT, 30*time.Second)
		}
		time.Sleep(time.Second) // the swarm writes its heap profile
	})
}

// events reads the swarm's reports.
type events struct {
	ch      chan swarmproto.Event
	swarm   *benchharness.Proc
	refused []string
}

func acceptEvents(ln net.Listener, timeout time.Duration, swarm *benchharness.Proc) (*events, error) {
	conn, err := benchharness.AcceptWithin(ln, timeout, "the swarm", func() string { return tail(swarm.Log(), 20) })
	if err != nil {
		return nil, err
	}
	e := &events{ch: make(chan swarmproto.Event, 1<<16), swarm: swarm}
	go func() {
		defer close(e.ch)
		defer conn.Close()
		s := bufio.NewScanner(conn)
		s.Buffer(make([]byte, 64<<10), 1<<20)
		for s.Scan() {
			var ev swarmproto.Event
			if err := json.Unmarshal(s.Bytes(), &ev); err != nil {
				fmt.Fprintln(os.Stderr, "bench-propagation: a swarm event:", err)
				continue
			}
			e.ch <- ev
		}
	}()
	return e, nil
}

// next returns the next event before deadline.
func (e *events) next(deadline time.Time) (swarmproto.Event, error) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case ev, ok := <-e.ch:
		if !ok {
			return ev, fmt.Errorf("the swarm stopped reporting:\n%s", tail(e.swarm.Log(), 20))
		}
		if ev.Kind == swarmproto.KindRefused {
			e.refused = append(e.refused, fmt.Sprintf("pod %d: %s", ev.Pod, ev.Error))
		}
		return ev, nil
	case <-t.C:
		return swarmproto.Event{}, errTimeout
	}
}

var errTimeout = errors.New("timed out")

func (e *events) waitKind(kind string, timeout time.Duration) (swarmproto.Event, error) {
	deadline := time.Now().Add(timeout)
	for {
		ev, err := e.next(deadline)
		if err != nil {
			return ev, fmt.Errorf("waiting for the swarm's %q: %w", kind, err)
		}
		if ev.Kind == kind {
			return ev, nil
		}
	}
}

// waitAll waits until each of the n sidecars applied a configuration with
// the kill switch engaged or not, and returns when each did (UnixNano).
// Earlier reports of the other state (a change before) are skipped; every
// change waits for the one before it to reach every sidecar, so a report of
// the state wanted is of this change.
func (e *events) waitAll(n int, engaged bool, deadline time.Time) (map[int]int64, error) {
	applied := make(map[int]int64, n)
	for len(applied) < n {
		ev, err := e.next(deadline)
		if err != nil {
			return nil, fmt.Errorf("%d of %d sidecars applied it: %w (refusals: %d, last %q)", len(applied), n, err, len(e.refused), last(e.refused))
		}
		if ev.Kind != swarmproto.KindApplied || ev.Engaged != engaged {
			continue
		}
		if _, ok := applied[ev.Pod]; !ok {
			applied[ev.Pod] = ev.At
		}
	}
	return applied, nil
}

func last(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	return xs[len(xs)-1]
}

func tail(s string, lines int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

func newHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
