package main

import (
	"regexp"
	"slices"
	"strconv"
)

var (
	reconcileTotal = regexp.MustCompile(`^controller_runtime_reconcile_total\{controller="([^"]+)",result="[^"]+"\}$`)
	pushBucket     = regexp.MustCompile(`^weighstation_operator_xds_push_latency_seconds_bucket\{le="([^"]+)"\}$`)
)

// operatorCounts is what the operator counted between two scrapes, per
// change.
func operatorCounts(before, after map[string]float64, changes int) *operatorCounters {
	c := &operatorCounters{Reconciles: map[string]float64{}, PushLatencyBuckets: map[string]float64{}}
	per := func(key string) float64 { return (after[key] - before[key]) / float64(changes) }
	for key := range after {
		if m := reconcileTotal.FindStringSubmatch(key); m != nil {
			c.Reconciles[m[1]] += per(key)
		}
		if m := pushBucket.FindStringSubmatch(key); m != nil {
			le := m[1]
			if f, err := strconv.ParseFloat(le, 64); err == nil {
				le = strconv.FormatFloat(f*1000, 'g', 4, 64)
			}
			c.PushLatencyBuckets[le] = per(key)
		}
	}
	c.Pushes = per("weighstation_operator_xds_pushes_total")
	c.ACKs = per("weighstation_operator_xds_acks_total")
	return c
}

// sortedBuckets orders bucket bounds numerically (+Inf last).
func sortedBuckets(b map[string]float64) []string {
	keys := make([]string, 0, len(b))
	for k := range b {
		keys = append(keys, k)
	}
	num := func(k string) float64 {
		f, err := strconv.ParseFloat(k, 64)
		if err != nil {
			return 1e300
		}
		return f
	}
	slices.SortFunc(keys, func(a, b string) int {
		switch x, y := num(a), num(b); {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	return keys
}
