package latencyplot

import (
	"math"
	"strings"

	"github.com/HdrHistogram/hdrhistogram-go"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
)

// lastNine is how many nines the grid reaches: 99.999%. A run of 10 s at
// 10,000/s holds 100,000 samples, whose top one is the 99.999th percentile;
// beyond it a plot would only repeat the maximum.
const lastNine = 5

// stepsPerNine is how finely the grid samples each nine: enough for the
// knee of a distribution to look like a curve, few enough that an SVG stays
// small.
const stepsPerNine = 10

// Percentiles is the grid each series is drawn through, in percent: from 0%
// (the minimum) to 99.999%, evenly spaced on the nines scale.
var Percentiles = nines()

func nines() []float64 {
	ps := make([]float64, 0, lastNine*stepsPerNine+1)
	for k := 0; k <= lastNine*stepsPerNine; k++ {
		ps = append(ps, 100*(1-math.Pow(10, -float64(k)/stepsPerNine)))
	}
	return ps
}

// ninesX is a percentile's place on the x axis: 1/(1−p), so 0% is 1, 90%
// is 10, 99% is 100, and each further nine one more power of ten.
func ninesX(percentile float64) float64 {
	return 1 / (1 - percentile/100)
}

// maxX is where a series' maximum goes: one nine past the grid, where the
// x axis says "max" rather than a percentile the samples cannot resolve.
var maxX = math.Pow(10, lastNine+1)

// minMicros is the least latency drawn: the y axis is logarithmic, and a
// histogram may hold zeros.
const minMicros = 1

// points is what a series draws: (ninesX(p), milliseconds) at each of
// Percentiles, then (maxX, the maximum). The values are the histogram's
// (microseconds), as its percentile report gives them.
func points(h *hdrhistogram.Histogram) plotter.XYs {
	xys := make(plotter.XYs, 0, len(Percentiles)+1)
	for _, p := range Percentiles {
		xys = append(xys, plotter.XY{X: ninesX(p), Y: millis(h.ValueAtQuantile(p))})
	}
	return append(xys, plotter.XY{X: maxX, Y: millis(h.Max())})
}

func millis(micros int64) float64 { return float64(max(micros, minMicros)) / 1000 }

// ninesTicks labels the x axis at each nine (0%, 90%, 99%, ... 99.999%)
// and at the maximum, with unlabelled ticks at 2 to 9 times each power of
// ten in between.
type ninesTicks struct{}

func (ninesTicks) Ticks(_, _ float64) []plot.Tick {
	var ticks []plot.Tick
	for k := 0; k <= lastNine; k++ {
		decade := math.Pow(10, float64(k))
		ticks = append(ticks, plot.Tick{Value: decade, Label: ninesLabel(k)})
		for m := 2; m <= 9; m++ {
			ticks = append(ticks, plot.Tick{Value: float64(m) * decade})
		}
	}
	return append(ticks, plot.Tick{Value: maxX, Label: "max"})
}

// ninesLabel spells k nines as a percentile, exactly: 0%, 90%, 99%, 99.9%.
func ninesLabel(k int) string {
	switch k {
	case 0:
		return "0%"
	case 1:
		return "90%"
	case 2:
		return "99%"
	}
	return "99." + strings.Repeat("9", k-2) + "%"
}
