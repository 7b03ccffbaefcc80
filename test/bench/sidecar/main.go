// Command benchsidecar is `make bench-sidecar`: the open-loop comparison of
// publish-to-delivery through two sidecars (the publisher's and the
// subscriber's) against the broker directly and against two do-nothing
// TCP relays in the sidecars' places (splice relays, whose bytes never
// enter user space, and read/write relays with 64 KiB buffers, the floor
// for a proxy that parses), all as separate processes, for the five
// configurations of "Benchmarking Message Queue Latency", in interleaved
// rounds, with a direct-versus-direct row for the machine's noise. It also
// finds the highest sustainable rate directly, through one relay, one
// sidecar, two relays and two sidecars, by bisection to within 2%, in
// rounds. Each ratio is taken within a round and reported as the median
// over the rounds with its range. With -out it writes each setup's
// distributions, merged over the rounds, and one plot per configuration
// with the setups overlaid. With -at it runs none of that: the one-hop
// setups at fixed rates, with every process's CPU per message (probe.go).
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/loadgen"
	"github.com/weighstation/weighstation/test/bench/gobench"
	"github.com/weighstation/weighstation/test/bench/harness"
)

type config struct {
	name        string
	size        int
	rate        float64
	connections int
}

// The five configurations of the reading (05-measuring-latency).
var configs = []config{
	{"256 B at 3,000/s", 256, 3000, 1},
	{"1 KB at 3,000/s", 1024, 3000, 1},
	{"5 KB at 2,000/s", 5 * 1024, 2000, 1},
	{"1 KB at 20,000/s (25 connections)", 1024, 20000, 25},
	{"1 MB at 100/s", 1<<20 - 4096, 100, 1}, // 1 MiB less room for headers, under the broker's 1 MiB max_payload
}

// setup is one way of connecting the publisher and the subscriber.
type setup struct {
	name           string
	pubURL, subURL string
	direct         bool // needs the broker's token
}

// run is one bench run's result with the processes' CPU over it.
type run struct {
	summary *loadgen.Summary
	cpu     map[string]time.Duration // by process name
	rss     map[string]int64         // VmRSS at the end of the run, by process name
}

func main() {
	bin := flag.String("bin", "bin/weighstation", "the weighstation binary: the broker, the load generator, and the sidecars unless -sidecar-bin")
	sidecarBin := flag.String("sidecar-bin", "", "the injected sidecar binary (weighstation-sidecar) for the sidecars; empty: `weighstation sidecar`")
	duration := flag.Duration("duration", 30*time.Second, "each run's length")
	rounds := flag.Int("rounds", 5, "interleaved rounds per configuration, and of the sustainable-rate search")
	only := flag.String("only", "", "run only configurations whose name contains this")
	maxRate := flag.Bool("max-rate", true, "also find the highest sustainable rate: directly, through one and two relays, through one and two sidecars")
	rateDuration := flag.Duration("rate-duration", 5*time.Second, "each try's length in the sustainable-rate search")
	relay := flag.String("relay", "", "the tcprelay binary: adds rows with two do-nothing TCP relays where the sidecars are (splice and read/write), the cost of the extra hops alone (none when empty)")
	at := flag.String("at", "", "instead of the bench: run direct, one splice relay and one sidecar at these rates (1 KB, comma-separated, -rate-duration per try, -rounds) and print each try's latency and every process's CPU per message")
	loadBin := flag.String("load-bin", "", "with -at: the load generator's binary (empty: -bin), to compare an older build's generator")
	stamp := flag.Bool("stamp", true, "with -at: false turns the sidecars' stamping off, to show what the stamp costs the subscribing client, which in the one-sidecar setup decodes it")
	overlap := flag.Bool("overlap", false, "also start a sidecar with -overlap-upstream-writes and add it, as the publisher's, to the sustainable-rate search and to -at as \""+overlapSetup+"\" (the lever to try on a machine with cores to spare)")
	baseSidecarBin := flag.String("base-sidecar-bin", "", "a sidecar binary of another build (make bench-sidecar BASE=<commit> builds one from a worktree): two more sidecars run it, as the row \""+baseSetup+"\" interleaved with the others, and the report compares the two builds' CPU per message and p50")
	outDir := flag.String("out", "", "directory for the merged distributions in HdrHistogram's plotter format and one plot per configuration (none when empty)")
	flag.Parse()
	bins := benchharness.Binaries{Weighstation: *bin, Sidecar: *sidecarBin}
	var rates []float64
	if *at != "" {
		var err error
		if rates, err = parseRates(*at); err != nil {
			fmt.Fprintln(os.Stderr, "bench-sidecar:", err)
			os.Exit(2)
		}
		if *relay == "" {
			fmt.Fprintln(os.Stderr, "bench-sidecar: -at needs -relay")
			os.Exit(2)
		}
	}
	// -at replaces the bench: the bench's flags mean nothing with it, and
	// -at's own nothing without it. Either is refused rather than ignored.
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, name := range []string{"only", "max-rate", "out", "duration"} {
		if *at != "" && set[name] {
			fmt.Fprintf(os.Stderr, "bench-sidecar: -%s does not apply with -at\n", name)
			os.Exit(2)
		}
	}
	for _, name := range []string{"load-bin", "stamp"} {
		if *at == "" && set[name] {
			fmt.Fprintf(os.Stderr, "bench-sidecar: -%s is for -at only (the bench's targets are with stamping on and its own generator)\n", name)
			os.Exit(2)
		}
	}
	if *loadBin == "" {
		*loadBin = *bin
	}
	if *at != "" && *baseSidecarBin != "" {
		fmt.Fprintln(os.Stderr, "bench-sidecar: -base-sidecar-bin does not apply with -at")
		os.Exit(2)
	}
	probing := probeFlags{rates: rates, loadBin: *loadBin, noStamp: !*stamp}
	if err := benchmark(bins, *baseSidecarBin, *relay, *duration, *rateDuration, *rounds, *only, *maxRate, *outDir, *overlap, probing); err != nil {
		fmt.Fprintln(os.Stderr, "bench-sidecar:", err)
		os.Exit(1)
	}
}

// probeFlags are -at, -load-bin and -stamp: rates to probe instead of the
// bench, with which load generator, and whether the sidecars stamp.
type probeFlags struct {
	rates   []float64
	loadBin string
	// noStamp turns stamping off in the sidecars' pod configuration, to
	// show what the stamp costs a subscriber outside the mesh.
	noStamp bool
}

func benchmark(bins benchharness.Binaries, baseSidecarBin, relay string, duration, rateDuration time.Duration, rounds int, only string, maxRate bool, outDir string, overlap bool, probing probeFlags) error {
	bin := bins.Weighstation
	sidecarName := bins.SidecarName()
	podConfig := benchharness.PassThroughPodConfig
	if probing.noStamp {
		const on, off = "stampHeader: true", "stampHeader: false"
		if !strings.Contains(podConfig, on) {
			return fmt.Errorf("-stamp=false: the pass-through pod configuration no longer says %q", on)
		}
		podConfig = strings.Replace(podConfig, on, off, 1)
	}
	mesh, err := benchharness.StartMesh(bins, 2, podConfig)
	if err != nil {
		return err
	}
	defer mesh.Stop()
	if overlap {
		// The third sidecar: only ever the publisher's, in overlapSetup.
		if err := mesh.AddSidecar(bins, "-overlap-upstream-writes"); err != nil {
			return err
		}
	}
	setups := []setup{
		{"direct", mesh.BrokerURL, mesh.BrokerURL, true},
		{sidecarsSetup, mesh.SidecarURLs[0], mesh.SidecarURLs[1], false},
	}
	var baseNames []string // the base build's two sidecars, publisher's first
	if baseSidecarBin != "" {
		base := benchharness.Binaries{Weighstation: bin, Sidecar: baseSidecarBin}
		first := len(mesh.Sidecars)
		for range 2 {
			if err := mesh.AddSidecar(base); err != nil {
				return fmt.Errorf("-base-sidecar-bin: %w", err)
			}
		}
		baseNames = []string{mesh.Sidecars[first].Name, mesh.Sidecars[first+1].Name}
		setups = append(setups, setup{baseSetup, mesh.SidecarURLs[first], mesh.SidecarURLs[first+1], false})
	}
	procs := append([]*benchharness.Proc{mesh.Broker}, mesh.Sidecars...)
	relays := map[string][2]string{} // by copy mode: the publisher's and the subscriber's relay
	if relay != "" {
		for _, mode := range []string{"splice", "rw"} {
			var urls [2]string
			for i, side := range []string{"pub", "sub"} {
				addr, err := benchharness.FreeAddr()
				if err != nil {
					return err
				}
				p, err := benchharness.Start(relayName(mode, side), relay, "-listen", addr, "-copy", mode, "-target", strings.TrimPrefix(mesh.BrokerURL, "nats://"))
				if err != nil {
					return err
				}
				defer p.Stop()
				procs = append(procs, p)
				if err := benchharness.WaitNATS("nats://"+addr, nats.Token("bench-token")); err != nil {
					return err
				}
				urls[i] = "nats://" + addr
			}
			relays[mode] = urls
		}
		setups = append(setups,
			setup{spliceSetup, relays["splice"][0], relays["splice"][1], true},
			setup{rwSetup, relays["rw"][0], relays["rw"][1], true})
	}
	if len(probing.rates) > 0 {
		return probe(probing, mesh, procs, relays, rateDuration, rounds)
	}
	setups = append(setups, setup{"direct again (noise)", mesh.BrokerURL, mesh.BrokerURL, true})
	fmt.Printf("# bench-sidecar: %d rounds × %s per setup, interleaved; %s\n\n", rounds, duration, time.Now().UTC().Format("2006-01-02"))
	for _, c := range configs {
		if only != "" && !strings.Contains(c.name, only) {
			continue
		}
		results := make([][]run, len(setups))
		for round := range rounds {
			for i, s := range setups {
				r, err := benchOnce(bin, mesh, procs, s, c, duration)
				if err != nil {
					return fmt.Errorf("%s, %s, round %d: %w", c.name, s.name, round+1, err)
				}
				results[i] = append(results[i], r)
				fmt.Fprintf(os.Stderr, "%s / %s / round %d: p50 %d µs, p99 %d µs\n", c.name, s.name, round+1,
					r.summary.Corrected.Percentiles["50"], r.summary.Corrected.Percentiles["99"])
			}
		}
		report(c, setups, results, sidecarName)
		if baseNames != nil {
			compareBuilds(setups, results, baseNames)
		}
		if outDir != "" {
			if err := writeMerged(outDir, c, setups, results); err != nil {
				return err
			}
			path, err := writePlot(outDir, c, setups, results, duration)
			if err != nil {
				return err
			}
			fmt.Printf("Plot of the corrected distributions: %s\n\n", path)
		}
	}
	if maxRate {
		return sustainable(bin, mesh, relays, rateDuration, rounds)
	}
	return nil
}

// relayName is the process name of a relay: its copy mode and its side
// ("pub" or "sub").
func relayName(mode, side string) string { return "relay-" + mode + "-" + side }

// The setups' names, by which the ratios find them.
const (
	sidecarsSetup = "two sidecars"
	spliceSetup   = "two splice relays (the hops alone)"
	// overlapSetup is -overlap's row: one sidecar, the publisher's, run
	// with -overlap-upstream-writes.
	overlapSetup = "one sidecar, overlapped writes"
	rwSetup      = "two read/write relays (one user-space copy per hop)"
	// baseSetup is -base-sidecar-bin's row: two sidecars of the other build.
	baseSetup = "two sidecars, base build"
)

// compareBuilds prints, per round, the two sidecars' CPU per message and
// p50 (corrected) of this build over the base build's, run in the same
// round, and the verdicts of issue 32's delivery target: CPU per message
// at least 20% lower, p50 no higher.
func compareBuilds(setups []setup, results [][]run, baseNames []string) {
	side, base := indexOf(setups, sidecarsSetup), indexOf(setups, baseSetup)
	cpuPerMsg := func(r run, names ...string) float64 {
		var cpu time.Duration
		for _, n := range names {
			cpu += r.cpu[n]
		}
		return float64(cpu.Nanoseconds()) / float64(max(r.summary.Sent, 1))
	}
	var cpuRatios, p50Ratios, cpuNew, cpuBase []float64
	for k := range results[side] {
		n, b := cpuPerMsg(results[side][k], "sidecar-a", "sidecar-b"), cpuPerMsg(results[base][k], baseNames...)
		cpuNew, cpuBase = append(cpuNew, n), append(cpuBase, b)
		cpuRatios = append(cpuRatios, n/max(b, 1e-9))
		p50Ratios = append(p50Ratios, float64(results[side][k].summary.Corrected.Percentiles["50"])/max(float64(results[base][k].summary.Corrected.Percentiles["50"]), 1))
	}
	fmt.Printf("this build over the base build, two sidecars each, per round (median [range]; CPU from process accounting, 10 ms ticks):\n\n| | this build | base build | ratio | target |\n|---|---|---|---|---|\n")
	fmt.Printf("| both sidecars' CPU per message | %.0f ns | %.0f ns | %s | ≤ 0.80×: %s |\n", gobench.Median(cpuNew), gobench.Median(cpuBase), spread(cpuRatios), gobench.Verdict(gobench.Median(cpuRatios) <= 0.80))
	fmt.Printf("| p50, corrected | %.0f µs | %.0f µs | %s | ≤ 1.00×: %s |\n\n",
		gobench.Median(pick(results[side], true, "50")), gobench.Median(pick(results[base], true, "50")), spread(p50Ratios), gobench.Verdict(gobench.Median(p50Ratios) <= 1.0))
}

func benchOnce(bin string, mesh *benchharness.Mesh, procs []*benchharness.Proc, s setup, c config, duration time.Duration) (run, error) {
	args := []string{"-mode", "pubsub", "-url", s.pubURL, "-sub-url", s.subURL, "-rate", fmt.Sprint(c.rate), "-size", fmt.Sprint(c.size),
		"-duration", duration.String(), "-connections", fmt.Sprint(c.connections), "-subject", "bench.x", "-spin", "50us"}
	if s.direct {
		args = append(args, "-token-file", mesh.TokenFile)
	}
	before, err := benchharness.CPUs(procs...)
	if err != nil {
		return run{}, err
	}
	summary, err := benchharness.Bench(bin, args...)
	if err != nil {
		return run{}, err
	}
	after, err := benchharness.CPUs(procs...)
	if err != nil {
		return run{}, err
	}
	if summary.Received != summary.Sent {
		return run{}, fmt.Errorf("sent %d, received %d", summary.Sent, summary.Received)
	}
	r := run{summary: summary, cpu: map[string]time.Duration{}, rss: map[string]int64{}}
	for i, p := range procs {
		r.cpu[p.Name] = after[i] - before[i]
		rss, err := p.RSS()
		if err != nil {
			return run{}, err
		}
		r.rss[p.Name] = rss
	}
	return r, nil
}

var reported = []string{"50", "99", "99.9", "99.99"}

// pick returns a percentile ("max" for the maximum) of each round.
func pick(runs []run, corrected bool, q string) []float64 {
	out := make([]float64, len(runs))
	for i, r := range runs {
		d := r.summary.Uncorrected
		if corrected {
			d = r.summary.Corrected
		}
		if q == "max" {
			out[i] = float64(d.Max)
		} else {
			out[i] = float64(d.Percentiles[q])
		}
	}
	return out
}

// indexOf returns the index of the setup named name, or -1.
func indexOf(setups []setup, name string) int {
	return slices.IndexFunc(setups, func(s setup) bool { return s.name == name })
}

// spread is a median and the range of per-round values.
func spread(xs []float64) string {
	return fmt.Sprintf("%.2f× [%.2f–%.2f]", gobench.Median(xs), slices.Min(xs), slices.Max(xs))
}

// addedRatios prints the two sidecars' added p50 over each relay's, per
// round, with the verdict of target 2: at most 1.25× two splice relays,
// and two read/write relays at 1 MB, where a parsing proxy must copy.
func addedRatios(c config, setups []setup, results [][]run) {
	side, direct := indexOf(setups, sidecarsSetup), indexOf(setups, "direct")
	fmt.Printf("\nadded p50 of two sidecars over the relays' own, per round (median [range]):\n\n| floor | ratio | target |\n|---|---|---|\n")
	for _, floor := range []string{spliceSetup, rwSetup} {
		f := indexOf(setups, floor)
		if f < 0 {
			continue
		}
		// A round whose relays added almost nothing over direct (less than
		// minFloor, within the machine's noise) has no ratio to speak of.
		const minFloor = 5 // µs
		var ratios []float64
		for k := range results[side] {
			d := float64(results[direct][k].summary.Corrected.Percentiles["50"])
			a := float64(results[side][k].summary.Corrected.Percentiles["50"]) - d
			b := float64(results[f][k].summary.Corrected.Percentiles["50"]) - d
			if b >= minFloor {
				ratios = append(ratios, a/b)
			}
		}
		if len(ratios) == 0 {
			fmt.Printf("| %s | n/a: the relays added under %d µs in every round | |\n", floor, minFloor)
			continue
		}
		judged := floor == spliceSetup
		if c.size >= 1<<19 {
			judged = floor == rwSetup
		}
		verdict := "(not judged here)"
		if judged {
			verdict = "≤ 1.25×: " + gobench.Verdict(gobench.Median(ratios) <= 1.25)
		}
		fmt.Printf("| %s | %s over %d of %d rounds | %s |\n", floor, spread(ratios), len(ratios), len(results[side]), verdict)
	}
}

func report(c config, setups []setup, results [][]run, sidecarName string) {
	fmt.Printf("## %s\n\n", c.name)
	for _, corrected := range []bool{true, false} {
		kind := "corrected (from the intended send time)"
		if !corrected {
			kind = "uncorrected (from the actual send)"
		}
		fmt.Printf("%s, µs, median of %d rounds:\n\n| setup | p50 | p99 | p99.9 | p99.99 | max |\n|---|---|---|---|---|---|\n", kind, len(results[0]))
		for i, s := range setups {
			fmt.Printf("| %s |", s.name)
			for _, q := range append(reported, "max") {
				fmt.Printf(" %.0f |", gobench.Median(pick(results[i], corrected, q)))
			}
			fmt.Println()
		}
		fmt.Println()
	}
	// Added latency: per-round differences against that round's direct
	// run, then the median.
	fmt.Printf("added latency (corrected), µs, median of per-round differences against direct:\n\n| | p50 | p99 | p99.9 | max | p99 ratio |\n|---|---|---|---|---|---|\n")
	for i := 1; i < len(setups); i++ {
		fmt.Printf("| %s |", setups[i].name)
		for _, q := range []string{"50", "99", "99.9", "max"} {
			a, d := pick(results[i], true, q), pick(results[0], true, q)
			diff := make([]float64, len(a))
			for k := range a {
				diff[k] = a[k] - d[k]
			}
			fmt.Printf(" %+.0f |", gobench.Median(diff))
		}
		a, d := pick(results[i], true, "99"), pick(results[0], true, "99")
		ratio := make([]float64, len(a))
		for k := range a {
			ratio[k] = a[k] / max(d[k], 1)
		}
		fmt.Printf(" %.2f× |\n", gobench.Median(ratio))
	}
	addedRatios(c, setups, results)
	// CPU per message from the processes' own accounting, in the
	// two-sidecar runs.
	// medianIn is the median over the rounds of one setup of what each
	// run measured; the setup is one of those run.
	medianIn := func(setupName string, measure func(run) float64) float64 {
		runs := results[indexOf(setups, setupName)]
		xs := make([]float64, len(runs))
		for k, r := range runs {
			xs[k] = measure(r)
		}
		return gobench.Median(xs)
	}
	perMsgIn := func(setupName, name string) float64 {
		return medianIn(setupName, func(r run) float64 {
			return float64(r.cpu[name].Microseconds()) / float64(max(r.summary.Sent, 1))
		})
	}
	perMsg := func(name string) float64 { return perMsgIn(sidecarsSetup, name) }
	b, sa, sb := perMsg("broker"), perMsg("sidecar-a"), perMsg("sidecar-b")
	fmt.Printf("\nCPU per message in the two-sidecar runs (process accounting, 10 ms ticks): broker %.2f µs, publisher's sidecar %.2f µs (%.2f× the broker), subscriber's sidecar %.2f µs (%.2f× the broker)\n",
		b, sa, sa/max(b, 1e-9), sb, sb/max(b, 1e-9))
	// The relays in their own runs, against the broker in those runs: what
	// a process that only forwards the bytes costs, the floor of the
	// sidecars' ratios.
	for _, r := range []struct{ setup, mode string }{{spliceSetup, "splice"}, {rwSetup, "rw"}} {
		if indexOf(setups, r.setup) < 0 {
			continue // no -relay
		}
		rb, pub, sub := perMsgIn(r.setup, "broker"), perMsgIn(r.setup, relayName(r.mode, "pub")), perMsgIn(r.setup, relayName(r.mode, "sub"))
		fmt.Printf("CPU per message in the %s runs: broker %.2f µs, publisher's relay %.2f µs (%.2f× the broker), subscriber's relay %.2f µs (%.2f× the broker)\n",
			r.setup, rb, pub, pub/max(rb, 1e-9), sub, sub/max(rb, 1e-9))
	}
	rssAfter := func(name string) float64 {
		return medianIn(sidecarsSetup, func(r run) float64 { return float64(r.rss[name]) / (1 << 20) })
	}
	fmt.Printf("RSS at the end of the two-sidecar runs (VmRSS, median of the rounds; the sidecars run as %s): publisher's sidecar %.1f MiB, subscriber's sidecar %.1f MiB, broker %.1f MiB\n\n",
		sidecarName, rssAfter("sidecar-a"), rssAfter("sidecar-b"), rssAfter("broker"))
}

// rateSetup is one way to the broker in the sustainable-rate search.
type rateSetup struct {
	name           string
	pubURL, subURL string
	// hops is how many processes stand between the clients and the broker
	// (0 direct, 1 or 2); pubHop names the publisher's one ("" direct).
	hops   int
	pubHop string
}

// rateSetups are the ways to the broker of the sustainable-rate search.
func rateSetups(mesh *benchharness.Mesh, relays map[string][2]string) []rateSetup {
	relay, sidecar := relayName("splice", "pub"), mesh.Sidecars[0].Name
	setups := []rateSetup{{"direct", mesh.BrokerURL, mesh.BrokerURL, 0, ""}}
	if r, ok := relays["splice"]; ok {
		setups = append(setups, rateSetup{"one splice relay", r[0], mesh.BrokerURL, 1, relay})
	}
	setups = append(setups, rateSetup{"one sidecar", mesh.SidecarURLs[0], mesh.BrokerURL, 1, sidecar})
	if len(mesh.Sidecars) > 2 { // -overlap
		setups = append(setups, rateSetup{overlapSetup, mesh.SidecarURLs[2], mesh.BrokerURL, 1, mesh.Sidecars[2].Name})
	}
	if r, ok := relays["splice"]; ok {
		setups = append(setups, rateSetup{"two splice relays", r[0], r[1], 2, relay})
	}
	return append(setups, rateSetup{"two sidecars", mesh.SidecarURLs[0], mesh.SidecarURLs[1], 2, sidecar})
}

// rateArgs are the load generator's arguments for one try of setup s: 1 KB
// at rate for duration.
func rateArgs(mesh *benchharness.Mesh, s rateSetup, rate float64, duration time.Duration) []string {
	return []string{"-mode", "pubsub", "-url", s.pubURL, "-sub-url", s.subURL, "-rate", fmt.Sprint(rate), "-size", "1024",
		"-duration", duration.String(), "-subject", "bench.x", "-spin", "50us", "-token-file", mesh.TokenFile}
}

// sustainableP99 bounds the corrected p99 of a sustainable rate, and
// maxSendLagP99 the generator's own lateness: a try the generator could not
// keep on schedule measures the generator. The lateness bound is a quarter
// of the latency bound, not less: on 2 cores the generator's sender sleeps
// between sends (it must leave the cores to what it measures) and its
// wake-ups come about 1 to 1.6 ms late at p99 at any rate from 60,000/s up,
// directly to the broker as through a relay or a sidecar (measured
// 2026-11-28), so a 1 ms bound failed every setup at the same rate.
// Lateness also counts in the corrected latency, which is measured from the
// intended send time.
const (
	sustainableP99 = 10 * time.Millisecond
	maxSendLagP99  = sustainableP99 / 4
)

// sustainable finds, in rounds, the highest rate of 1 KB messages (stamping
// on) at which, over one try, the corrected p99 stays under sustainableP99
// and the send lag p99 under maxSendLagP99, with nothing lost: directly,
// through one splice relay and one sidecar (the publisher's; the
// subscriber straight to the broker), and through two relays and two
// sidecars (the subscriber's own too, so that delivery is measured). Each
// search doubles from 2,000/s while the rate holds (in later rounds, from
// the last round's result), then bisects to within 2%. The sidecars' rates
// are judged against the relays' of the same round.
func sustainable(bin string, mesh *benchharness.Mesh, relays map[string][2]string, duration time.Duration, rounds int) error {
	setups := rateSetups(mesh, relays)
	fmt.Printf("## Highest sustainable rate, 1 KB, stamping on (corrected p99 < %s, send lag p99 < %s, nothing lost; %s per try, the better of two; within 2%%; %d rounds)\n\n", sustainableP99, maxSendLagP99, duration, rounds)
	rates := map[string][]float64{}
	last := map[string]float64{}
	for round := range rounds {
		for _, s := range setups {
			rate := findRate(bin, mesh, s, duration, last[s.name])
			last[s.name] = rate
			rates[s.name] = append(rates[s.name], rate)
			fmt.Fprintf(os.Stderr, "round %d: %s sustains %.0f/s\n", round+1, s.name, rate)
		}
	}
	fmt.Printf("| setup | sustainable rate, median [range] |\n|---|---|\n")
	for _, s := range setups {
		fmt.Printf("| %s | %.0f/s [%.0f–%.0f] |\n", s.name, gobench.Median(rates[s.name]), slices.Min(rates[s.name]), slices.Max(rates[s.name]))
	}
	ratio := func(a, b string) []float64 {
		out := make([]float64, len(rates[a]))
		for k := range out {
			out[k] = rates[a][k] / max(rates[b][k], 1)
		}
		return out
	}
	// Targets of the 16-core machine, and the fallback on a small one.
	sixteen := runtime.NumCPU() >= 16
	target := func(big, small float64) float64 {
		if sixteen {
			return big
		}
		return small
	}
	fmt.Printf("\n| ratio, per round | median [range] | target (%d CPUs) |\n|---|---|---|\n", runtime.NumCPU())
	fmt.Printf("| one sidecar / direct | %s | |\n", spread(ratio("one sidecar", "direct")))
	if _, ok := relays["splice"]; ok {
		judged := []struct {
			sidecars, relays string
			target           float64
		}{
			{"one sidecar", "one splice relay", target(0.85, 0.65)},
			{"two sidecars", "two splice relays", target(0.70, 0.45)},
		}
		if _, ok := rates[overlapSetup]; ok {
			judged = append(judged, judged[0])
			judged[2].sidecars = overlapSetup
		}
		for _, j := range judged {
			r := ratio(j.sidecars, j.relays)
			fmt.Printf("| %s / %s | %s | ≥ %.2f: %s |\n", j.sidecars, j.relays, spread(r), j.target, gobench.Verdict(gobench.Median(r) >= j.target))
		}
	}
	fmt.Println()
	return nil
}

// findRate is one search for setup s's sustainable rate, from a bracket
// around hint (the last round's result) or from 2,000/s.
func findRate(bin string, mesh *benchharness.Mesh, s rateSetup, duration time.Duration, hint float64) float64 {
	// A rate passes when one of two tries does: these machines have noisy
	// spells of a minute or more that fail any setup at any rate.
	try := func(rate float64) bool {
		summary, err := benchharness.Bench(bin, rateArgs(mesh, s, rate, duration)...)
		good := err == nil && summary.Received == summary.Sent && summary.Corrected.Percentiles["99"] < sustainableP99.Microseconds() && summary.SendLag.Percentiles["99"] < maxSendLagP99.Microseconds()
		if err == nil {
			fmt.Fprintf(os.Stderr, "%s at %.0f/s: p99 %d µs, send lag p99 %d µs, lost %d: sustainable %v\n", s.name, rate,
				summary.Corrected.Percentiles["99"], summary.SendLag.Percentiles["99"], summary.Sent-summary.Received, good)
		}
		return good
	}
	ok := func(rate float64) bool { return try(rate) || try(rate) }
	const ceiling = 2_048_000
	lo, hi := 0.0, 2_000.0
	if hint > 0 {
		lo, hi = hint/1.25, hint*1.25
		if !ok(lo) {
			lo, hi = 0, lo
		}
	}
	// Widen until hi fails (or the ceiling), keeping lo a rate that held.
	for hi <= ceiling && ok(hi) {
		lo, hi = hi, hi*2
	}
	if lo == 0 {
		// hi failed and nothing held yet: halve until a rate holds.
		for lo == 0 && hi > 250 {
			if ok(hi / 2) {
				lo = hi / 2
			} else {
				hi /= 2
			}
		}
		if lo == 0 {
			return 0
		}
	}
	for hi/lo > 1.02 {
		mid := (lo + hi) / 2
		if ok(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}
