// Command benchmatchernats compares the matcher with nats-server's own
// Sublist, with and without its result cache, and with gsl, on nats-server's
// benchmark corpus, inside nats-server's server package: the Sublist's
// Insert takes the unexported *subscription, so no other package can drive
// it. `make bench-matcher-nats` runs it.
//
// It copies the nats-server module version that go.mod names out of the
// module cache into a scratch directory outside the repository, makes the
// copy writable, adds weighstation_matcher_bench_test.go.txt (kept here,
// named so that weighstation's own `go test ./...` never compiles it) to the
// server package, requires this module through a replace of the working
// tree, and runs the benchmark count times in one process; then it prints
// medians, the ratios, and issue 16's targets 1 and 2 with their verdicts.
// Nothing is vendored: the copy is rebuilt on every run.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/weighstation/weighstation/test/bench/gobench"
)

const (
	natsModule = "github.com/nats-io/nats-server/v2"
	ourModule  = "github.com/weighstation/weighstation"
	template   = "weighstation_matcher_bench_test.go.txt"
	benchFile  = "weighstation_matcher_bench_test.go"
)

func main() {
	count := flag.Int("count", 5, "runs of the benchmark; the table shows medians")
	benchtime := flag.String("benchtime", "1s", "go test -benchtime per benchmark")
	scratch := flag.String("dir", "", "scratch directory for the copy of nats-server (default: the user cache directory's weighstation/bench-matcher-nats)")
	compile := flag.String("c", "", "compile the copy's server package test binary to this file instead of running it (to run on another machine: binary -test.run '^$' -test.bench '^BenchmarkWeighstationMatcher$' -test.benchmem -test.count 5)")
	results := flag.String("results", "", "read the results of an earlier run from this file (as from a binary built with -c) instead of building and running")
	flag.Parse()
	var err error
	if *results != "" {
		err = report(*results)
	} else {
		err = run(*count, *benchtime, *scratch, *compile)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "benchmatchernats: %v\n", err)
		os.Exit(1)
	}
}

// report prints the tables and verdicts of a run saved in path.
func report(path string) error {
	out, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return printResults(out, "(version of the saved run)")
}

func run(count int, benchtime, scratch, compile string) error {
	root, err := goOutput("", "list", "-m", "-f", "{{.Dir}}")
	if err != nil {
		return fmt.Errorf("finding the working tree: %w", err)
	}
	version, err := goOutput(root, "list", "-m", "-f", "{{.Version}}", natsModule)
	if err != nil {
		return fmt.Errorf("reading %s's version from go.mod: %w", natsModule, err)
	}
	src, err := moduleDir(root, natsModule+"@"+version)
	if err != nil {
		return err
	}
	if scratch == "" {
		// A fixed place, so that Go's build cache recognises the copy
		// from one run to the next (the server package takes a minute
		// to compile on 2 cores).
		cache, err := os.UserCacheDir()
		if err != nil {
			return fmt.Errorf("finding a scratch directory: %w", err)
		}
		scratch = filepath.Join(cache, "weighstation", "bench-matcher-nats")
	}
	dst := filepath.Join(scratch, "nats-server@"+version)
	fmt.Fprintf(os.Stderr, "copying %s to %s\n", src, dst)
	if err := copyModule(src, dst); err != nil {
		return err
	}
	bench, err := os.ReadFile(filepath.Join(root, "test", "bench", "matchernats", template))
	if err != nil {
		return fmt.Errorf("reading the benchmark template: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dst, "server", benchFile), bench, 0o644); err != nil {
		return fmt.Errorf("adding the benchmark to the copy: %w", err)
	}
	// Require this module from the working tree. The copy then selects
	// the newer of its and our requirements (nats.go, for one), as any
	// program embedding both would; tidy records the sums.
	if _, err := goOutput(dst, "mod", "edit", "-require="+ourModule+"@v0.0.0", "-replace="+ourModule+"="+root); err != nil {
		return fmt.Errorf("requiring %s in the copy: %w", ourModule, err)
	}
	if _, err := goOutput(dst, "mod", "tidy"); err != nil {
		return fmt.Errorf("go mod tidy in the copy: %w", err)
	}
	if compile != "" {
		abs, err := filepath.Abs(compile)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "compiling the copy's server package tests to %s\n", abs)
		if _, err := goOutput(dst, "test", "-c", "-trimpath", "-ldflags=-s -w", "-o", abs, "./server/"); err != nil {
			return fmt.Errorf("go test -c in the copy: %w", err)
		}
		return nil
	}
	args := []string{"test", "-run", "^$", "-bench", "^BenchmarkWeighstationMatcher$", "-benchmem",
		"-count", strconv.Itoa(count), "-benchtime", benchtime, "./server/"}
	fmt.Fprintf(os.Stderr, "running in %s: go %s\n", dst, strings.Join(args, " "))
	cmd := exec.Command("go", args...)
	cmd.Dir = dst
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go test in the copy: %w\n%s", err, out)
	}
	return printResults(out, version)
}

// printResults prints the tables and verdicts of the benchmark's output.
func printResults(out []byte, version string) error {
	s, procs, err := gobench.ParseRun(out, "BenchmarkWeighstationMatcher")
	if err != nil {
		return err
	}
	fmt.Printf("\nmatcher vs nats-server %s's Sublist and gsl, inside its server package, on its benchmark corpus, GOMAXPROCS %d\n", version, procs)
	printTable(s, s.Runs())
	printTargets(s)
	return nil
}

// goOutput runs go with args in dir and returns its trimmed standard output.
func goOutput(dir string, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// moduleDir asks the go command where the module cache holds mod
// (downloading it through the module proxy if it is not there).
func moduleDir(root, mod string) (string, error) {
	out, err := goOutput(root, "mod", "download", "-json", mod)
	if err != nil {
		return "", fmt.Errorf("locating %s: %w", mod, err)
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		return "", fmt.Errorf("reading go mod download's answer for %s: %w", mod, err)
	}
	if info.Error != "" || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s", mod, info.Error)
	}
	return info.Dir, nil
}

// copyModule replaces dst with a writable copy of src (the module cache's
// files are read-only).
func copyModule(src, dst string) error {
	if err := os.RemoveAll(dst); err != nil {
		return fmt.Errorf("removing the previous copy: %w", err)
	}
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil // the module cache holds no links; skip anything odd
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	return nil
}

// A result line looks like:
// BenchmarkWeighstationMatcher/hot/impl=sublist-cache-2  8327205  28.64 ns/op  0 B/op  0 allocs/op

var workloads = []struct{ name, what string }{
	{"hot", "one subject repeated"},
	{"rotate", "all 37,448 subjects in turn"},
	{"parallel", "RunParallel, one subject"},
	{"parallelrotate", "RunParallel, all subjects in turn"},
}

var impls = []string{"sublist-cache", "sublist-nocache", "gsl", "ctrie", "ctrie-nocache"}

func printTable(s gobench.Samples, count int) {
	fmt.Printf("(37,448 literal subjects of 1 to 5 tokens over 8 words, plus 3 wildcard subscriptions; every implementation\n")
	fmt.Printf("iterates its result; medians of %d runs; ctrie has its cache on, ctrie-nocache off; both caches hold 1,024 results)\n\n", count)
	fmt.Printf("%-15s %-34s", "workload", "what")
	for _, impl := range impls {
		fmt.Printf(" %15s", impl)
	}
	fmt.Printf(" %10s %9s %9s %7s\n", "ctrie/sl-c", "ctrie/gsl", "nocac/gsl", "allocs")
	for _, w := range workloads {
		if !s.Has(w.name, "gsl") {
			continue // not in this run (-test.bench chose others)
		}
		fmt.Printf("%-15s %-34s", w.name, w.what)
		for _, impl := range impls {
			fmt.Printf(" %12.1f ns", s.Median(w.name, impl, "ns/op"))
		}
		c := s.Median(w.name, "ctrie", "ns/op")
		fmt.Printf(" %10.2f %9.2f %9.2f %7.0f\n", c/s.Median(w.name, "sublist-cache", "ns/op"),
			c/s.Median(w.name, "gsl", "ns/op"), s.Median(w.name, "ctrie-nocache", "ns/op")/s.Median(w.name, "gsl", "ns/op"),
			s.Median(w.name, "ctrie", "allocs/op"))
	}
}

// printTargets prints issue 16's targets 1 and 2, which only this
// comparison can judge. A miss is reported, not fatal: the machine is
// noisy, and the README records what was measured.
func printTargets(s gobench.Samples) {
	hot := s.Median("hot", "ctrie", "ns/op") / s.Median("hot", "sublist-cache", "ns/op")
	allocs := s.Median("hot", "ctrie", "allocs/op")
	rotate := s.Median("rotate", "ctrie", "ns/op") / s.Median("rotate", "gsl", "ns/op")
	fmt.Printf("\ntargets of issue 16 judged here (the cache on)\n\n")
	fmt.Printf("  %-62s %8.2fx  %s\n", "1. hot hits <= 1.0x the cached Sublist", hot, gobench.Verdict(hot <= 1.0))
	fmt.Printf("  %-62s %9.0f  %s\n", "1. hot hits 0 allocs/op", allocs, gobench.Verdict(allocs == 0))
	fmt.Printf("  %-62s %8.2fx  %s\n", "2. rotation over the whole corpus <= 0.8x gsl", rotate, gobench.Verdict(rotate <= 0.8))
}
