package gobench

import (
	"slices"
	"testing"
)

func TestParseAndMedian(t *testing.T) {
	out := []byte(`goos: linux
BenchmarkMatcher/hot/impl=ctrie-2         	 5000000	       214.2 ns/op	       0 B/op	       0 allocs/op
BenchmarkMatcher/hot/impl=ctrie-2         	 5000000	       220.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkMatcher/hot/impl=ctrie-2         	 5000000	       210.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkMatcher/memory/impl=gsl-2        	       1	      1026 B/sub
BenchmarkOther/hot/impl=ctrie-2           	 5000000	       999.0 ns/op
PASS
`)
	s := Parse(out, ResultLine("BenchmarkMatcher"))
	if got := s.Median("hot", "ctrie", "ns/op"); got != 214.2 {
		t.Errorf("median ns/op %v, want 214.2 (of 214.2, 220, 210)", got)
	}
	if got := s.Median("memory", "gsl", "B/sub"); got != 1026 {
		t.Errorf("custom metric %v, want 1026", got)
	}
	if n := len(s[Key{"hot", "ctrie"}]["allocs/op"]); n != 3 {
		t.Errorf("%d allocs/op samples, want 3", n)
	}
	if len(s) != 2 {
		t.Errorf("%d sub-benchmarks, want 2 (another benchmark's lines are not read)", len(s))
	}
	if Median(nil) != 0 || Median([]float64{1, 3}) != 2 {
		t.Error("Median of none or of an even count")
	}
}

func TestProcs(t *testing.T) {
	tests := []struct {
		name string
		out  string
		want []int
	}{
		{"two", "BenchmarkMatcher/hot/impl=ctrie-nocache-2   100  1.0 ns/op\n", []int{2}},
		{"sixteen beside two", "BenchmarkMatcher/hot/impl=ctrie-2   100  1.0 ns/op\nBenchmarkMatcher/hot/impl=ctrie-16   100  1.0 ns/op\n", []int{2, 16}},
		{"one has no suffix", "BenchmarkMatcher/hot/impl=ctrie   100  1.0 ns/op\n", []int{1}},
		{"another benchmark", "BenchmarkOther/hot/impl=ctrie-16   100  1.0 ns/op\n", nil},
		{"no results", "PASS\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Procs([]byte(tt.out), "BenchmarkMatcher"); !slices.Equal(got, tt.want) {
				t.Errorf("Procs = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParseRun(t *testing.T) {
	one := "BenchmarkMatcher/hot/impl=gsl-16   100  1.0 ns/op\nBenchmarkMatcher/hot/impl=gsl-16   100  3.0 ns/op\n"
	s, procs, err := ParseRun([]byte(one), "BenchmarkMatcher")
	if err != nil || procs != 16 || s.Runs() != 2 || !s.Has("hot", "gsl") || s.Has("hot", "ctrie") {
		t.Fatalf("ParseRun = %v, %d, %v; Runs %d", s, procs, err, s.Runs())
	}
	for _, bad := range []string{"PASS\n", one + "BenchmarkMatcher/hot/impl=gsl-2   100  1.0 ns/op\n"} {
		if _, _, err := ParseRun([]byte(bad), "BenchmarkMatcher"); err == nil {
			t.Errorf("ParseRun(%q) returned no error", bad)
		}
	}
	if s, procs, err := ParseRun([]byte("BenchmarkMatcher/hot/impl=gsl   100  1.0 ns/op\n"), "BenchmarkMatcher"); err != nil || procs != 1 || !s.Has("hot", "gsl") {
		t.Errorf("a run at GOMAXPROCS 1 (no suffix): %v, %d, %v", s, procs, err)
	}
	if Verdict(true) != "met" || Verdict(false) != "MISSED" {
		t.Error("Verdict")
	}
}
