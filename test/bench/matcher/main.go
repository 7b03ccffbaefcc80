// Command benchmatcher runs matcher's benchmark suite several times in one
// process per run, and prints the medians side by side: ns/op, allocs/op and
// the ratio to nats-server's gsl for every workload, with the trie's result
// cache on (ctrie, the default) and off (ctrie-nocache), then issue 16's
// targets with their verdicts. `make bench-matcher` runs it.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/weighstation/weighstation/test/bench/gobench"
)

// A result line looks like:
// BenchmarkMatcher/hot/impl=ctrie-nocache-2  123  456.7 ns/op  0 B/op  0 allocs/op
// BenchmarkMatcher/memory/impl=gsl-2  12  34 ns/op  1026 B/sub  ...

func main() {
	count := flag.Int("count", 5, "runs of the suite; the table shows medians")
	benchtime := flag.String("benchtime", "1s", "go test -benchtime per benchmark")
	cpu := flag.String("cpu", "", "go test -cpu: GOMAXPROCS for every benchmark (empty: the machine's CPUs); target 3 is judged at 16")
	workloads := flag.String("workloads", "", "run only these workloads, a regular expression over their names (empty: all)")
	pkg := flag.String("pkg", "./matcher/", "package holding BenchmarkMatcher")
	results := flag.String("results", "", "read the results of an earlier run from this file (go test's or a test binary's output, as from another machine) instead of running go test")
	flag.Parse()

	var out []byte
	if *results != "" {
		var err error
		if out, err = os.ReadFile(*results); err != nil {
			fmt.Fprintf(os.Stderr, "benchmatcher: %v\n", err)
			os.Exit(1)
		}
	} else {
		bench := "^BenchmarkMatcher$"
		if *workloads != "" {
			bench += "/^(" + *workloads + ")$"
		}
		args := []string{"test", "-run", "^$", "-bench", bench, "-benchmem",
			"-count", strconv.Itoa(*count), "-benchtime", *benchtime}
		if *cpu != "" {
			args = append(args, "-cpu", *cpu)
		}
		args = append(args, *pkg)
		fmt.Fprintf(os.Stderr, "running: go %s\n", strings.Join(args, " "))
		cmd := exec.Command("go", args...)
		cmd.Stderr = os.Stderr
		var err error
		if out, err = cmd.Output(); err != nil {
			fmt.Fprintf(os.Stderr, "benchmatcher: go test failed: %v\n%s", err, out)
			os.Exit(1)
		}
	}
	s, procs, err := gobench.ParseRun(out, "BenchmarkMatcher")
	if err != nil {
		fmt.Fprintf(os.Stderr, "benchmatcher: %v\n", err)
		os.Exit(1)
	}
	printTable(s, procs)
	printTargets(s, procs)
}

var workloads = []struct{ name, unit, what string }{
	{"hot", "ns/op", "match, 1,000 subs, 4,096 subjects in turn"},
	{"hit", "ns/op", "match, 1,000 subs, one subject repeated"},
	{"empty", "ns/op", "match on an empty index"},
	{"skewed", "ns/op", "match, Zipf over 10,000 subjects"},
	{"rotate", "ns/op", "match, rotating 37,000 subjects"},
	{"parallel", "ns/op", "RunParallel match on hot"},
	{"churn90", "ns/op", "4 goroutines, 90:10 reads:writes"},
	{"churn50", "ns/op", "4 goroutines, 50:50 reads:writes"},
	{"fanin", "ns/op", "sub+unsub at 30,000 subs on one subject"},
	{"faninsert", "ns/op", "subscribe alone, from 30,000 subs"},
	{"fanchurn", "ns/op", "unsub a random one of 30,000, sub a new one"},
	{"memory", "B/sub", "retained heap per subscription, hot"},
}

func printTable(s gobench.Samples, procs int) {
	fmt.Printf("\nmatcher benchmarks at GOMAXPROCS %d: medians of %d runs; ctrie has its result cache on (the default), ctrie-nocache off;\n",
		procs, s.Runs())
	fmt.Printf("ratios are to gsl (below 1 is better); allocs are per op\n\n")
	fmt.Printf("%-9s %-42s %11s %13s %11s %11s %8s %8s %6s %6s %6s\n", "workload", "what",
		"ctrie", "ctrie-nocache", "gsl", "rwtrie", "ctrie/g", "nocac/g", "allocs", "nc-all", "g-all")
	for _, w := range workloads {
		if !s.Has(w.name, "gsl") {
			continue // not run (-workloads)
		}
		c, n, g, r := s.Median(w.name, "ctrie", w.unit), s.Median(w.name, "ctrie-nocache", w.unit), s.Median(w.name, "gsl", w.unit), s.Median(w.name, "rwtrie", w.unit)
		allocs := func(impl string) string {
			if w.unit != "ns/op" {
				return "-" // the memory benchmark's op is a whole load
			}
			return fmt.Sprintf("%.0f", s.Median(w.name, impl, "allocs/op"))
		}
		fmt.Printf("%-9s %-42s %11s %13s %11s %11s %8.2f %8.2f %6s %6s %6s\n", w.name, w.what,
			format(c, w.unit), format(n, w.unit), format(g, w.unit), format(r, w.unit), c/g, n/g,
			allocs("ctrie"), allocs("ctrie-nocache"), allocs("gsl"))
	}
	if !s.Has("cachememory", "ctrie") {
		return
	}
	fmt.Printf("\ncache memory: a full cache of hot's results retains %.0f B per entry, %.0f KiB in all (16 KiB of it the bucket table every trie allocates at New, counted in memory's ctrie column)\n",
		s.Median("cachememory", "ctrie", "B/entry"), s.Median("cachememory", "ctrie", "KiB/cache"))
}

func format(v float64, unit string) string {
	if unit == "B/sub" {
		return fmt.Sprintf("%.0f B", v)
	}
	return fmt.Sprintf("%.1f ns", v)
}

// printTargets prints each target of issue 16 that this suite judges, with
// its measured value and verdict. A miss is reported, not fatal: the
// machine is noisy, and the README records medians of several invocations.
// Targets 1 and 2 are judged by bench-matcher-nats, inside nats-server;
// target 3 only where the results ran at GOMAXPROCS 16 or more; a target
// whose workload did not run (-workloads) is left out.
func printTargets(s gobench.Samples, procs int) {
	ratio := func(w, impl string) float64 { return s.Median(w, impl, "ns/op") / s.Median(w, "gsl", "ns/op") }
	fanin := s.Median("faninsert", "ctrie", "ns/op")
	targets := []struct {
		name, workload string
		measured       string
		verdict        string
	}{
		{"3. parallel match, cache off, <= 0.2x gsl (judged at -cpu 16 only)", "parallel",
			fmt.Sprintf("%.2fx", ratio("parallel", "ctrie-nocache")), parallelVerdict(ratio("parallel", "ctrie-nocache"), procs)},
		{"4. fan-in insert at 30,000 subscribers <= 2 us", "faninsert",
			fmt.Sprintf("%.0f ns", fanin), gobench.Verdict(fanin <= 2000)},
		{"4. fan-in insert <= 3x gsl", "faninsert",
			fmt.Sprintf("%.2fx", ratio("faninsert", "ctrie")), gobench.Verdict(ratio("faninsert", "ctrie") <= 3)},
		{"5. churn 90:10 throughput >= 3x gsl", "churn90",
			fmt.Sprintf("%.2fx", 1/ratio("churn90", "ctrie")), gobench.Verdict(1/ratio("churn90", "ctrie") >= 3)},
		{"6. memory per subscription <= 1x gsl", "memory",
			fmt.Sprintf("%.2fx", s.Median("memory", "ctrie", "B/sub")/s.Median("memory", "gsl", "B/sub")),
			gobench.Verdict(s.Median("memory", "ctrie", "B/sub") <= s.Median("memory", "gsl", "B/sub"))},
		{"hot match 0 allocs/op", "hot",
			fmt.Sprintf("%.0f", s.Median("hot", "ctrie", "allocs/op")), gobench.Verdict(s.Median("hot", "ctrie", "allocs/op") == 0)},
	}
	fmt.Printf("\ntargets of issue 16 (GOMAXPROCS %d; the cache on unless said)\n\n", procs)
	for _, t := range targets {
		if !s.Has(t.workload, "gsl") {
			continue
		}
		fmt.Printf("  %-68s %10s  %s\n", t.name, t.measured, t.verdict)
	}
}

// parallelVerdict judges target 3, which the issue judges at 16 threads
// only: below that it is reported without a verdict.
func parallelVerdict(ratio float64, procs int) string {
	if procs < 16 {
		return fmt.Sprintf("reported (GOMAXPROCS %d)", procs)
	}
	return gobench.Verdict(ratio <= 0.2)
}
