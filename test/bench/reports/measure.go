package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/weighstation/weighstation/test/bench/harness"
)

// The operator's report metrics (controllers/reports/metrics.go).
const (
	metricAccepted   = "weighstation_operator_reports_accepted_total"
	metricDuplicates = "weighstation_operator_reports_duplicates_total"
	metricRefused    = "weighstation_operator_reports_refused_total"
	metricBytes      = "weighstation_operator_reports_memory_bytes"
	metricCap        = "weighstation_operator_reports_memory_cap_bytes"
	metricShed       = "weighstation_operator_reports_latency_shed_total"
	// The report status writer's reconciles (controllers/reportstatus,
	// named "reports"), by result.
	metricReconciles = `controller_runtime_reconcile_total{controller="reports",`
)

// reconciles is the report status writer's reconciles so far.
func reconciles(m map[string]float64) float64 {
	var n float64
	for k, v := range m {
		if strings.HasPrefix(k, metricReconciles) {
			n += v
		}
	}
	return n
}

// sample is the processes' CPU time and the operator's metrics at one
// instant.
type sample struct {
	at                     time.Time
	operator, bench, other time.Duration // other: kube-apiserver and etcd
	machine                time.Duration
	metrics                map[string]float64
}

func takeSample(op *benchharness.Operator) (sample, error) {
	s := sample{at: time.Now()}
	var err error
	if s.operator, err = op.CPU(); err != nil {
		return s, err
	}
	if s.bench, err = benchharness.ProcessCPU(os.Getpid()); err != nil {
		return s, err
	}
	for _, pid := range benchharness.ChildrenNamed("kube-apiserver", "etcd") {
		if d, err := benchharness.ProcessCPU(pid); err == nil {
			s.other += d
		}
	}
	if s.machine, err = benchharness.MachineBusy(); err != nil {
		return s, err
	}
	s.metrics, err = benchharness.Scrape(op.MetricsURL)
	return s, err
}

// refused is the refused reports by reason, between two samples.
func refused(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if reason, ok := strings.CutPrefix(k, metricRefused+`{reason="`); ok {
			if d := v - before[k]; d != 0 {
				out[strings.TrimSuffix(reason, `"}`)] = d
			}
		}
	}
	return out
}

// fill sets the summary's CPU and report figures from the measured
// period's two samples.
func (s *summary) fill(before, after sample) {
	wall := after.at.Sub(before.at).Seconds()
	s.MeasuredSeconds = wall
	s.ReportsAccepted = after.metrics[metricAccepted] - before.metrics[metricAccepted]
	s.ReportsPerSecond = s.ReportsAccepted / wall
	s.ReportsDuplicates = after.metrics[metricDuplicates] - before.metrics[metricDuplicates]
	s.ReportsRefused = refused(before.metrics, after.metrics)
	s.StoreMiB = after.metrics[metricBytes] / (1 << 20)
	s.StoreCapMiB = after.metrics[metricCap] / (1 << 20)
	s.LatencyShed = after.metrics[metricShed] - before.metrics[metricShed]
	s.ReconcilesPerSecond = (reconciles(after.metrics) - reconciles(before.metrics)) / wall
	s.OperatorCPUSeconds = (after.operator - before.operator).Seconds()
	s.OperatorCores = s.OperatorCPUSeconds / wall
	if s.ReportsAccepted > 0 {
		s.CPUPerReportMillis = s.OperatorCPUSeconds * 1000 / s.ReportsAccepted
	}
	s.ApiserverEtcdCores = (after.other - before.other).Seconds() / wall
	s.BenchCores = (after.bench - before.bench).Seconds() / wall
	s.MachineBusyCores = (after.machine - before.machine).Seconds() / wall
}

func rateLine(prev, cur sample) string {
	d := cur.at.Sub(prev.at).Seconds()
	return fmt.Sprintf("%.1f reports/s accepted, operator %.2f cores",
		(cur.metrics[metricAccepted]-prev.metrics[metricAccepted])/d, (cur.operator-prev.operator).Seconds()/d)
}
