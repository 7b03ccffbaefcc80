// Package gobench reads `go test -bench` output of sub-benchmarks named
// <Benchmark>/<workload>/impl=<implementation>, for the tools that print
// tables of medians and ratios from it (bench-matcher, bench-matcher-nats).
package gobench

import (
	"bufio"
	"bytes"
	"fmt"
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
	return regexp.MustCompile(`^` + regexp.QuoteMeta(benchmark) + `/([a-z0-9]+)/impl=([a-z-]+)(?:-\d+)?\s+\d+\s+(.*)$`)
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

// Procs returns the distinct GOMAXPROCS values, ascending, among
// benchmark's result lines in out: the -N suffix that go test appends to a
// name when N is not 1 (so [1] when no line has one, and none when there
// is no line). Verdicts that depend on the number of threads read it from
// the results, which may come from another machine; Parse's samples mix
// the values, so a caller wants exactly one.
func Procs(out []byte, benchmark string) []int {
	line := regexp.MustCompile(`^` + regexp.QuoteMeta(benchmark) + `/\S*?(?:-(\d+))?\s+\d+\s`)
	var procs []int
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		n := 1
		if m[1] != "" {
			n, _ = strconv.Atoi(m[1])
		}
		if !slices.Contains(procs, n) {
			procs = append(procs, n)
		}
	}
	slices.Sort(procs)
	return procs
}

// ParseRun parses one run's output of benchmark: its samples and the one
// GOMAXPROCS it ran at (the medians would mix several). It fails when the
// output holds no result, or results at more than one GOMAXPROCS.
func ParseRun(out []byte, benchmark string) (Samples, int, error) {
	s := Parse(out, ResultLine(benchmark))
	if len(s) == 0 {
		return nil, 0, fmt.Errorf("no %s results in the output", benchmark)
	}
	procs := Procs(out, benchmark)
	if len(procs) != 1 {
		return nil, 0, fmt.Errorf("the %s results ran at GOMAXPROCS %v; the medians need one value (-cpu takes one)", benchmark, procs)
	}
	return s, procs[0], nil
}

// Has reports whether s holds results of workload for impl.
func (s Samples) Has(workload, impl string) bool { return len(s[Key{workload, impl}]) > 0 }

// Runs is the number of runs in s: the most ns/op samples of any
// benchmark.
func (s Samples) Runs() int {
	n := 0
	for _, units := range s {
		n = max(n, len(units["ns/op"]))
	}
	return n
}

// Verdict is how the bench commands print a target's outcome.
func Verdict(met bool) string {
	if met {
		return "met"
	}
	return "MISSED"
}
