package main

import (
	"regexp"

	"github.com/weighstation/weighstation/hack/benchharness"
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
func (m metrics) reconciles() map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if g := reconcileTotal.FindStringSubmatch(k); g != nil {
			out[g[1]] += v
		}
	}
	return out
}

// queueDepth is each controller's work queue depth.
func (m metrics) queueDepth() map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if g := queueDepth.FindStringSubmatch(k); g != nil {
			out[g[1]] += v
		}
	}
	return out
}

// requests sums the operator's requests to the apiserver by method.
func (m metrics) requests() map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if g := restRequests.FindStringSubmatch(k); g != nil {
			out[g[2]] += v
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
