package latencyplot_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/weighstation/weighstation/loadgen/latencyplot"
	"github.com/weighstation/weighstation/loadgen/latencyplot/plottest"
)

// box is a text's estimated extent in the canvas' coordinates (y up).
type box struct{ x0, y0, x1, y1 float64 }

// The estimate of a text's extent, in ems of its font size: each
// character 0.6 wide (wider than most in Liberation Serif, the font the
// plot names, and in DejaVu Serif, which a viewer without it may draw in
// instead), 0.9 above the baseline and 0.2 below it.
const (
	charWidth = 0.6
	ascent    = 0.9
	descent   = 0.2
)

func textBox(l plottest.Label) box {
	return box{l.X, l.Y - descent*l.Size, l.X + charWidth*l.Size*float64(utf8.RuneCountInString(l.Text)), l.Y + ascent*l.Size}
}

// apart says whether a and b are at least gap apart, across or up.
func (a box) apart(b box, gap float64) bool {
	return a.x1+gap <= b.x0 || b.x1+gap <= a.x0 || a.y1+gap <= b.y0 || b.y1+gap <= a.y0
}

func (a box) String() string { return fmt.Sprintf("[%.1f,%.1f]×[%.1f,%.1f]", a.x0, a.x1, a.y0, a.y1) }

// TestLegendLayout reads the legend's and the title's texts back from the
// SVG and checks, on an estimate of each text's extent, that the legend
// is clear of the title, by minGap at least; that its entries are clear
// of one another; that it lies inside the canvas; and that it lies above
// the data area: above the top of every line but its own thumbnails,
// clear of every other text.
func TestLegendLayout(t *testing.T) {
	const minGap = 2.0
	phases := func(names ...string) []latencyplot.Series {
		series := make([]latencyplot.Series, len(names))
		for i, n := range names {
			series[i] = latencyplot.Series{Name: n, Histogram: uniform(100*int64(i+1), 2_000*int64(i+1))}
		}
		return series
	}
	for _, tc := range []struct {
		name   string
		title  string
		series []latencyplot.Series
	}{
		{"the demo's phases", "billing (essential): latency from each order's intended send time, 200 orders/s, by phase",
			phases("before (4000 orders)", "overload: spam filter slow (3000 orders)", "recovery (600 orders)", "manual kill switch engaged (2000 orders)", "after its release (3000 orders)")},
		{"bench, two-line title", "weighstation bench: publish, 256 B at 2000/s for 30s over 4 connection(s)\nsent 60000, received 60000, failed 0",
			phases("corrected: response time, from the intended send", "uncorrected: service time, from the actual send")},
		{"one series", "run", phases("direct")},
		{"short names in columns", "many setups", phases("a", "b", "c", "d", "e", "f", "g", "h", "i")},
		{"a series without samples", "partial", append(phases("direct", "one sidecar"), latencyplot.Series{Name: "relays", Histogram: hdrhistogram.New(1, 1000, 3)})},
		{"no title", "", phases("direct", "two sidecars")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "plot.svg")
			if err := latencyplot.WriteFile(path, tc.title, tc.series); err != nil {
				t.Fatal(err)
			}
			svg := readSVG(t, path)
			isTitle, isLegend := map[string]bool{}, map[string]bool{}
			if tc.title != "" {
				for _, l := range strings.Split(tc.title, "\n") {
					isTitle[l] = true
				}
			}
			for _, s := range tc.series {
				if s.Histogram.TotalCount() == 0 {
					isLegend[s.Name+" (no samples)"] = true
				} else {
					isLegend[s.Name] = true
				}
			}
			var title, legend, others []plottest.Label
			for _, l := range svg.Labels {
				switch {
				case l.Rotated:
				case isTitle[l.Text]:
					title = append(title, l)
				case isLegend[l.Text]:
					legend = append(legend, l)
				default:
					others = append(others, l)
				}
			}
			if len(title) != len(isTitle) || len(legend) != len(isLegend) {
				t.Fatalf("%d title lines and %d legend entries among the texts, want %d and %d: %q", len(title), len(legend), len(isTitle), len(isLegend), svg.Texts)
			}

			// The data area's top: the highest point of any line but the
			// legend's thumbnails, which are the only horizontal two-point
			// lines at the height of a legend entry's text.
			var legendBottom = svg.Height
			for _, l := range legend {
				legendBottom = min(legendBottom, textBox(l).y0)
			}
			dataTop := 0.0
			for _, line := range svg.Lines {
				if len(line.Points) == 2 && line.Points[0][1] == line.Points[1][1] && line.Points[0][1] >= legendBottom {
					continue
				}
				for _, p := range line.Points {
					dataTop = max(dataTop, p[1])
				}
			}

			for i, l := range legend {
				b := textBox(l)
				for _, tl := range title {
					if !b.apart(textBox(tl), minGap) {
						t.Errorf("legend entry %q at %v is not %gpt clear of the title's line %q at %v", l.Text, b, minGap, tl.Text, textBox(tl))
					}
				}
				for _, o := range legend[i+1:] {
					if !b.apart(textBox(o), 0) {
						t.Errorf("legend entries %q at %v and %q at %v overlap", l.Text, b, o.Text, textBox(o))
					}
				}
				for _, o := range others {
					if !b.apart(textBox(o), 0) {
						t.Errorf("legend entry %q at %v overlaps the text %q at %v", l.Text, b, o.Text, textBox(o))
					}
				}
				if b.x0 < 0 || b.x1 > svg.Width || b.y0 < 0 || b.y1 > svg.Height {
					t.Errorf("legend entry %q at %v is not inside the %gx%g canvas", l.Text, b, svg.Width, svg.Height)
				}
				if b.y0 < dataTop {
					t.Errorf("legend entry %q at %v is not above the data area, whose top is at %.1f", l.Text, b, dataTop)
				}
			}
		})
	}
}
