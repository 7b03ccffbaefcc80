package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// The targets of issue 12 (must-show 3) and issue 31 (must-show 3).
const (
	targetCores      = 0.5
	targetRSSMiB     = 512
	targetWritesRate = 6.0 // per object per minute
	// Issue 31's: a tenth of the 2.7 ms per report of 2026-11-23, and the
	// operator within its GOMEMLIMIT (5,000 sidecars).
	targetCPUPerReportMillis = 0.3
)

// summary is the bench's result, as printed and as bin/bench-reports/
// summary.json holds it.
type summary struct {
	Date  string `json:"date"`
	Cores int    `json:"cores"`
	// OperatorArgs and OperatorEnv are what the bench added to the
	// operator's flags and environment beyond its own (-operator-args,
	// -operator-env).
	OperatorArgs []string `json:"operatorArgs,omitempty"`
	OperatorEnv  []string `json:"operatorEnv,omitempty"`
	Load         struct {
		Sidecars              int     `json:"sidecars"`
		Subscriptions         int     `json:"subscriptions"`
		MovingSubscriptions   int     `json:"movingSubscriptions"`
		Topics                int     `json:"topics"`
		SubscriptionsPerPod   int     `json:"subscriptionsPerSidecar"`
		PodsPerSubscription   int     `json:"podsPerSubscription"`
		ValuesPerHistogram    int     `json:"valuesPerHistogramPerReport"`
		Sampling              string  `json:"sampling"`
		IntervalSeconds       float64 `json:"reportIntervalSeconds"`
		WindowSeconds         float64 `json:"windowSeconds"`
		WriteIntervalSeconds  float64 `json:"writeIntervalSeconds"`
		MovingHalfPeriod      int     `json:"movingHalfPeriodIntervals"`
		ExpectedReportsPerSec float64 `json:"expectedReportsPerSecond"`
	} `json:"load"`
	Setup struct {
		PodsSeconds       float64 `json:"podsSeconds"`
		ConfiguredSeconds float64 `json:"sidecarsConfiguredSeconds"`
	} `json:"setup"`
	WarmupSeconds   float64 `json:"warmupSeconds"`
	MeasuredSeconds float64 `json:"measuredSeconds"`

	ReportsAccepted      float64            `json:"reportsAccepted"`
	ReportsPerSecond     float64            `json:"reportsPerSecond"`
	ReportsRefused       map[string]float64 `json:"reportsRefused,omitempty"`
	ReportsDuplicates    float64            `json:"reportsDuplicates"`
	OperatorCPUSeconds   float64            `json:"operatorCpuSeconds"`
	OperatorCores        float64            `json:"operatorCores"`
	CPUPerReportMillis   float64            `json:"operatorCpuPerReportMillis"`
	PeakRSSMiB           float64            `json:"operatorPeakRssMiB"`
	MaxRSSMeasuredMiB    float64            `json:"operatorMaxRssMeasuredMiB"`
	StoreMiB             float64            `json:"operatorReportsMemoryEstimateMiB"`
	StoreCapMiB          float64            `json:"operatorReportsMemoryCapMiB"`
	LatencyShed          float64            `json:"reportsLatencyShed"` // Subscription reports whose histograms the operator shed at its cap
	ReconcilesPerSecond  float64            `json:"reportStatusReconcilesPerSecond"`
	ApiserverEtcdCores   float64            `json:"apiserverEtcdCores"`
	BenchCores           float64            `json:"benchCores"` // the simulated sidecars and the watch
	MachineBusyCores     float64            `json:"machineBusyCores"`
	Writes               writesResult       `json:"writes"`
	Reasons              []whyCount         `json:"writeReasons,omitempty"`
	OtherStatusWrites    int                `json:"otherStatusWrites"`
	Fleet                fleetStats         `json:"fleet"`
	WatchErrors          []string           `json:"watchErrors,omitempty"`
	ReportingSubsAtStart int                `json:"subscriptionsReportingAtStart"`
	Profile              string             `json:"profile,omitempty"`
	Targets              []target           `json:"targets"`
}

// writesResult is the report writes in the measured period, by class of
// object.
type writesResult struct {
	Moving, Steady, Topics classWrites
}

type classWrites struct {
	Objects int `json:"objects"`
	Writes  int `json:"writes"`
	// Written is how many objects were written at least once.
	Written int `json:"objectsWritten"`
	// PerObjectPerMinute: the mean over the class's objects, and the most
	// of one object (MaxObject).
	MeanPerMinute float64 `json:"meanPerObjectPerMinute"`
	MaxPerMinute  float64 `json:"maxPerObjectPerMinute"`
	MaxObject     string  `json:"maxObject,omitempty"`
}

// countWrites sorts writes into classes and rates over minutes.
func countWrites(writes []statusWrite, w *world, minutes float64) writesResult {
	var r writesResult
	r.Moving.Objects = w.subscriptions() / w.movingEvery
	if w.subscriptions()%w.movingEvery != 0 {
		r.Moving.Objects++
	}
	r.Steady.Objects = w.subscriptions() - r.Moving.Objects
	r.Topics.Objects = w.topics
	per := map[string]int{}
	for _, x := range writes {
		per[x.kind+"/"+x.name]++
	}
	keys := make([]string, 0, len(per))
	for k := range per {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		n := per[key]
		kind, name, _ := strings.Cut(key, "/")
		c := &r.Topics
		if kind == "subscription" {
			c = &r.Steady
			if w.isMoving(name) {
				c = &r.Moving
			}
		}
		c.Writes += n
		c.Written++
		if rate := float64(n) / minutes; rate > c.MaxPerMinute {
			c.MaxPerMinute, c.MaxObject = rate, key
		}
	}
	for _, c := range []*classWrites{&r.Moving, &r.Steady, &r.Topics} {
		if c.Objects > 0 {
			c.MeanPerMinute = float64(c.Writes) / float64(c.Objects) / minutes
		}
	}
	return r
}

// target is one of the targets, measured.
type target struct {
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
}

func targets(s *summary) []target {
	w := s.Writes
	maxRate, maxObj := w.Moving.MaxPerMinute, w.Moving.MaxObject
	for _, c := range []classWrites{w.Steady, w.Topics} {
		if c.MaxPerMinute > maxRate {
			maxRate, maxObj = c.MaxPerMinute, c.MaxObject
		}
	}
	out := []target{
		{Target: fmt.Sprintf("average operator CPU ≤ %.1f core", targetCores),
			Measured: fmt.Sprintf("%.3f cores (%.2f ms per report)", s.OperatorCores, s.CPUPerReportMillis),
			Met:      s.OperatorCores <= targetCores && s.ReportsAccepted > 0},
		{Target: fmt.Sprintf("operator peak RSS ≤ %d MiB", targetRSSMiB),
			Measured: fmt.Sprintf("%.0f MiB (VmHWM, whole run; %.0f MiB at most in the measured period)", s.PeakRSSMiB, s.MaxRSSMeasuredMiB),
			Met:      s.PeakRSSMiB > 0 && s.PeakRSSMiB <= targetRSSMiB},
		{Target: fmt.Sprintf("operator CPU per report ≤ %.1f ms (issue 31)", targetCPUPerReportMillis),
			Measured: fmt.Sprintf("%.2f ms", s.CPUPerReportMillis),
			Met:      s.CPUPerReportMillis <= targetCPUPerReportMillis && s.ReportsAccepted > 0},
		{Target: fmt.Sprintf("≤ %.0f report writes per object per minute", targetWritesRate),
			Measured: fmt.Sprintf("at most %.2f (%s)", maxRate, orNone(maxObj)),
			Met:      maxRate <= targetWritesRate},
		{Target: "0 writes for the steady Subscriptions after the warm-up",
			Measured: fmt.Sprintf("%d writes on %d of %d", w.Steady.Writes, w.Steady.Written, w.Steady.Objects),
			Met:      w.Steady.Writes == 0},
	}
	if limit, ok := goMemLimitMiB(s.OperatorEnv); ok {
		out = append(out, target{Target: fmt.Sprintf("operator peak RSS within its GOMEMLIMIT, %.0f MiB (issue 31)", limit),
			Measured: fmt.Sprintf("%.0f MiB (VmHWM)", s.PeakRSSMiB),
			Met:      s.PeakRSSMiB > 0 && s.PeakRSSMiB <= limit})
	}
	return out
}

// goMemLimitMiB reads the operator's GOMEMLIMIT from its environment, in
// MiB; false when none is set or it does not read.
func goMemLimitMiB(env []string) (float64, bool) {
	for _, kv := range env {
		v, ok := strings.CutPrefix(kv, "GOMEMLIMIT=")
		if !ok {
			continue
		}
		for _, u := range []struct {
			suffix string
			mib    float64
		}{{"GiB", 1024}, {"MiB", 1}, {"KiB", 1.0 / 1024}, {"B", 1.0 / (1 << 20)}, {"", 1.0 / (1 << 20)}} {
			if n, ok := strings.CutSuffix(v, u.suffix); ok {
				if f, err := strconv.ParseFloat(n, 64); err == nil {
					return f * u.mib, true
				}
			}
		}
	}
	return 0, false
}

func orNone(s string) string {
	if s == "" {
		return "no write"
	}
	return s
}

func printSummary(s *summary) {
	l := s.Load
	fmt.Printf("# bench-reports: %d cores; %s\n\n", s.Cores, s.Date)
	if len(s.OperatorArgs)+len(s.OperatorEnv) > 0 {
		fmt.Printf("operator run with extra flags %v, environment %v\n\n", s.OperatorArgs, s.OperatorEnv)
	}
	fmt.Println("## load")
	fmt.Println("| sidecars | Subscriptions (moving) | Topics | Subscriptions per sidecar | pods per Subscription | values per histogram per report | sampling | report interval | window | write interval | reports/s (expected) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	fmt.Printf("| %d | %d (%d) | %d | %d | %d | %d (end-to-end and dwell) | %s | %gs | %gs | %gs | %.1f (%.1f) |\n\n",
		l.Sidecars, l.Subscriptions, l.MovingSubscriptions, l.Topics, l.SubscriptionsPerPod, l.PodsPerSubscription, l.ValuesPerHistogram, l.Sampling,
		l.IntervalSeconds, l.WindowSeconds, l.WriteIntervalSeconds, s.ReportsPerSecond, l.ExpectedReportsPerSec)
	fmt.Printf("setup: %d pods with ServiceAccounts and tokens %.1f s; every sidecar configured %.1f s later; warm-up %.0f s (then %d of %d Subscriptions had an aggregate); measured %.0f s\n\n",
		l.Sidecars, s.Setup.PodsSeconds, s.Setup.ConfiguredSeconds, s.WarmupSeconds, s.ReportingSubsAtStart, l.Subscriptions, s.MeasuredSeconds)
	fmt.Println("## results (the measured period)")
	fmt.Println("| operator CPU per report | operator CPU, average | operator peak RSS | report writes/object/min: moving Subscriptions (mean, max) | steady Subscriptions (writes, objects written) | Topics (writes) |")
	fmt.Println("|---|---|---|---|---|---|")
	w := s.Writes
	fmt.Printf("| %.2f ms | %.3f cores | %.0f MiB | %.2f, %.2f | %d, %d of %d | %d |\n\n",
		s.CPUPerReportMillis, s.OperatorCores, s.PeakRSSMiB, w.Moving.MeanPerMinute, w.Moving.MaxPerMinute, w.Steady.Writes, w.Steady.Written, w.Steady.Objects, w.Topics.Writes)
	fmt.Printf("reports accepted %.0f (%.1f/s), duplicates %.0f, refused %v; reports' memory estimate %.1f MiB of its %.0f MiB cap, Subscription reports whose latency was shed at the cap %.0f; report status reconciles %.1f/s; other status writes %d\n",
		s.ReportsAccepted, s.ReportsPerSecond, s.ReportsDuplicates, s.ReportsRefused, s.StoreMiB, s.StoreCapMiB, s.LatencyShed, s.ReconcilesPerSecond, s.OtherStatusWrites)
	fmt.Printf("beside the operator: apiserver+etcd %.2f cores, the bench (simulated sidecars, watch) %.2f cores, the whole machine %.2f of %d cores busy\n",
		s.ApiserverEtcdCores, s.BenchCores, s.MachineBusyCores, s.Cores)
	f := s.Fleet
	fmt.Printf("sidecars: %d xDS connects, %d configurations applied; reports built %d, sent %d (resent %d), acknowledged %d, pending %d, dropped %v, stream ends %v; %d report streams open at the end\n",
		f.XDSConnects, f.XDSApplied, f.ReportsBuilt, f.ReportsSent, f.ReportsResent, f.ReportsAcked, f.ReportsPending, f.ReportsDropped, f.StreamErrors, f.ReportsConnected)
	if len(s.WatchErrors) > 0 {
		fmt.Printf("watch errors: %v\n", s.WatchErrors)
	}
	if s.Profile != "" {
		fmt.Printf("CPU profile of the operator: %s\n", s.Profile)
	}
	if len(s.Reasons) > 0 {
		fmt.Println("\n## why the operator wrote (its log, the measured period; numbers and pod names elided)")
		fmt.Println("| objects | reason | writes |")
		fmt.Println("|---|---|---|")
		shown := map[string]int{}
		for _, r := range s.Reasons {
			if shown[r.Class]++; shown[r.Class] > 8 {
				continue
			}
			fmt.Printf("| %s | %s | %d |\n", r.Class, r.Why, r.Writes)
		}
	}
	fmt.Println("\n## targets (issue 12, must-show 3)")
	fmt.Println("| target | measured | met |")
	fmt.Println("|---|---|---|")
	for _, t := range s.Targets {
		met := "no"
		if t.Met {
			met = "yes"
		}
		fmt.Printf("| %s | %s | %s |\n", t.Target, t.Measured, met)
	}
	fmt.Println()
}
