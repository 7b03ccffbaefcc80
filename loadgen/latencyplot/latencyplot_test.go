package latencyplot_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/weighstation/weighstation/loadgen/latencyplot"
	"github.com/weighstation/weighstation/loadgen/latencyplot/plottest"
)

// uniform is a histogram of every value from lo to hi microseconds, once.
func uniform(lo, hi int64) *hdrhistogram.Histogram {
	h := hdrhistogram.New(1, 3_600_000_000, 3)
	for v := lo; v <= hi; v++ {
		_ = h.RecordValue(v)
	}
	return h
}

// TestPlotHoldsTheSeries renders two known distributions, one slower than
// the other everywhere, and reads the SVG back: the title, the legend's
// names and the nines axis are there, and each series is one line through
// every percentile plotted and the maximum, the slower one above the
// faster at each.
func TestPlotHoldsTheSeries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.svg")
	series := []latencyplot.Series{{Name: "direct", Histogram: uniform(100, 1_100)}, {Name: "two sidecars", Histogram: uniform(300, 9_000)}}
	if err := latencyplot.WriteFile(path, "1 KB at 3,000/s for 30s", series); err != nil {
		t.Fatal(err)
	}
	svg := readSVG(t, path)
	for _, want := range []string{"1 KB at 3,000/s for 30s", "direct", "two sidecars", "0%", "90%", "99%", "99.9%", "99.99%", "99.999%", "max"} {
		if !svg.HasText(want) {
			t.Errorf("no text %q in the plot; its texts: %q", want, svg.Texts)
		}
	}
	// One line per series through every percentile plotted and the maximum.
	lines := svg.Series()
	if len(lines) != len(series) {
		t.Fatalf("%d lines of %d points, want one per series (%d); lengths of all the lines: %v", len(lines), len(latencyplot.Percentiles)+1, len(series), svg.LineLengths())
	}
	if lines[0].Stroke == lines[1].Stroke {
		t.Errorf("both series are drawn in %s", lines[0].Stroke)
	}
	for _, l := range lines {
		for i := 1; i < len(l.Points); i++ {
			if l.Points[i][0] <= l.Points[i-1][0] {
				t.Fatalf("the %s line goes back at point %d: %v", l.Stroke, i, l.Points)
			}
		}
	}
	// The canvas' y axis points up: higher latency, larger y.
	faster, slower := lines[0], lines[1]
	for i := range faster.Points {
		if slower.Points[i][1] <= faster.Points[i][1] {
			t.Fatalf("at point %d the slower series is at y %g, not above the faster at %g", i, slower.Points[i][1], faster.Points[i][1])
		}
	}
}

func readSVG(t *testing.T, path string) *plottest.Drawing {
	t.Helper()
	d, err := plottest.ReadSVG(path)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSeriesWithoutSamples: an empty series is named in the legend as such
// and draws no line; with nothing in any series there is no plot.
func TestSeriesWithoutSamples(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "partial.svg")
	if err := latencyplot.WriteFile(path, "partial", []latencyplot.Series{{Name: "direct", Histogram: uniform(1, 10)}, {Name: "relays", Histogram: hdrhistogram.New(1, 1000, 3)}}); err != nil {
		t.Fatal(err)
	}
	svg := readSVG(t, path)
	if !svg.HasText("relays (no samples)") || len(svg.Series()) != 1 {
		t.Fatalf("texts %q, line lengths %v: want the empty series named as such and one line", svg.Texts, svg.LineLengths())
	}
	err := latencyplot.WriteFile(filepath.Join(dir, "empty.svg"), "empty", []latencyplot.Series{{Name: "direct", Histogram: nil}})
	if err == nil || !strings.Contains(err.Error(), "no series holds a sample") {
		t.Fatalf("plotting nothing: %v, want an error saying there is no sample", err)
	}
}

// TestPNG: the other format is written too, as a PNG.
func TestPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.PNG")
	if err := latencyplot.WriteFile(path, "png", []latencyplot.Series{{Name: "direct", Histogram: uniform(1, 1000)}}); err != nil {
		t.Fatal(err)
	}
	b := readFile(t, path)
	if !strings.HasPrefix(b, "\x89PNG\r\n") {
		t.Fatalf("%s does not start with PNG's signature: %q", path, b[:min(len(b), 8)])
	}
}

func TestFormatOf(t *testing.T) {
	for _, tc := range []struct {
		path    string
		want    latencyplot.Format
		wantErr string
	}{
		{"run.svg", latencyplot.SVG, ""},
		{"out/Run.SVG", latencyplot.SVG, ""},
		{"run.png", latencyplot.PNG, ""},
		{"run.pdf", "", `"run.pdf": the plot's format comes from the extension, and .pdf is neither .svg nor .png`},
		{"run.svg.gz", "", "neither .svg nor .png"},
		{"run", "", `"run" has no extension`},
	} {
		t.Run(tc.path, func(t *testing.T) {
			got, err := latencyplot.FormatOf(tc.path)
			if tc.wantErr == "" && (err != nil || got != tc.want) {
				t.Fatalf("format %q, error %v; want %q", got, err, tc.want)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
