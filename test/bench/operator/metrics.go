package main

import (
	"fmt"
	"regexp"

	"github.com/weighstation/weighstation/test/bench/harness"
)

// metrics is one scrape of a Prometheus text endpoint: "name{labels}" -> value.
type metrics map[string]float64

func scrape(url string) (metrics, error) {
	m, err := benchharness.Scrape(url)
	return metrics(m), err
}

var (
	reconcileTotal = regexp.MustCompile(`^controller_runtime_reconcile_total\{controller="([^"]+)",result="[^"]+"\}$`)
	queueDepth     = regexp.MustCompile(`^workqueue_depth\{.*\bname="([^"]+)".*\}$`)
	restRequests   = regexp.MustCompile(`^rest_client_requests_total\{code="([^"]+)",host="[^"]*",method="([^"]+)"\}$`)
)

// reconciles sums controller_runtime_reconcile_total by controller.
func (m metrics) reconciles() map[string]float64 { return m.sumBy(reconcileTotal, 1) }

// queueDepth is each controller's work queue depth.
func (m metrics) queueDepth() map[string]float64 { return m.sumBy(queueDepth, 1) }

// requests sums the operator's requests to the apiserver by method.
func (m metrics) requests() map[string]float64 { return m.sumBy(restRequests, 2) }

// sumBy sums the series that re matches by its submatch group.
func (m metrics) sumBy(re *regexp.Regexp, group int) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if g := re.FindStringSubmatch(k); g != nil {
			out[g[group]] += v
		}
	}
	return out
}

func diff(after, before map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func total(m map[string]float64) float64 {
	var t float64
	for _, v := range m {
		t += v
	}
	return t
}

// goRuntime is what the operator's Go runtime holds (its /metrics).
type goRuntime struct {
	Goroutines    float64 `json:"goroutines"`
	HeapInuseMiB  float64 `json:"heapInuseMiB"`
	StackInuseMiB float64 `json:"stackInuseMiB"`
	SysMiB        float64 `json:"sysMiB"`
	StreamsXDS    float64 `json:"xdsStreams"`
}

func (m metrics) runtime() *goRuntime {
	return &goRuntime{Goroutines: m["go_goroutines"], HeapInuseMiB: m["go_memstats_heap_inuse_bytes"] / (1 << 20),
		StackInuseMiB: m["go_memstats_stack_inuse_bytes"] / (1 << 20), SysMiB: m["go_memstats_sys_bytes"] / (1 << 20),
		StreamsXDS: m["weighstation_operator_xds_streams"]}
}

func (g *goRuntime) String() string {
	if g == nil {
		return "not read"
	}
	return fmt.Sprintf("%.0f xDS streams, %.0f goroutines, heap in use %.0f MiB, stacks %.0f MiB, from the OS %.0f MiB", g.StreamsXDS, g.Goroutines, g.HeapInuseMiB, g.StackInuseMiB, g.SysMiB)
}
