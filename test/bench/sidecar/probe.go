package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/weighstation/weighstation/test/bench/harness"
)

// parseRates reads -at: rates per second, separated by commas.
func parseRates(at string) ([]float64, error) {
	var rates []float64
	for _, f := range strings.Split(at, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(r > 0) || math.IsInf(r, 0) {
			return nil, fmt.Errorf("-at %q: %q is not a positive rate", at, f)
		}
		rates = append(rates, r)
	}
	return rates, nil
}

// probe runs the sustainable-rate search's one-hop setups (direct, one
// splice relay, one sidecar) at fixed rates instead of searching, in
// interleaved rounds, and prints for each try the corrected latency, the
// send lag, and the CPU per message of every process and of the whole
// machine: where a rate's cost and its latency come from. probing.loadBin
// is the load generator's binary, so that an older build's generator can
// be compared with the same processes under test.
func probe(probing probeFlags, mesh *benchharness.Mesh, procs []*benchharness.Proc, relays map[string][2]string, duration time.Duration, rounds int) error {
	var setups []rateSetup
	for _, s := range rateSetups(mesh, relays) {
		if s.hops <= 1 {
			setups = append(setups, s)
		}
	}
	stamping := "on"
	if probing.noStamp {
		stamping = "OFF"
	}
	fmt.Printf("## 1 KB at fixed rates, stamping %s (%s per try, %d rounds; load generator %s)\n\n", stamping, duration, rounds, probing.loadBin)
	fmt.Printf("CPU in µs per message sent; \"machine\" is every process on it (/proc/stat).\n\n")
	fmt.Printf("| rate | setup | p50 | p90 | p99 | p99.9 | max | send lag p99 | lost | broker CPU | hop's CPU | generator CPU | machine CPU |\n")
	fmt.Printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	// sample reads every process's CPU and the whole machine's at once.
	sample := func() ([]time.Duration, time.Duration, error) {
		cpus, err := benchharness.CPUs(procs...)
		if err != nil {
			return nil, 0, err
		}
		busy, err := benchharness.MachineBusy()
		return cpus, busy, err
	}
	for range rounds {
		for _, rate := range probing.rates {
			for _, s := range setups {
				before, busyBefore, err := sample()
				if err != nil {
					return err
				}
				summary, err := benchharness.Bench(probing.loadBin, rateArgs(mesh, s, rate, duration)...)
				if err != nil {
					return err
				}
				after, busyAfter, err := sample()
				if err != nil {
					return err
				}
				perMessage := func(d time.Duration) string {
					return fmt.Sprintf("%.2f", float64(d.Nanoseconds())/1e3/float64(max(summary.Sent, 1)))
				}
				cpu := map[string]time.Duration{}
				for i, p := range procs {
					cpu[p.Name] = after[i] - before[i]
				}
				hopCPU := "–"
				if s.pubHop != "" {
					hopCPU = perMessage(cpu[s.pubHop])
				}
				c := summary.Corrected
				fmt.Printf("| %.0f/s | %s | %d | %d | %d | %d | %d | %d | %d | %s | %s | %s | %s |\n", rate, s.name,
					c.Percentiles["50"], c.Percentiles["90"], c.Percentiles["99"], c.Percentiles["99.9"], c.Max, summary.SendLag.Percentiles["99"],
					summary.Sent-summary.Received, perMessage(cpu[mesh.Broker.Name]), hopCPU, perMessage(time.Duration(summary.CPUNanos)), perMessage(busyAfter-busyBefore))
			}
		}
	}
	fmt.Println()
	return nil
}
