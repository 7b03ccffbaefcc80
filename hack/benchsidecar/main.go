// Command benchsidecar is `make bench-sidecar`: the open-loop comparison of
// publish-to-delivery through two sidecars (the publisher's and the
// subscriber's) against the broker directly, all as separate processes, for
// the five configurations of "Benchmarking Message Queue Latency", in
// interleaved rounds, with a direct-versus-direct row for the machine's
// noise. It also finds the highest sustainable rate directly and through
// one sidecar. With -out it writes each setup's distributions, merged over
// the rounds, and one plot per configuration with the setups overlaid.
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/hack/benchharness"
	"github.com/weighstation/weighstation/loadgen"
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

// podConfig lets the bench subject through both sidecars, enforced.
const podConfig = `
version: bench
default: {subject: ">", maxMessageBytes: 1048576, mayPublish: true, stampHeader: true}
topics: []
subscriptions:
- {name: bench, subject: "bench.>", essential: true, killSwitch: {engaged: false}, limits: {maxPendingMessages: 100000, maxPendingBytes: 33554432, overflow: DropNewest}}
access: {mode: enforce}
`

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
}

func main() {
	bin := flag.String("bin", "bin/weighstation", "the weighstation binary")
	duration := flag.Duration("duration", 30*time.Second, "each run's length")
	rounds := flag.Int("rounds", 3, "interleaved rounds per configuration")
	only := flag.String("only", "", "run only configurations whose name contains this")
	maxRate := flag.Bool("max-rate", true, "also find the highest sustainable rate, directly and through one sidecar")
	relay := flag.String("relay", "", "the tcprelay binary: adds a row with two do-nothing TCP relays where the sidecars are, the cost of the extra hops alone (none when empty)")
	outDir := flag.String("out", "", "directory for the merged distributions in HdrHistogram's plotter format and one plot per configuration (none when empty)")
	flag.Parse()
	if err := benchmark(*bin, *relay, *duration, *rounds, *only, *maxRate, *outDir); err != nil {
		fmt.Fprintln(os.Stderr, "bench-sidecar:", err)
		os.Exit(1)
	}
}

func benchmark(bin, relay string, duration time.Duration, rounds int, only string, maxRate bool, outDir string) error {
	mesh, err := benchharness.StartMesh(bin, 2, podConfig)
	if err != nil {
		return err
	}
	defer mesh.Stop()
	procs := append([]*benchharness.Proc{mesh.Broker}, mesh.Sidecars...)
	setups := []setup{
		{"direct", mesh.BrokerURL, mesh.BrokerURL, true},
		{"two sidecars", mesh.SidecarURLs[0], mesh.SidecarURLs[1], false},
		{"direct again (noise)", mesh.BrokerURL, mesh.BrokerURL, true},
	}
	if relay != "" {
		var urls []string
		for _, name := range []string{"relay-pub", "relay-sub"} {
			addr, err := benchharness.FreeAddr()
			if err != nil {
				return err
			}
			p, err := benchharness.Start(name, relay, "-listen", addr, "-target", strings.TrimPrefix(mesh.BrokerURL, "nats://"))
			if err != nil {
				return err
			}
			defer p.Stop()
			if err := benchharness.WaitNATS("nats://"+addr, nats.Token("bench-token")); err != nil {
				return err
			}
			urls = append(urls, "nats://"+addr)
		}
		setups = append(setups, setup{"two TCP relays (the hops alone)", urls[0], urls[1], true})
	}
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
		report(c, setups, results)
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
		return sustainable(bin, mesh, duration)
	}
	return nil
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
	r := run{summary: summary, cpu: map[string]time.Duration{}}
	for i, p := range procs {
		r.cpu[p.Name] = after[i] - before[i]
	}
	return r, nil
}

var reported = []string{"50", "99", "99.9", "99.99"}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

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

func report(c config, setups []setup, results [][]run) {
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
				fmt.Printf(" %.0f |", median(pick(results[i], corrected, q)))
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
			fmt.Printf(" %+.0f |", median(diff))
		}
		a, d := pick(results[i], true, "99"), pick(results[0], true, "99")
		ratio := make([]float64, len(a))
		for k := range a {
			ratio[k] = a[k] / max(d[k], 1)
		}
		fmt.Printf(" %.2f× |\n", median(ratio))
	}
	// CPU per message from the processes' own accounting, in the
	// two-sidecar runs.
	perMsg := func(name string) float64 {
		xs := make([]float64, len(results[1]))
		for k, r := range results[1] {
			xs[k] = float64(r.cpu[name].Microseconds()) / float64(max(r.summary.Sent, 1))
		}
		return median(xs)
	}
	b, sa, sb := perMsg("broker"), perMsg("sidecar-a"), perMsg("sidecar-b")
	fmt.Printf("\nCPU per message in the two-sidecar runs (process accounting, 10 ms ticks): broker %.2f µs, publisher's sidecar %.2f µs (%.2f× the broker), subscriber's sidecar %.2f µs (%.2f× the broker)\n\n",
		b, sa, sa/max(b, 1e-9), sb, sb/max(b, 1e-9))
}

// sustainable finds the highest rate of 1 KB messages at which, over one
// run, the corrected p99 stays under 10 ms and the send lag p99 under 1 ms,
// with nothing lost: directly, and through one sidecar (the publisher's).
func sustainable(bin string, mesh *benchharness.Mesh, duration time.Duration) error {
	fmt.Printf("## Highest sustainable rate, 1 KB (corrected p99 < 10 ms, send lag p99 < 1 ms, nothing lost; %s per try, the better of two)\n\n", duration)
	rates := map[string]float64{}
	for _, s := range []setup{{"direct", mesh.BrokerURL, mesh.BrokerURL, true}, {"one sidecar", mesh.SidecarURLs[0], mesh.BrokerURL, false}} {
		// A rate passes when one of two tries does: these machines have
		// noisy spells of a minute or more that fail any setup at any rate.
		try := func(rate float64) bool {
			args := []string{"-mode", "pubsub", "-url", s.pubURL, "-sub-url", s.subURL, "-rate", fmt.Sprint(rate), "-size", "1024",
				"-duration", duration.String(), "-subject", "bench.x", "-spin", "50us", "-token-file", mesh.TokenFile}
			summary, err := benchharness.Bench(bin, args...)
			good := err == nil && summary.Received == summary.Sent && summary.Corrected.Percentiles["99"] < 10_000 && summary.SendLag.Percentiles["99"] < 1_000
			if err == nil {
				fmt.Fprintf(os.Stderr, "%s at %.0f/s: p99 %d µs, send lag p99 %d µs, lost %d: sustainable %v\n", s.name, rate,
					summary.Corrected.Percentiles["99"], summary.SendLag.Percentiles["99"], summary.Sent-summary.Received, good)
			}
			return good
		}
		ok := func(rate float64) bool { return try(rate) || try(rate) }
		// Double from 2,000/s while sustainable, then bisect the bracket
		// three times (to within 1/8 of it).
		lo, hi := 0.0, 2_000.0
		for hi <= 1_024_000 && ok(hi) {
			lo, hi = hi, hi*2
		}
		if lo == 0 {
			fmt.Printf("%s: not sustainable even at 2,000/s\n", s.name)
		}
		for range 3 {
			mid := (lo + hi) / 2
			if ok(mid) {
				lo = mid
			} else {
				hi = mid
			}
		}
		rates[s.name] = lo
	}
	fmt.Printf("| setup | sustainable rate |\n|---|---|\n| direct | %.0f/s |\n| one sidecar | %.0f/s (%.0f%% of direct) |\n\n",
		rates["direct"], rates["one sidecar"], 100*rates["one sidecar"]/max(rates["direct"], 1))
	return nil
}
