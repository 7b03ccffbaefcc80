// Package gobench reads `go test -bench` output of sub-benchmarks named
// <Benchmark>/<workload>/impl=<implementation>, for the tools that print
// tables of medians and ratios from it (bench-matcher, bench-matcher-nats).
package gobench

import (
	"bufio"
	"bytes"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Key is one sub-benchmark: a workload and an implementation.
type Key struct{ Workload, Impl string }

// Samples[key][unit] holds one value per run (-count).
type Samples map[Key]map[string][]float64

// ResultLine matches the result lines of benchmark's sub-benchmarks; its
// groups are the workload, the implementation and the measurements.
func ResultLine(benchmark string) *regexp.Regexp {
	return regexp.MustCompile(`^` + regexp.QuoteMeta(benchmark) + `/([a-z0-9]+)/impl=([a-z-]+)-\d+\s+\d+\s+(.*)$`)
}

// Parse reads every line of out that line matches: each "value unit" pair
// of its measurements (ns/op, allocs/op, custom metrics) is one sample.
func Parse(out []byte, line *regexp.Regexp) Samples {
	s := Samples{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		k := Key{m[1], m[2]}
		if s[k] == nil {
			s[k] = map[string][]float64{}
		}
		fields := strings.Fields(m[3])
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				continue
			}
			s[k][fields[i+1]] = append(s[k][fields[i+1]], v)
		}
	}
	return s
}

// Median is the median of xs (0 for none).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	ys := slices.Clone(xs)
	slices.Sort(ys)
	if len(ys)%2 == 1 {
		return ys[len(ys)/2]
	}
	return (ys[len(ys)/2-1] + ys[len(ys)/2]) / 2
}

// Median is the median of a sub-benchmark's samples in unit.
func (s Samples) Median(workload, impl, unit string) float64 {
	return Median(s[Key{workload, impl}][unit])
}
