package latencyplot

import (
	"math"
	"strings"
	"testing"

	"github.com/HdrHistogram/hdrhistogram-go"
)

func TestPercentileGrid(t *testing.T) {
	for _, tc := range []struct {
		step  int
		wantP float64
		wantX float64
	}{
		{0, 0, 1},
		{stepsPerNine, 90, 10},
		{2 * stepsPerNine, 99, 100},
		{5 * stepsPerNine, 99.999, 100_000},
	} {
		p := Percentiles[tc.step]
		if math.Abs(p-tc.wantP) > 1e-9 || math.Abs(ninesX(p)-tc.wantX)/tc.wantX > 1e-9 {
			t.Errorf("step %d: percentile %g at x %g, want %g at x %g", tc.step, p, ninesX(p), tc.wantP, tc.wantX)
		}
	}
	if n := len(Percentiles); n != lastNine*stepsPerNine+1 {
		t.Errorf("%d percentiles, want %d", n, lastNine*stepsPerNine+1)
	}
}

// TestPoints: a series is its histogram's value at each percentile, in
// milliseconds, then its maximum at the "max" tick; a zero is drawn at the
// floor of the log axis.
func TestPoints(t *testing.T) {
	h := hdrhistogram.New(1, 3_600_000_000, 3)
	for _, v := range []int64{0, 200, 300, 40_000} {
		_ = h.RecordValue(v)
	}
	xys := points(h)
	if len(xys) != len(Percentiles)+1 {
		t.Fatalf("%d points, want %d", len(xys), len(Percentiles)+1)
	}
	for i, p := range Percentiles {
		if want := millis(h.ValueAtQuantile(p)); xys[i].Y != want || xys[i].X != ninesX(p) {
			t.Errorf("at %g%%: (%g, %g), want (%g, %g)", p, xys[i].X, xys[i].Y, ninesX(p), want)
		}
	}
	if xys[0].Y != 0.001 {
		t.Errorf("the minimum (0 µs) is drawn at %g ms, want the floor 0.001", xys[0].Y)
	}
	if last := xys[len(xys)-1]; last.X != maxX || last.Y != float64(h.Max())/1000 {
		t.Errorf("the last point is %v, want the maximum %d µs at x %g", last, h.Max(), maxX)
	}
}

func TestNinesLabels(t *testing.T) {
	want := []string{"0%", "90%", "99%", "99.9%", "99.99%", "99.999%", "max"}
	var got []string
	for _, tick := range (ninesTicks{}).Ticks(1, maxX) {
		if tick.Label != "" {
			got = append(got, tick.Label)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("labels %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("labels %q, want %q", got, want)
		}
	}
}

func TestLatencyTicks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lo, hi float64
		want   []string // the labelled ticks
	}{
		{"under a decade", 0.08, 1.3, []string{"0.1", "0.2", "0.5", "1"}},
		{"a few decades", 0.08, 40, []string{"0.1", "0.2", "0.5", "1", "2", "5", "10", "20"}},
		{"many decades: powers of ten only", 0.0008, 3000, []string{"0.001", "0.01", "0.1", "1", "10", "100", "1000"}},
		{"between two of 1, 2, 5", 2.1, 3.3, []string{"2.1", "3.3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, tick := range (latencyTicks{}).Ticks(tc.lo, tc.hi) {
				if tick.Value < tc.lo || tick.Value > tc.hi {
					t.Errorf("tick %g outside [%g, %g]", tick.Value, tc.lo, tc.hi)
				}
				if tick.Label != "" {
					got = append(got, tick.Label)
				}
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("labels %q, want %q", got, tc.want)
			}
		})
	}
}

// TestLatencyRange: the axis spans the data with a margin on either side.
func TestLatencyRange(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lo, hi float64
	}{
		{"three decades", 0.1, 100},
		{"under two decades", 0.1, 3},
		{"one value", 0.2, 0.2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bottom, top := latencyRange(tc.lo, tc.hi)
			if bottom >= tc.lo || top <= tc.hi {
				t.Fatalf("axis [%g, %g] does not hold the data [%g, %g] with a margin", bottom, top, tc.lo, tc.hi)
			}
		})
	}
}
