// Command benchoverload is `make bench-overload`: one pod's sidecar under a
// publisher at 10× its quota and a consumer that stopped reading its socket
// (non-essential), beside an essential consumer. It reports the sidecar's
// peak memory against its documented bound, checks that the counters
// balance exactly, and compares the essential consumer's latency under the
// load with its latency unloaded.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weighstation/weighstation/loadgen"
	"github.com/weighstation/weighstation/test/bench/harness"
)

const (
	quota        = 1000 // the publisher's messages per second
	memoryBudget = 16 << 20
	probeRate    = 1000
)

// The pod: a quota on load.>, a non-essential consumer of it and an
// essential consumer of probe.>.
var podConfig = fmt.Sprintf(`
version: overload
default: {subject: ">", maxMessageBytes: 1048576, mayPublish: true, stampHeader: true}
topics:
- {name: load, subject: "load.>", maxMessageBytes: 1048576, mayPublish: true, stampHeader: true, publishRate: {messagesPerSecond: %d, messagesBurst: 100}}
subscriptions:
- {name: optional, subject: "load.>", essential: false, killSwitch: {engaged: false}, limits: {maxPendingMessages: 100000, maxPendingBytes: 67108864, overflow: DropNewest}}
- {name: critical, subject: "probe.>", essential: true, killSwitch: {engaged: false}, limits: {maxPendingMessages: 100000, maxPendingBytes: 33554432, overflow: DropNewest}}
access: {mode: enforce}
`, quota)

func main() {
	bin := flag.String("bin", "bin/weighstation", "the weighstation binary")
	duration := flag.Duration("duration", 30*time.Second, "how long the overload lasts")
	flag.Parse()
	if err := overload(*bin, *duration); err != nil {
		fmt.Fprintln(os.Stderr, "bench-overload:", err)
		os.Exit(1)
	}
}

func overload(bin string, duration time.Duration) error {
	mesh, err := benchharness.StartMesh(benchharness.Binaries{Weighstation: bin}, 1, podConfig, "-memory-budget", strconv.Itoa(memoryBudget))
	if err != nil {
		return err
	}
	defer mesh.Stop()
	side := mesh.Sidecars[0]
	idle, err := side.RSS()
	if err != nil {
		return err
	}
	probe := func() (*loadgen.Summary, error) {
		return benchharness.Bench(bin, "-mode", "pubsub", "-url", mesh.BrokerURL, "-token-file", mesh.TokenFile, "-sub-url", mesh.SidecarURLs[0],
			"-subject", "probe.x", "-rate", strconv.Itoa(probeRate), "-size", "1024", "-duration", duration.String(), "-spin", "50us")
	}
	unloaded, err := probe()
	if err != nil {
		return err
	}

	// The consumer that stops reading: subscribed, then never reads again.
	stalled, err := net.Dial("tcp", strings.TrimPrefix(mesh.SidecarURLs[0], "nats://"))
	if err != nil {
		return err
	}
	defer stalled.Close()
	r := bufio.NewReader(stalled)
	if _, err := fmt.Fprint(stalled, "CONNECT {}\r\nSUB load.x 1\r\nPING\r\n"); err != nil {
		return err
	}
	for line := ""; !strings.HasPrefix(line, "PONG"); {
		if line, err = r.ReadString('\n'); err != nil {
			return fmt.Errorf("the stalled consumer's subscription: %w", err)
		}
	}

	var wg sync.WaitGroup
	var load, loaded *loadgen.Summary
	var loadErr, probeErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		// 10× the quota, through the sidecar; what gets through is received
		// outside the pod, directly from the broker.
		load, loadErr = benchharness.Bench(bin, "-mode", "pubsub", "-url", mesh.SidecarURLs[0], "-sub-url", mesh.BrokerURL, "-token-file", mesh.TokenFile,
			"-subject", "load.x", "-rate", strconv.Itoa(10*quota), "-size", "4096", "-duration", duration.String(), "-timeout", "2s", "-spin", "50us")
	}()
	go func() {
		defer wg.Done()
		loaded, probeErr = probe()
	}()
	wg.Wait()
	if loadErr != nil || probeErr != nil {
		return fmt.Errorf("load: %v; probe: %v", loadErr, probeErr)
	}
	peak, err := side.PeakRSS()
	if err != nil {
		return err
	}
	metrics, err := scrape(mesh.MetricsURLs[0])
	if err != nil {
		return err
	}
	return report(duration, idle, peak, unloaded, loaded, load, metrics)
}

// scrape reads the sidecar's /metrics into name{labels} -> value.
func scrape(url string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	s := bufio.NewScanner(resp.Body)
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, s.Err()
}

func report(duration time.Duration, idle, peak int64, unloaded, loaded, load *loadgen.Summary, m map[string]float64) error {
	fmt.Printf("# bench-overload: %s; publisher at %d/s against a quota of %d/s, a stalled non-essential consumer, an essential consumer at %d/s; %s\n\n",
		duration, 10*quota, quota, probeRate, time.Now().UTC().Format("2006-01-02"))
	var failures []string
	check := func(what string, left, right float64) {
		ok := left == right
		fmt.Printf("| %s | %.0f | %.0f | %v |\n", what, left, right, map[bool]string{true: "holds", false: "BROKEN"}[ok])
		if !ok {
			failures = append(failures, what)
		}
	}
	pub := func(outcome string) float64 {
		return m[fmt.Sprintf(`weighstation_sidecar_publish_total{outcome=%q,topic="load"}`, outcome)]
	}
	sub := func(metric, name string) float64 {
		return m[fmt.Sprintf(`weighstation_sidecar_%s{subscription=%q}`, metric, name)]
	}
	dropped := func(name string) float64 {
		total := 0.0
		for k, v := range m {
			if strings.HasPrefix(k, "weighstation_sidecar_dropped_total{") && strings.Contains(k, fmt.Sprintf("subscription=%q", name)) {
				total += v
			}
		}
		return total
	}
	forwarded := pub("forwarded")
	fmt.Println("Balances (exact):")
	fmt.Println()
	fmt.Println("| balance | left | right | |\n|---|---|---|---|")
	check("publish attempts = forwarded + refused (access, size, rate) + failed upstream", float64(load.Sent), forwarded+pub("refused_access")+pub("refused_size")+pub("refused_rate")+pub("failed_upstream"))
	check("forwarded = received outside the pod", forwarded, float64(load.Received))
	check("forwarded = arrived at the stalled consumer", forwarded, sub("arrived_total", "optional"))
	for _, name := range []string{"optional", "critical"} {
		check(name+": arrived = delivered + dropped + in flight + pending", sub("arrived_total", name),
			sub("delivered_total", name)+dropped(name)+sub("in_flight_messages", name)+sub("pending_messages", name))
	}
	check("critical: delivered = the probe's messages received", sub("delivered_total", "critical"), float64(unloaded.Received+loaded.Received))
	fmt.Println()
	fmt.Printf("The publisher: %d attempts, %.0f forwarded, %.0f refused over quota. The stalled consumer: %.0f arrived, %.0f delivered (into its socket buffers), %.0f shed, %.0f overflow, %.0f pending.\n\n",
		load.Sent, forwarded, pub("refused_rate"), sub("arrived_total", "optional"), sub("delivered_total", "optional"),
		m[`weighstation_sidecar_dropped_total{reason="shed",subscription="optional"}`], m[`weighstation_sidecar_dropped_total{reason="overflow",subscription="optional"}`], sub("pending_messages", "optional"))

	bound := idle + 2*memoryBudget + 16<<20
	fmt.Printf("Sidecar memory: idle RSS %.1f MiB, peak RSS %.1f MiB; documented bound %.1f MiB (idle + 2 × the %d MiB memory budget, for Go's GC at GOGC=100, + 16 MiB of nats.go's upstream buffer): %s\n\n",
		mib(idle), mib(peak), mib(bound), memoryBudget>>20, map[bool]string{true: "within", false: "OVER"}[peak <= bound])
	if peak > bound {
		failures = append(failures, "peak memory over its bound")
	}
	fmt.Println("The essential consumer, corrected latency (µs):")
	fmt.Println()
	fmt.Println("| | p50 | p99 | p99.9 | p99.99 | max | received |\n|---|---|---|---|---|---|---|")
	for _, row := range []struct {
		name string
		s    *loadgen.Summary
	}{{"unloaded", unloaded}, {"under overload", loaded}} {
		d := row.s.Corrected
		fmt.Printf("| %s | %d | %d | %d | %d | %d | %d of %d |\n", row.name, d.Percentiles["50"], d.Percentiles["99"], d.Percentiles["99.9"], d.Percentiles["99.99"], d.Max, row.s.Received, row.s.Sent)
	}
	ratio := float64(loaded.Corrected.Percentiles["99"]) / max(float64(unloaded.Corrected.Percentiles["99"]), 1)
	fmt.Printf("\np99 under overload / unloaded: %.2f× (target ≤ 2×)\n", ratio)
	if len(failures) > 0 {
		return fmt.Errorf("broken: %s", strings.Join(failures, "; "))
	}
	return nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
