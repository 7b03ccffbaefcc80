package main

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/weighstation/weighstation/loadgen"
	"github.com/weighstation/weighstation/loadgen/latencyplot/plottest"
)

// fakeRun is a run whose corrected latencies are every value from lo to hi
// microseconds once, and whose uncorrected ones are half as much.
func fakeRun(lo, hi int64) run {
	corrected, uncorrected := hdrhistogram.New(1, 3_600_000_000, 3), hdrhistogram.New(1, 3_600_000_000, 3)
	for v := lo; v <= hi; v++ {
		_ = corrected.RecordValue(v)
		_ = uncorrected.RecordValue(v / 2)
	}
	return run{summary: &loadgen.Summary{
		Corrected:   loadgen.Distribution{Count: corrected.TotalCount(), Histogram: corrected.Export()},
		Uncorrected: loadgen.Distribution{Count: uncorrected.TotalCount(), Histogram: uncorrected.Export()},
	}}
}

func TestMergeRounds(t *testing.T) {
	runs := []run{fakeRun(100, 199), fakeRun(1000, 1999)}
	for _, tc := range []struct {
		corrected bool
		wantMax   int64
	}{{true, 1999}, {false, 999}} {
		h := mergeRounds(runs, tc.corrected)
		if h.TotalCount() != 1100 || !h.ValuesAreEquivalent(h.Max(), tc.wantMax) {
			t.Errorf("corrected %v: %d samples up to %d, want 1100 up to %d", tc.corrected, h.TotalCount(), h.Max(), tc.wantMax)
		}
	}
}

// TestWritePlot: one plot per configuration, next to the .hgrm files, with
// every setup's corrected distribution, merged over the rounds, as one
// named line.
func TestWritePlot(t *testing.T) {
	direct := setup{name: "direct"}
	sidecars := setup{name: "two sidecars"}
	noise := setup{name: "direct again (noise)"}
	relays := setup{name: "two TCP relays (the hops alone)"}
	rounds := func(lo, hi int64) []run { return []run{fakeRun(lo, hi), fakeRun(lo+10, hi+10)} }
	for _, tc := range []struct {
		name    string
		setups  []setup
		results [][]run
	}{
		{"with relays", []setup{direct, sidecars, noise, relays}, [][]run{rounds(100, 300), rounds(200, 900), rounds(100, 320), rounds(150, 400)}},
		{"without relays", []setup{direct, sidecars, noise}, [][]run{rounds(100, 300), rounds(200, 900), rounds(100, 320)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "bench-sidecar")
			path, err := writePlot(dir, configs[1], tc.setups, tc.results, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(dir, "1KBat3000pers.corrected.svg"); path != want {
				t.Errorf("plot written to %s, want %s", path, want)
			}
			svg, err := plottest.ReadSVG(path)
			if err != nil {
				t.Fatal(err)
			}
			wantTexts := []string{"bench-sidecar: 1 KB at 3,000/s (1024 B payloads, 1 connection(s)), 2 round(s) × 30s merged"}
			for _, s := range tc.setups {
				wantTexts = append(wantTexts, s.name)
			}
			for _, want := range wantTexts {
				if !svg.HasText(want) {
					t.Errorf("no text %q in the plot; its texts: %q", want, svg.Texts)
				}
			}
			if n := len(svg.Series()); n != len(tc.setups) {
				t.Errorf("%d series lines, want one per setup (%d); the lengths of all the lines: %v", n, len(tc.setups), svg.LineLengths())
			}
		})
	}
}
