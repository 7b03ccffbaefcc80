// Command benchmatcher runs matcher's benchmark suite several times in one
// process per run, and prints the medians side by side: ns/op, allocs/op and
// the ratio to nats-server's gsl for every workload, then the issue's
// targets with their verdicts. `make bench-matcher` runs it.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// A result line looks like:
// BenchmarkMatcher/hot/impl=ctrie-2  123  456.7 ns/op  0 B/op  0 allocs/op
// BenchmarkMatcher/memory/impl=gsl-2  12  34 ns/op  1026 B/sub  ...
var resultLine = regexp.MustCompile(`^BenchmarkMatcher/([a-z0-9]+)/impl=([a-z]+)-\d+\s+\d+\s+(.*)$`)

type key struct{ workload, impl string }

// samples[key][unit] holds one value per run.
type samples map[key]map[string][]float64

func main() {
	count := flag.Int("count", 5, "runs of the suite; the table shows medians")
	benchtime := flag.String("benchtime", "1s", "go test -benchtime per benchmark")
	pkg := flag.String("pkg", "./matcher/", "package holding BenchmarkMatcher")
	flag.Parse()

	args := []string{"test", "-run", "^$", "-bench", "^BenchmarkMatcher$", "-benchmem",
		"-count", strconv.Itoa(*count), "-benchtime", *benchtime, *pkg}
	fmt.Fprintf(os.Stderr, "running: go %s\n", strings.Join(args, " "))
	cmd := exec.Command("go", args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "benchmatcher: go test failed: %v\n%s", err, out)
		os.Exit(1)
	}
	s := parse(out)
	printTable(s, *count)
	printTargets(s)
}

func parse(out []byte) samples {
	s := samples{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := resultLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		k := key{m[1], m[2]}
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

func median(xs []float64) float64 {
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

func (s samples) median(workload, impl, unit string) float64 {
	return median(s[key{workload, impl}][unit])
}

var workloads = []struct{ name, unit, what string }{
	{"hot", "ns/op", "match, 1,000 subs (13 words, 5 tokens)"},
	{"empty", "ns/op", "match on an empty index"},
	{"skewed", "ns/op", "match, Zipf over 10,000 subjects"},
	{"rotate", "ns/op", "match, rotating 37,000 subjects"},
	{"parallel", "ns/op", "RunParallel match on hot"},
	{"churn90", "ns/op", "4 goroutines, 90:10 reads:writes"},
	{"churn50", "ns/op", "4 goroutines, 50:50 reads:writes"},
	{"fanin", "ns/op", "sub+unsub at 30,000 subs on one subject"},
	{"faninsert", "ns/op", "subscribe alone, from 30,000 subs on one subject"},
	{"memory", "B/sub", "retained heap per subscription, hot"},
}

var impls = []string{"ctrie", "gsl", "rwtrie"}

func printTable(s samples, count int) {
	fmt.Printf("\nmatcher benchmarks: medians of %d runs (ratio = ctrie / gsl; below 1 is better)\n\n", count)
	fmt.Printf("%-9s %-42s %12s %12s %12s %9s %11s %11s\n", "workload", "what", "ctrie", "gsl", "rwtrie", "ratio", "ctrie alloc", "gsl alloc")
	for _, w := range workloads {
		c, g, r := s.median(w.name, "ctrie", w.unit), s.median(w.name, "gsl", w.unit), s.median(w.name, "rwtrie", w.unit)
		fmt.Printf("%-9s %-42s %12s %12s %12s %9.2f %11.0f %11.0f\n", w.name, w.what,
			format(c, w.unit), format(g, w.unit), format(r, w.unit), c/g,
			s.median(w.name, "ctrie", "allocs/op"), s.median(w.name, "gsl", "allocs/op"))
	}
}

func format(v float64, unit string) string {
	if unit == "B/sub" {
		return fmt.Sprintf("%.0f B", v)
	}
	return fmt.Sprintf("%.1f ns", v)
}

// printTargets prints each target of issue 2 with its measured value and
// verdict. A miss is reported, not fatal: the machine is noisy, and the
// README records medians of several invocations.
func printTargets(s samples) {
	ratio := func(w string) float64 { return s.median(w, "ctrie", "ns/op") / s.median(w, "gsl", "ns/op") }
	targets := []struct {
		name     string
		measured string
		met      bool
	}{
		{"hot match <= 1.0x gsl ns/op (goal 0.5x)", fmt.Sprintf("%.2fx", ratio("hot")), ratio("hot") <= 1.0},
		{"hot match 0 allocs/op", fmt.Sprintf("%.0f", s.median("hot", "ctrie", "allocs/op")), s.median("hot", "ctrie", "allocs/op") == 0},
		{"parallel match <= 0.7x gsl ns/op", fmt.Sprintf("%.2fx", ratio("parallel")), ratio("parallel") <= 0.7},
		{"churn 90:10 throughput >= 3x gsl", fmt.Sprintf("%.2fx", 1/ratio("churn90")), 1/ratio("churn90") >= 3},
		{"fan-in insert <= 2 us", fmt.Sprintf("%.0f ns", s.median("faninsert", "ctrie", "ns/op")), s.median("faninsert", "ctrie", "ns/op") <= 2000},
		{"memory per subscription <= 2x gsl", fmt.Sprintf("%.2fx", s.median("memory", "ctrie", "B/sub")/s.median("memory", "gsl", "B/sub")), s.median("memory", "ctrie", "B/sub") <= 2*s.median("memory", "gsl", "B/sub")},
	}
	fmt.Printf("\ntargets (2 cores, cache off)\n\n")
	for _, t := range targets {
		verdict := "met"
		if !t.met {
			verdict = "MISSED"
		}
		fmt.Printf("  %-55s %10s  %s\n", t.name, t.measured, verdict)
	}
}
