package latencyplot

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/HdrHistogram/hdrhistogram-go"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Series is one line of a plot: a name for the legend and a histogram of
// latencies in microseconds (package loadgen's unit).
type Series struct {
	Name      string
	Histogram *hdrhistogram.Histogram
}

// Format is an image format a plot can be written in.
type Format string

const (
	SVG Format = "svg"
	PNG Format = "png"
)

// The plot's size: at PNG's 96 dots per inch, 960 × 576 pixels.
const (
	width  = 10 * vg.Inch
	height = 6 * vg.Inch
)

// FormatOf is the format a plot file's name asks for: its extension, .svg
// or .png in any case. Other extensions are refused rather than passed on to
// gonum, which would also write PDF, EPS, JPEG, TIFF and TeX: two formats
// are enough to view a plot, and a typo should fail before a run, not after.
func FormatOf(path string) (Format, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".svg":
		return SVG, nil
	case ".png":
		return PNG, nil
	case "":
		return "", fmt.Errorf("%q has no extension: the plot's format comes from it, .svg or .png", path)
	default:
		return "", fmt.Errorf("%q: the plot's format comes from the extension, and %s is neither .svg nor .png", path, ext)
	}
}

// WriteFile draws the series into one plot and writes it to path, in the
// format its extension names (see FormatOf).
func WriteFile(path, title string, series []Series) (err error) {
	format, err := FormatOf(path)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing the plot: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("writing the plot %s: %w", path, cerr)
		}
	}()
	if err := Write(f, format, title, series); err != nil {
		return fmt.Errorf("writing the plot %s: %w", path, err)
	}
	return nil
}

// Write draws the series into one plot and writes it to w.
func Write(w io.Writer, format Format, title string, series []Series) error {
	p, legend, err := build(series)
	if err != nil {
		return err
	}
	c, err := draw.NewFormattedCanvas(width, height, string(format))
	if err != nil {
		return fmt.Errorf("rendering %s: %w", format, err)
	}
	layout(draw.New(c), p, title, legend)
	if _, err := c.WriteTo(w); err != nil {
		return fmt.Errorf("writing %s: %w", format, err)
	}
	return nil
}

// errNoSamples: with nothing in any histogram there is no latency range
// for the axis to span.
var errNoSamples = errors.New("no series holds a sample")

// build makes the plot: the nines axis, the latency axis, a grid, and
// one line per series, and the legend's entries, one per series, which
// layout draws. A series without samples is named in the legend as such
// and draws no line.
func build(series []Series) (*plot.Plot, []legendEntry, error) {
	p := plot.New()
	p.X.Label.Text = "percentile (nines scale: 1/(1−p), log)"
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, ninesTicks{}
	p.Y.Label.Text = "latency, ms (log scale)"
	p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, latencyTicks{}
	p.Add(plotter.NewGrid())

	lo, hi := 0.0, 0.0
	legend := make([]legendEntry, 0, len(series))
	for i, s := range series {
		line := &plotter.Line{LineStyle: plotter.DefaultLineStyle}
		line.LineStyle.Color = plotutil.Color(i)
		line.LineStyle.Width = vg.Points(1.5)
		if s.Histogram == nil || s.Histogram.TotalCount() == 0 {
			legend = append(legend, legendEntry{s.Name + " (no samples)", line})
			continue
		}
		line.XYs = points(s.Histogram)
		for _, xy := range line.XYs {
			if lo == 0 || xy.Y < lo {
				lo = xy.Y
			}
			hi = max(hi, xy.Y)
		}
		p.Add(line)
		legend = append(legend, legendEntry{s.Name, line})
	}
	if hi == 0 {
		return nil, nil, errNoSamples
	}
	// Fixed, so that plots of different runs line up.
	p.X.Min, p.X.Max = 1, maxX
	p.Y.Min, p.Y.Max = latencyRange(lo, hi)
	return p, legend, nil
}
