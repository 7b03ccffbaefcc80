package main

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/weighstation/weighstation/test/bench/gobench"
)

type summary struct {
	Date         string         `json:"date"`
	Cores        int            `json:"cores"`
	Repeats      int            `json:"repeats"`
	OperatorEnv  []string       `json:"operatorEnv,omitempty"`
	OperatorArgs []string       `json:"operatorArgs,omitempty"`
	Worlds       []*worldResult `json:"worlds"`
	Targets      []target       `json:"targets,omitempty"`
}

// worldResult is one world's measurements; Pods, Topics and
// Subscriptions count every namespace's.
type worldResult struct {
	World      string `json:"world"`
	Namespaces int    `json:"namespaces"`
	// StreamsPerConn is how many sidecars shared one gRPC connection;
	// OperatorArgs the operator's flags beyond the harness's.
	StreamsPerConn    int      `json:"streamsPerConn"`
	OperatorArgs      []string `json:"operatorArgs,omitempty"`
	Pods              int      `json:"pods"`
	Topics            int      `json:"topics"`
	Subscriptions     int      `json:"subscriptions"`
	Groups            int      `json:"groups"`
	Scale             float64  `json:"scale"`
	FullPods          int      `json:"fullPods"`
	FullTopics        int      `json:"fullTopics"`
	FullSubscriptions int      `json:"fullSubscriptions"`
	Creation          struct {
		PodsSeconds     float64 `json:"podsSeconds"`
		SidecarsSeconds float64 `json:"sidecarsConfiguredSeconds"`
		ObjectsSeconds  float64 `json:"topicsAndSubscriptionsSeconds"`
	} `json:"creation"`
	Ready struct {
		Seconds                float64 `json:"secondsFromLastCreate"`
		FromFirstCreateSeconds float64 `json:"secondsFromFirstCreate"`
		// StatusSeconds and SidecarsSeconds are from the last create
		// until the counted objects reported Ready and until every
		// sidecar held its configuration (Seconds is the later).
		StatusSeconds      float64 `json:"statusSecondsFromLastCreate"`
		SidecarsSeconds    float64 `json:"sidecarsSecondsFromLastCreate"`
		OperatorCPUSeconds float64 `json:"operatorCpuSecondsFromFirstCreate"`
		PeakRSSMiB         float64 `json:"operatorPeakRssMiB"`
		SidecarApplies     int     `json:"sidecarApplies"`
		// Reconciles (since the operator started) and QueueDepth by
		// controller, when the world became Ready.
		Reconciles map[string]float64 `json:"reconciles"`
		QueueDepth map[string]float64 `json:"queueDepth"`
		// TokenReviews are the sidecars' reviews, where they are part of
		// Ready (a world whose sidecars start after its last create).
		TokenReviews *tokenReviews `json:"tokenReviews,omitempty"`
		// Runtime is the operator's Go runtime at Ready.
		Runtime *goRuntime `json:"operatorRuntime,omitempty"`
	} `json:"ready"`
	// AfterSettleTimeout is the operator's backlog when it did not settle
	// after Ready within -settle-timeout.
	AfterSettleTimeout     *backlog        `json:"afterSettleTimeout,omitempty"`
	IdleCPUMillisPerSecond float64         `json:"idleCpuMillisPerSecond"`
	Changes                []*changeResult `json:"changes"`
	PeakRSSMiB             float64         `json:"operatorPeakRssMiB"`
	Runtime                *goRuntime      `json:"operatorRuntime,omitempty"` // at the end
	SwarmPeakRSSMiB        float64         `json:"swarmPeakRssMiB"`
	Swarm                  *swarmResult    `json:"swarm,omitempty"`
	WatchErrors            []string        `json:"watchErrors,omitempty"`
	Failure                string          `json:"failure,omitempty"`
}

type backlog struct {
	Reconciles         map[string]float64 `json:"reconciles"`
	QueueDepth         map[string]float64 `json:"queueDepth"`
	OperatorCPUSeconds float64            `json:"operatorCpuSecondsFromFirstCreate"`
}

type swarmResult struct {
	Connects     uint64  `json:"connects"`
	Applied      uint64  `json:"applied"`
	Refused      uint64  `json:"refused"`
	HeapInuseMiB float64 `json:"heapInuseMiB"`
}

type changeResult struct {
	Name   string         `json:"name"`
	Title  string         `json:"title"`
	Runs   []*measurement `json:"runs"`
	Median *measurement   `json:"median"`
}

func medianBy(runs []*measurement, f func(*measurement) float64) float64 {
	xs := make([]float64, len(runs))
	for i, r := range runs {
		xs[i] = f(r)
	}
	return gobench.Median(xs)
}

func maxBy(runs []*measurement, f func(*measurement) float64) float64 {
	var m float64
	for _, r := range runs {
		m = max(m, f(r))
	}
	return m
}

func keysOf[V any](ms ...map[string]V) []string {
	set := map[string]bool{}
	for _, m := range ms {
		for k := range m {
			set[k] = true
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// medianOf is the median of each figure over the runs (each figure on its
// own: not one run's).
func medianOf(runs []*measurement) *measurement {
	if len(runs) == 0 {
		return nil
	}
	m := &measurement{Desc: "median",
		Reconciles:          medianByKey(runs, func(r *measurement) map[string]float64 { return r.Reconciles }),
		Requests:            medianByKey(runs, func(r *measurement) map[string]float64 { return r.Requests }),
		WritesByKind:        medianByKey(runs, func(r *measurement) map[string]int { return r.WritesByKind }),
		WritesBy:            medianByKey(runs, func(r *measurement) map[string]int { return r.WritesBy }),
		ResourceBytesByKind: medianByKey(runs, func(r *measurement) map[string]int64 { return r.ResourceBytesByKind }),
		ResourcesByKind:     medianByKey(runs, func(r *measurement) map[string]int64 { return r.ResourcesByKind }),
	}
	for _, r := range runs {
		m.WritesOutside = append(m.WritesOutside, r.WritesOutside...)
	}
	f := func(g func(*measurement) float64) float64 { return medianBy(runs, g) }
	m.ReconcilesTotal = f(func(r *measurement) float64 { return r.ReconcilesTotal })
	m.StatusWrites = int(f(func(r *measurement) float64 { return float64(r.StatusWrites) }))
	m.WrittenObjects = int(f(func(r *measurement) float64 { return float64(r.WrittenObjects) }))
	m.Pushes = f(func(r *measurement) float64 { return r.Pushes })
	m.ACKs = f(func(r *measurement) float64 { return r.ACKs })
	m.CPUMillis = f(func(r *measurement) float64 { return r.CPUMillis })
	m.NetCPUMillis = f(func(r *measurement) float64 { return r.NetCPUMillis })
	m.WallSeconds = f(func(r *measurement) float64 { return r.WallSeconds })
	m.Affected = int(f(func(r *measurement) float64 { return float64(r.Affected) }))
	m.Selected = int(f(func(r *measurement) float64 { return float64(r.Selected) }))
	m.LastAckMillis = f(func(r *measurement) float64 { return r.LastAckMillis })
	m.MedianAckMillis = f(func(r *measurement) float64 { return r.MedianAckMillis })
	m.SettleSeconds = f(func(r *measurement) float64 { return r.SettleSeconds })
	m.Responses = int64(f(func(r *measurement) float64 { return float64(r.Responses) }))
	m.ResponseBytes = int64(f(func(r *measurement) float64 { return float64(r.ResponseBytes) }))
	m.ResourceBytes = int64(f(func(r *measurement) float64 { return float64(r.ResourceBytes) }))
	m.SidecarApplies = int64(f(func(r *measurement) float64 { return float64(r.SidecarApplies) }))
	m.PolicyBytes = int(f(func(r *measurement) float64 { return float64(r.PolicyBytes) }))
	m.AppliesTo = int(f(func(r *measurement) float64 { return float64(r.AppliesTo) }))
	return m
}

// medianByKey is the median of a figure kept by key, each key on its own
// (0 in a run that lacks it).
func medianByKey[V int | int64 | float64](runs []*measurement, figure func(*measurement) map[string]V) map[string]V {
	ms := make([]map[string]V, len(runs))
	for i, r := range runs {
		ms[i] = figure(r)
	}
	out := map[string]V{}
	for _, k := range keysOf(ms...) {
		out[k] = V(medianBy(runs, func(r *measurement) float64 { return float64(figure(r)[k]) }))
	}
	return out
}

// controllers are the operator's controllers, in the order printed.
var controllerNames = []string{"topic", "subscription", "podconfig", "propagation"}

func reconcileCell(m map[string]float64) string {
	var parts []string
	for _, c := range controllerNames {
		parts = append(parts, fmt.Sprintf("%g", m[c]))
	}
	for _, k := range keysOf(m) {
		if !slices.Contains(controllerNames, k) {
			parts = append(parts, fmt.Sprintf("%s %g", k, m[k]))
		}
	}
	return strings.Join(parts, " / ")
}

func printWorld(r *worldResult) {
	if r.Namespaces > 1 {
		fmt.Printf("## world %s: %d pods, %d Topics, %d Subscriptions in %d namespaces (%d / %d / %d each)", r.World, r.Pods, r.Topics, r.Subscriptions,
			r.Namespaces, r.Pods/r.Namespaces, r.Topics/r.Namespaces, r.Subscriptions/r.Namespaces)
	} else {
		fmt.Printf("## world %s: %d pods, %d Topics, %d Subscriptions, one namespace", r.World, r.Pods, r.Topics, r.Subscriptions)
	}
	if r.Scale != 1 {
		fmt.Printf(" (scaled %g from %d / %d / %d)", r.Scale, r.FullPods, r.FullTopics, r.FullSubscriptions)
	}
	fmt.Println()
	if r.Ready.TokenReviews != nil { // the sidecars start after the last create
		fmt.Printf("creation (16 in flight): Topics and Subscriptions %.1f s; then pods with ServiceAccounts and tokens %.1f s; then every sidecar started together\n",
			r.Creation.ObjectsSeconds, r.Creation.PodsSeconds)
	} else {
		fmt.Printf("creation (16 in flight): pods with ServiceAccounts and tokens %.1f s; every sidecar configured %.1f s later; Topics and Subscriptions %.1f s\n",
			r.Creation.PodsSeconds, r.Creation.SidecarsSeconds, r.Creation.ObjectsSeconds)
	}
	if r.StreamsPerConn > 1 {
		fmt.Printf("the sidecars' streams: %d per gRPC connection (%d connections, each from its own address), each stream with its own token; the operator with %s\n",
			r.StreamsPerConn, (r.Pods+r.StreamsPerConn-1)/r.StreamsPerConn, strings.Join(r.OperatorArgs, " "))
	}
	if r.Ready.Seconds > 0 {
		fmt.Printf("Ready (every Subscription and publishers Topic Ready with appliedPods == totalPods, every sidecar holding its configuration): %.2f s after the last create, %.1f s after the first; operator CPU %.1f s over that; peak RSS %.0f MiB; %d sidecar applies\n",
			r.Ready.Seconds, r.Ready.FromFirstCreateSeconds, r.Ready.OperatorCPUSeconds, r.Ready.PeakRSSMiB, r.Ready.SidecarApplies)
	}
	if tr := r.Ready.TokenReviews; tr != nil {
		fmt.Printf("of which the sidecars' TokenReviews: %s\n", tr.summary())
		if r.Ready.Seconds > 0 {
			fmt.Printf("after the last create: every token reviewed %.1f s, every sidecar holding its configuration %.1f s, every counted object's status Ready %.1f s\n",
				tr.Seconds, r.Ready.SidecarsSeconds, r.Ready.StatusSeconds)
		}
	}
	if r.Ready.Reconciles != nil {
		fmt.Printf("at Ready, reconciles so far (topic / subscription / podconfig / propagation): %s; queued: %s\n", reconcileCell(r.Ready.Reconciles), reconcileCell(r.Ready.QueueDepth))
	}
	if r.Failure != "" {
		fmt.Printf("FAILED: %s (operator CPU %.1f s, peak RSS %.0f MiB so far)\n", r.Failure, r.Ready.OperatorCPUSeconds, r.Ready.PeakRSSMiB)
	}
	if b := r.AfterSettleTimeout; b != nil {
		fmt.Printf("when it gave up settling: reconciles so far %s; queued %s; operator CPU %.0f s since the first create\n", reconcileCell(b.Reconciles), reconcileCell(b.QueueDepth), b.OperatorCPUSeconds)
	}
	if len(r.Changes) > 0 {
		fmt.Printf("operator idle CPU %.1f ms/s (subtracted for net CPU)\n\n", r.IdleCPUMillisPerSecond)
		fmt.Println("| change (median of runs) | reconciles topic / subscription / podconfig / propagation | status writes (Topic, Subscription; by owner) | objects written | operator CPU ms (net) | sidecars | last ack ms | pushes | config bytes received |")
		fmt.Println("|---|---|---|---|---|---|---|---|---|")
		for _, c := range r.Changes {
			m := c.Median
			if m == nil {
				continue
			}
			fmt.Printf("| %s (%d runs) | %s | %d (%d, %d; %s) | %d | %.0f (%.0f) | %d | %.1f | %.0f | %d (%s) |\n",
				c.Title, len(c.Runs), reconcileCell(m.Reconciles), m.StatusWrites, m.WritesByKind["topic"], m.WritesByKind["subscription"], intsCell(m.WritesBy),
				m.WrittenObjects, m.CPUMillis, m.NetCPUMillis, m.Affected, m.LastAckMillis, m.Pushes, m.ResourceBytes, intsCell(m.ResourceBytesByKind))
		}
	}
	if r.PeakRSSMiB > 0 {
		fmt.Printf("\noperator peak RSS at the end: %.0f MiB; the simulated sidecars' process: peak RSS %.0f MiB\n", r.PeakRSSMiB, r.SwarmPeakRSSMiB)
	}
	if worldSizes[r.World].PeakRSSMiB > 0 { // the world's RSS target: what the memory is
		fmt.Printf("operator's Go runtime at Ready: %s; at the end: %s\n", r.Ready.Runtime, r.Runtime)
	}
	fmt.Println()
}

// intsCell lists a figure kept by key, keys sorted.
func intsCell[V int | int64](m map[string]V) string {
	var parts []string
	for _, k := range keysOf(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// target is one of the targets, measured.
type target struct {
	World    string `json:"world"`
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
}

func findChange(r *worldResult, name string) *changeResult {
	for _, c := range r.Changes {
		if c.Name == name && c.Median != nil {
			return c
		}
	}
	return nil
}

// targets judges the worlds by issue 11's targets, which every world
// has, and by each world's own (worldSize); env is the operator's
// environment (its GOMEMLIMIT).
func targets(worlds []*worldResult, env []string) []target {
	var out []target
	byName := map[string]*worldResult{}
	for _, r := range worlds {
		byName[r.World] = r
		spec := worldSizes[r.World]
		if c := findChange(r, "killswitch"); c != nil {
			m := c.Median
			n := float64(m.Selected)
			rec := m.Reconciles
			out = append(out, target{World: r.World,
				// Propagation's passes over the Subscription follow its
				// sidecars' acknowledgements, batched for 50 ms: how many
				// depends on how the ACKs spread, and they read and write
				// that Subscription alone. What the target rules out is
				// a reconcile of anything else, which this checks: no
				// Topic, the Subscription once, its pods once each, and
				// no other object's status written.
				Target:   "engaging a kill switch: the Subscription reconciled once, each pod it selects once, nothing else reconciled or written (propagation's passes over that Subscription's ACKs counted apart)",
				Measured: fmt.Sprintf("median %g in all (topic %g, subscription %g, podconfig %g; propagation %g passes over its ACKs) for %g pods; objects written %d; max over runs %g", m.ReconcilesTotal, rec["topic"], rec["subscription"], rec["podconfig"], rec["propagation"], n, m.WrittenObjects, maxBy(c.Runs, func(m *measurement) float64 { return m.ReconcilesTotal })),
				Met:      rec["topic"] == 0 && rec["subscription"] <= 1 && rec["podconfig"] <= n && m.WrittenObjects <= 1,
			})
			if spec.KillSwitchCPUMillis > 0 {
				measured, met := cpuWithin(r, m, spec.KillSwitchCPUMillis)
				out = append(out, target{World: r.World, Target: fmt.Sprintf("engaging a kill switch: ≤ %g s operator CPU (%s world)", spec.KillSwitchCPUMillis/1000, r.World),
					Measured: measured, Met: met})
			}
			if p99 := spec.KillSwitchACKP99Millis; p99 > 0 {
				need := max(spec.MinRuns["killswitch"], 1)
				acks := make([]float64, len(c.Runs))
				for i, run := range c.Runs {
					acks[i] = run.LastAckMillis
				}
				got := percentile(acks, 0.99)
				out = append(out, target{World: r.World, Target: fmt.Sprintf("engaging a kill switch: its selected pods' last ACK ≤ %g ms after the write, p99 over ≥ %d changes", p99, need),
					Measured: fmt.Sprintf("p99 %.1f ms over %d changes (median %.1f ms, max %.1f ms)", got, len(acks), gobench.Median(acks), percentile(acks, 1)),
					Met:      got <= p99 && len(acks) >= need})
			}
		}
		if c := findChange(r, "podcreate"); c != nil {
			var outside []string
			for _, run := range c.Runs {
				outside = append(outside, run.WritesOutside...)
			}
			slices.Sort(outside)
			outside = slices.Compact(outside)
			msg := fmt.Sprintf("median %d status writes on %d objects; none outside", c.Median.StatusWrites, c.Median.WrittenObjects)
			if len(outside) > 0 {
				msg = fmt.Sprintf("median %d status writes on %d objects; over the runs %d objects outside, e.g. %s", c.Median.StatusWrites, c.Median.WrittenObjects, len(outside), strings.Join(head(outside, 4), ", "))
			}
			out = append(out, target{World: r.World, Target: "creating a pod writes status only on the Subscriptions that select it and the Topics whose publishers select it",
				Measured: msg, Met: len(outside) == 0 && len(c.Runs) > 0})
			if limit := spec.PodCreateCPUMillis; limit > 0 {
				measured, met := cpuWithin(r, c.Median, limit)
				out = append(out, target{World: r.World, Target: fmt.Sprintf("creating a pod (its sidecar's token review and stream included): ≤ %g ms operator CPU (%s world)", limit, r.World),
					Measured: measured, Met: met})
			}
		}
		if c := findChange(r, "topicsize"); c != nil {
			m := c.Median
			limit := 2 * int64(m.AppliesTo) * int64(m.PolicyBytes)
			out = append(out, target{World: r.World, Target: "a Topic's size-limit change pushes ≤ 2 × (pods it applies to × its policy's size) bytes",
				Measured: fmt.Sprintf("median %d bytes of resources (%s) vs 2 × %d × %d B = %d; %d gRPC response bytes in %.0f responses", m.ResourceBytes, intsCell(m.ResourceBytesByKind), m.AppliesTo, m.PolicyBytes, limit, m.ResponseBytes, float64(m.Responses)),
				// No response counted is a broken count, not a pass.
				Met: m.ResourceBytes <= limit && m.PolicyBytes > 0 && m.Responses > 0})
		}
		if limit := spec.ReadySeconds; limit > 0 {
			met := r.Ready.Seconds > 0 && r.Ready.Seconds <= limit
			out = append(out, target{World: r.World, Target: fmt.Sprintf("the %s world is Ready ≤ %g s from its last create", r.World, limit),
				Measured: readyCell(r), Met: met})
		}
		if limit := spec.PeakRSSMiB; limit > 0 {
			peak := max(r.PeakRSSMiB, r.Ready.PeakRSSMiB)
			with := "no GOMEMLIMIT"
			if len(env) > 0 {
				with = strings.Join(env, " ")
			}
			out = append(out, target{World: r.World, Target: fmt.Sprintf("the operator's peak RSS ≤ %g MiB (%s world, with the chart's GOMEMLIMIT)", limit, r.World),
				Measured: fmt.Sprintf("%.0f MiB (%.0f MiB at Ready), with %s", peak, r.Ready.PeakRSSMiB, with), Met: peak > 0 && peak <= limit})
		}
	}
	small, large := byName["small"], byName["large"]
	if small != nil && large != nil {
		for _, name := range []string{"killswitch", "podlabels", "podcreate"} {
			cs, cl := findChange(small, name), findChange(large, name)
			if cs == nil || cl == nil {
				continue
			}
			s, l := cs.Median.NetCPUMillis, cl.Median.NetCPUMillis
			ratio := l / max(s, 1)
			note := ""
			if large.Scale != 1 {
				note = fmt.Sprintf(" (large world scaled %g)", large.Scale)
			}
			out = append(out, target{World: "both", Target: fmt.Sprintf("CPU per change (%s) in the large world ≤ 12 × the small", cs.Title),
				Measured: fmt.Sprintf("%.0f ms vs %.0f ms net: %.1f×%s", l, s, ratio, note), Met: ratio <= 12})
		}
	}
	return out
}

// unresolvedFactor is how far the idle CPU subtracted from a change's may
// exceed a CPU target before the net figure no longer tells whether the
// target is met: /proc counts in 10 ms ticks, and the idle rate is
// measured over -idle apart from the change.
const unresolvedFactor = 5

// cpuWithin judges a change's median net CPU against limit (ms): met
// only if it is within it and the idle CPU subtracted over the change
// (the operator's idle rate × the change's time) is small enough for the
// net figure to resolve it.
func cpuWithin(r *worldResult, m *measurement, limit float64) (string, bool) {
	idle := r.IdleCPUMillisPerSecond * m.WallSeconds
	measured := fmt.Sprintf("median %.0f ms (net of idle; %.0f ms raw)", m.NetCPUMillis, m.CPUMillis)
	if idle > unresolvedFactor*limit {
		return measured + fmt.Sprintf("; not resolved: the idle CPU subtracted over the change, %.0f ms (%.0f ms/s × %.1f s), is over %d × the target",
			idle, r.IdleCPUMillisPerSecond, m.WallSeconds, unresolvedFactor), false
	}
	return measured, m.NetCPUMillis <= limit
}

func readyCell(r *worldResult) string {
	if r.Ready.Seconds <= 0 {
		return "not Ready: " + r.Failure
	}
	if tr := r.Ready.TokenReviews; tr != nil {
		return fmt.Sprintf("%.2f s; of it the sidecars' TokenReviews %.1f s (%s)", r.Ready.Seconds, tr.Seconds, tr.summary())
	}
	return fmt.Sprintf("%.2f s", r.Ready.Seconds)
}

// percentile is the nearest-rank percentile p (0 < p ≤ 1) of xs.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func printTargets(ts []target) {
	if len(ts) == 0 {
		return
	}
	header := "issue 11, must-show 1"
	seen := map[string]bool{}
	for _, t := range ts {
		if src := worldSizes[t.World].Source; src != "" && !seen[t.World] {
			seen[t.World] = true
			header += fmt.Sprintf("; the %s world: %s", t.World, src)
		}
	}
	fmt.Printf("## targets (%s)\n", header)
	fmt.Println("| world | target | measured | met |")
	fmt.Println("|---|---|---|---|")
	for _, t := range ts {
		met := "no"
		if t.Met {
			met = "yes"
		}
		fmt.Printf("| %s | %s | %s | %s |\n", t.World, t.Target, t.Measured, met)
	}
	fmt.Println()
}
