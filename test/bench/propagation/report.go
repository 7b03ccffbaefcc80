package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/weighstation/weighstation/test/bench/harness"
)

// result is one sidecar count's measurements; it is also the JSON summary.
type result struct {
	Sidecars int `json:"sidecars"`
	// Changes is how many changes reached every sidecar.
	Changes int `json:"changes"`
	// Failure says which change did not reach every sidecar in time.
	Failure string `json:"failure,omitempty"`
	// PerSidecar is, per sidecar and change, PATCH returned → SetConfig
	// returned with the new state (ms); LastSidecar the same for the last
	// sidecar of each change; PatchCall the PATCH round trip itself.
	PerSidecar  dist `json:"perSidecarMs"`
	LastSidecar dist `json:"lastSidecarMs"`
	PatchCall   dist `json:"patchCallMs"`
	// AppliedBeforePatchReturned counts applies that came before the PATCH
	// call returned (the watch beat the response); they count as 0.
	AppliedBeforePatchReturned int `json:"appliedBeforePatchReturned"`
	// Target is the p99 target in ms (0: none for this count).
	Target    float64 `json:"targetP99Ms"`
	TargetMet bool    `json:"targetMet"`
	// StartupSeconds is swarm start → every sidecar configured.
	StartupSeconds     float64  `json:"startupSeconds"`
	IdleWallSeconds    float64  `json:"idleWallSeconds"`
	ChangesWallSeconds float64  `json:"changesWallSeconds"`
	CPU                []cpuRow `json:"cpu"`
	// OtherLoadIdle and OtherLoadChanges are the share of the machine
	// (all cores, %) that processes outside the bench used during the idle
	// window and during the changes: these machines are shared.
	OtherLoadIdle    float64     `json:"otherLoadIdlePercent"`
	OtherLoadChanges float64     `json:"otherLoadChangesPercent"`
	Memory           memory      `json:"memory"`
	Swarm            *swarmStats `json:"swarm,omitempty"`
	Refused          []string    `json:"refused,omitempty"`
	// Operator is what the operator's /metrics counted per change
	// (-operator-metrics).
	Operator *operatorCounters `json:"operatorPerChange,omitempty"`
	// Timeline is each change's moments (UnixNano), to line up with the
	// operator's log (n<N>.operator.log, RFC 3339 nano timestamps).
	Timeline []changeTimes `json:"timeline"`
	// CoresUsed is each process's CPU over the changes, in cores.
	CoresUsed map[string]float64 `json:"coresUsed"`
	// Flood is the same changes under a flood (-flood).
	Flood *floodResult `json:"flood,omitempty"`

	perSidecarHist, lastSidecarHist *hdrhistogram.Histogram
}

// operatorCounters are the operator's own counts, per change.
type operatorCounters struct {
	// Reconciles by controller (podconfig, subscription, topic).
	Reconciles map[string]float64 `json:"reconciles"`
	Pushes     float64            `json:"xdsPushes"`
	ACKs       float64            `json:"xdsACKs"`
	// PushLatencyBuckets is the operator's push latency histogram over the
	// changes (cache change → response sent), cumulative, by upper bound
	// in ms.
	PushLatencyBuckets map[string]float64 `json:"pushLatencyBucketsMs"`
}

type changeTimes struct {
	Engaged       bool  `json:"engaged"`
	PatchCalled   int64 `json:"patchCalled"`
	PatchReturned int64 `json:"patchReturned"`
	FirstApplied  int64 `json:"firstApplied"`
	LastApplied   int64 `json:"lastApplied"`
}

type dist struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p999"`
	Max   float64 `json:"max"`
}

type memory struct {
	// SwarmCreatedRSS is the swarm's RSS once every sidecar exists, before
	// any xDS stream; SwarmRSS and SwarmPeakRSS after the changes.
	SwarmCreatedRSS  int64  `json:"swarmCreatedRSS"`
	SwarmCreatedHeap uint64 `json:"swarmCreatedHeapInuse"`
	SwarmGoroutines  int    `json:"swarmGoroutinesCreated"`
	SwarmRSS         int64  `json:"swarmRSS"`
	SwarmPeakRSS     int64  `json:"swarmPeakRSS"`
	SwarmHeap        uint64 `json:"swarmHeapInuse"`
	OperatorRSS      int64  `json:"operatorRSS"`
	OperatorPeakRSS  int64  `json:"operatorPeakRSS"`
}

type swarmStats struct {
	Connects  uint64 `json:"connects"`
	Applied   uint64 `json:"applied"`
	Refused   uint64 `json:"refused"`
	HeapInuse uint64 `json:"heapInuse"`
}

// cpuRow is one process's CPU over the changes.
type cpuRow struct {
	Process string `json:"process"`
	// GrossMs is the CPU per change over the change phase; IdleMsPerS the
	// idle rate measured before it; NetMs is GrossMs less the idle rate
	// over the change phase's wall time, per change.
	GrossMs    float64 `json:"grossMsPerChange"`
	IdleMsPerS float64 `json:"idleMsPerSecond"`
	NetMs      float64 `json:"netMsPerChange"`
}

func summarize(h *hdrhistogram.Histogram) dist {
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return dist{
		Count: h.TotalCount(),
		P50:   ms(h.ValueAtQuantile(50)), P90: ms(h.ValueAtQuantile(90)), P99: ms(h.ValueAtQuantile(99)),
		P999: ms(h.ValueAtQuantile(99.9)), Max: ms(h.Max()),
	}
}

// otherLoad names the CPU the rest of the machine used: these machines
// are shared, and load from outside the bench shows up in its latencies.
const otherLoad = "everything else on the machine"

// procSet is the processes whose CPU is read: the operator, the swarm, and
// the apiserver and etcd (envtest's children of this process).
type procSet struct {
	names []string
	pids  []int
}

func processes(op, swarm *benchharness.Proc) procSet {
	s := procSet{names: []string{"operator", "swarm"}, pids: []int{op.Pid(), swarm.Pid()}}
	children := benchharness.ChildrenNamed("kube-apiserver", "etcd")
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if pid, ok := children[name]; ok {
			s.names, s.pids = append(s.names, name), append(s.pids, pid)
		}
	}
	s.names, s.pids = append(s.names, "the bench itself"), append(s.pids, os.Getpid())
	s.names, s.pids = append(s.names, otherLoad), append(s.pids, 0)
	return s
}

// cpu reads each process's CPU time, then the bench's own (pid 0 is
// this process) and the whole machine's busy time: the last entry is the
// rest of the machine (busy less every process above).
func (s procSet) cpu() ([]time.Duration, error) {
	out := make([]time.Duration, len(s.pids))
	for i, pid := range s.pids {
		if s.names[i] == otherLoad {
			busy, err := benchharness.MachineBusy()
			if err != nil {
				return nil, err
			}
			out[i] = busy
			for _, d := range out[:i] {
				out[i] -= d
			}
			continue
		}
		d, err := benchharness.ProcessCPU(pid)
		if err != nil {
			return nil, fmt.Errorf("%s's CPU time: %w", s.names[i], err)
		}
		out[i] = d
	}
	return out, nil
}

// noisyPercent is the share of the machine that outside processes may use
// before the report says the numbers are disturbed.
const noisyPercent = 10

// cpuPerChange turns CPU readings into rows for the bench's processes,
// and the outside load into shares of the machine.
func cpuPerChange(r *result, names []string, idleBefore, idleAfter []time.Duration, idleWall time.Duration, before, after []time.Duration, wall time.Duration, changes int) {
	var rows []cpuRow
	share := func(d, wall time.Duration) float64 { return 100 * float64(d) / float64(wall) / float64(numCPU()) }
	for i, name := range names {
		if name == otherLoad {
			r.OtherLoadIdle = share(idleAfter[i]-idleBefore[i], idleWall)
			r.OtherLoadChanges = share(after[i]-before[i], wall)
			continue
		}
		idleRate := float64(idleAfter[i]-idleBefore[i]) / float64(idleWall) // CPU seconds per wall second
		gross := float64(after[i] - before[i])
		background := idleRate * float64(wall)
		rows = append(rows, cpuRow{
			Process:    name,
			GrossMs:    gross / float64(changes) / 1e6,
			IdleMsPerS: idleRate * 1000,
			NetMs:      (gross - background) / float64(changes) / 1e6,
		})
	}
	r.CPU = rows
}

func report(r *result) {
	fmt.Printf("## %d sidecars\n\n", r.Sidecars)
	if r.Failure != "" {
		fmt.Printf("**FAILED**: %s (%d of the changes reached every sidecar)\n\n", r.Failure, r.Changes)
	}
	fmt.Printf("Kill switch change, PATCH returned → the sidecar's SetConfig returned with the new state, ms (%d changes):\n\n", r.Changes)
	fmt.Println("| | p50 | p90 | p99 | p99.9 | max | count |\n|---|---|---|---|---|---|---|")
	row := func(name string, d dist) {
		fmt.Printf("| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %d |\n", name, d.P50, d.P90, d.P99, d.P999, d.Max, d.Count)
	}
	row("each sidecar", r.PerSidecar)
	row("last sidecar of each change", r.LastSidecar)
	row("the PATCH call itself (before t0)", r.PatchCall)
	fmt.Println()
	if r.Target > 0 {
		verdict := "met"
		if !r.TargetMet {
			verdict = "NOT MET"
		}
		fmt.Printf("Target (the issue, on 2 cores): p99 ≤ %.0f ms at %d sidecars. Measured p99 %.1f ms = %.2f× the target: **%s**.\n\n",
			r.Target, r.Sidecars, r.PerSidecar.P99, r.PerSidecar.P99/r.Target, verdict)
	}
	if r.AppliedBeforePatchReturned > 0 {
		fmt.Printf("%d applies came before the PATCH call returned (counted as 0).\n\n", r.AppliedBeforePatchReturned)
	}
	fmt.Printf("CPU per change (/proc utime+stime, 10 ms ticks; %d changes over %.1f s; idle measured over %.1f s before them), ms:\n\n",
		r.Changes, r.ChangesWallSeconds, r.IdleWallSeconds)
	fmt.Println("| process | gross per change | idle rate (ms/s) | idle over the same wall time, per change | net per change |\n|---|---|---|---|---|")
	ours := 0.0
	for _, c := range r.CPU {
		fmt.Printf("| %s | %.1f | %.1f | %.1f | %.1f |\n", c.Process, c.GrossMs, c.IdleMsPerS, c.GrossMs-c.NetMs, c.NetMs)
		ours += c.GrossMs
	}
	fmt.Printf("\nDuring the changes the bench's processes used %.0f%% of the machine (%d cores), and processes outside the bench %.0f%% (%.0f%% during the idle window).",
		100*ours*float64(r.Changes)/(r.ChangesWallSeconds*1000*float64(numCPU())), numCPU(), r.OtherLoadChanges, r.OtherLoadIdle)
	if r.OtherLoadChanges > noisyPercent || r.OtherLoadIdle > noisyPercent {
		fmt.Printf(" **Over %d%%: the machine was shared with other work, and these latencies and CPU times include its interference; run again on a quiet machine.**", noisyPercent)
	}
	fmt.Print("\n\n")
	m := r.Memory
	fmt.Printf("Memory: swarm RSS %.0f MiB with %d sidecars created (%.0f KiB each, embedded nats-server's side of each connection included; %d goroutines), %.0f MiB after the changes (peak %.0f MiB, heap in use %.0f MiB). Operator RSS %.0f MiB (peak %.0f MiB).\n\n",
		mib(m.SwarmCreatedRSS), r.Sidecars, float64(m.SwarmCreatedRSS)/1024/float64(r.Sidecars), m.SwarmGoroutines,
		mib(m.SwarmRSS), mib(m.SwarmPeakRSS), float64(m.SwarmHeap)/(1<<20), mib(m.OperatorRSS), mib(m.OperatorPeakRSS))
	if c := r.Operator; c != nil {
		fmt.Printf("The operator's /metrics, per change: reconciles podconfig %.0f, subscription %.0f, topic %.0f; xDS pushes %.0f, ACKs %.0f. Its push latency (cache change → response sent), cumulative over the changes:",
			c.Reconciles["podconfig"], c.Reconciles["subscription"], c.Reconciles["topic"], c.Pushes, c.ACKs)
		prev := -1.0
		for _, le := range sortedBuckets(c.PushLatencyBuckets) {
			if n := c.PushLatencyBuckets[le] * float64(r.Changes); n != prev {
				fmt.Printf(" ≤%s ms: %.0f;", le, n)
				prev = n
			}
		}
		fmt.Print("\n\n")
	}
	fmt.Printf("Startup: every sidecar held its first configuration %.1f s after the swarm started (TLS, TokenReview, first push).", r.StartupSeconds)
	if s := r.Swarm; s != nil {
		fmt.Printf(" xDS clients: %d stream opens for %d sidecars, %d configurations applied, %d refused.", s.Connects, r.Sidecars, s.Applied, s.Refused)
	}
	fmt.Print("\n\n")
	if r.Flood != nil {
		reportFlood(r)
	}
}

func summary(results []*result) {
	fmt.Println("## Summary\n\n| sidecars | p50 | p90 | p99 | p99.9 | max | last sidecar p50 / max | target p99 | | operator CPU per change (net) | swarm RSS | outside load |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		target, verdict := "–", ""
		if r.Target > 0 {
			target = fmt.Sprintf("≤ %.0f ms", r.Target)
			verdict = map[bool]string{true: "met", false: "NOT MET"}[r.TargetMet]
		}
		if r.Failure != "" {
			verdict = "FAILED"
		}
		opCPU := 0.0
		for _, c := range r.CPU {
			if c.Process == "operator" {
				opCPU = c.NetMs
			}
		}
		d := r.PerSidecar
		fmt.Printf("| %d | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.1f / %.1f ms | %s | %s | %.1f ms | %.0f MiB | %.0f%% |\n",
			r.Sidecars, d.P50, d.P90, d.P99, d.P999, d.Max, r.LastSidecar.P50, r.LastSidecar.Max, target, verdict, opCPU, mib(r.Memory.SwarmRSS), r.OtherLoadChanges)
	}
	fmt.Println()
}

// writeDistributions writes the per-sidecar and last-sidecar
// distributions in HdrHistogram's plotter format (µs).
func writeDistributions(dir string, r *result) error {
	for name, h := range map[string]*hdrhistogram.Histogram{"each-sidecar": r.perSidecarHist, "last-sidecar": r.lastSidecarHist} {
		if h == nil {
			continue
		}
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("n%d.%s.us.hgrm", r.Sidecars, name)))
		if err != nil {
			return err
		}
		_, err = h.PercentilesPrint(f, 5, 1)
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func numCPU() int { return runtime.NumCPU() }
