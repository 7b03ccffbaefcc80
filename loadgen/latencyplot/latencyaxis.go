package latencyplot

import (
	"fmt"
	"math"
	"strconv"

	"gonum.org/v1/plot"
)

// maxLabelled is the most labelled ticks the latency axis takes before it
// labels powers of ten only.
const maxLabelled = 12

// latencyTicks labels the log latency axis at 1, 2 and 5 times each power
// of ten, which a reader can interpolate between, unlike gonum's LogTicks,
// which labels powers of ten only and so leaves a distribution that spans
// less than a decade with one label or none. Over many decades only the
// powers of ten keep their labels; a range narrow enough to fall between
// two of them (2.1 to 3.3, say) is labelled at its ends.
type latencyTicks struct{}

func (latencyTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	var powersOfTen []bool
	for e := int(math.Floor(math.Log10(lo))); e <= int(math.Ceil(math.Log10(hi))); e++ {
		for _, m := range []int{1, 2, 5} {
			v := decimal(m, e)
			if v >= lo && v <= hi {
				ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
				powersOfTen = append(powersOfTen, m == 1)
			}
		}
	}
	if len(ticks) < 2 {
		return []plot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'g', 3, 64)}, {Value: hi, Label: strconv.FormatFloat(hi, 'g', 3, 64)}}
	}
	if len(ticks) > maxLabelled {
		for i := range ticks {
			if !powersOfTen[i] {
				ticks[i].Label = ""
			}
		}
	}
	return ticks
}

// decimal is m×10^e as the float nearest to it, so that its label reads
// 0.02 and not the 0.020000000000000004 that repeated multiplication makes.
func decimal(m, e int) float64 {
	v, _ := strconv.ParseFloat(fmt.Sprintf("%de%d", m, e), 64) // well-formed by construction
	return v
}

// latencyRange is the latency axis' extent: the data's, with a margin
// below and above. The margins also keep the axis from spanning nothing
// (a single value), which on a log axis would divide by zero. The legend
// has a band of its own above the axes (see layout), so the top of the
// axis need not be kept clear of lines for it.
func latencyRange(lo, hi float64) (float64, float64) {
	return lo / 1.25, hi * 1.25
}
