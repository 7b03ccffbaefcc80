package main

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/weighstation/weighstation/demo/demoapi"
)

// svgText is a <text> of the timeline read back, and its estimated box,
// in the SVG's coordinates (y down): each character 0.6 em wide, 0.9 em
// above the baseline and 0.2 em below it.
type svgText struct {
	text           string
	baseline       float64
	x0, x1, y0, y1 float64
}

// timelineDrawing is what the tests read back from the timeline's SVG.
type timelineDrawing struct {
	width, height float64
	// bandTop is the phases' band's top: the tallest <rect>'s.
	bandTop float64
	texts   []svgText
}

func readTimeline(svg string) (*timelineDrawing, error) {
	d := &timelineDrawing{}
	size := 0.0
	tallest := 0.0
	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return d, nil
		}
		if err != nil {
			return nil, fmt.Errorf("not well-formed XML: %w", err)
		}
		el, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		num := func(name string) float64 {
			for _, a := range el.Attr {
				if a.Name.Local == name {
					v, perr := strconv.ParseFloat(a.Value, 64)
					if perr != nil && err == nil {
						err = fmt.Errorf("<%s %s=%q>: %w", el.Name.Local, name, a.Value, perr)
					}
					return v
				}
			}
			if err == nil {
				err = fmt.Errorf("<%s> has no %s", el.Name.Local, name)
			}
			return 0
		}
		switch el.Name.Local {
		case "svg":
			d.width, d.height, size = num("width"), num("height"), num("font-size")
		case "rect":
			if h := num("height"); h > tallest {
				tallest, d.bandTop = h, num("y")
			}
		case "text":
			x, y := num("x"), num("y")
			var s string
			if derr := dec.DecodeElement(&s, &el); derr != nil && err == nil {
				err = derr
			}
			w := float64(utf8.RuneCountInString(s)) * 0.6 * size
			t := svgText{text: s, baseline: y, x0: x, x1: x + w, y0: y - 0.9*size, y1: y + 0.2*size}
			for _, a := range el.Attr {
				if a.Name.Local == "text-anchor" && a.Value == "end" {
					t.x0, t.x1 = x-w, x
				}
			}
			d.texts = append(d.texts, t)
		}
		if err != nil {
			return nil, err
		}
	}
}

// TestTimelineLabels draws timelines whose phases are close together and
// reads the SVG back: every phase is named above the band, every text is
// inside the SVG, two texts on one row (one baseline) are at least minGap
// apart, and texts on different rows do not overlap, on an estimate of
// their extents.
func TestTimelineLabels(t *testing.T) {
	const minGap = 6.0
	start := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	type mark struct {
		at   float64
		what string
	}
	demoEvents := []mark{{30, "steady load, status filled"}, {50, "spam filter slow"}, {52, "breaker tripped"}, {53, "automatic kill seen in status"},
		{66, "spam filter fast again"}, {67, "breaker closed"}, {68, "kubectl patch: kill switch engaged"}, {68.2, "checks fail fast"},
		{71, "kubectl patch: kill switch released"}, {71.5, "checks answered again"}}
	for _, tc := range []struct {
		name   string
		phases []span
		events []mark
	}{
		{"the demo's last phases a few seconds apart", []span{{phaseBefore, 30, 50}, {phaseOverload, 50, 66}, {phaseRecovery, 66, 68}, {phaseKilled, 68, 71}, {phaseAfter, 71, 74}}, demoEvents},
		{"only the last three phases", []span{{phaseRecovery, 0, 2}, {phaseKilled, 2, 5}, {phaseAfter, 5, 8}}, nil},
		{"a second each after a long phase", []span{{phaseBefore, 0, 300}, {phaseOverload, 300, 301}, {phaseRecovery, 301, 302}, {phaseKilled, 302, 303}, {phaseAfter, 303, 304}}, nil},
		{"the demo's default phases", []span{{phaseBefore, 10, 30}, {phaseOverload, 30, 45}, {phaseRecovery, 45, 50}, {phaseKilled, 50, 60}, {phaseAfter, 60, 75}}, demoEvents[:4]},
		{"one phase", []span{{phaseKilled, 0, 10}}, []mark{{0, "kubectl patch: kill switch engaged"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &demo{p: newProgress(io.Discard, start)}
			ps := make([]phase, len(tc.phases))
			for i, p := range tc.phases {
				ps[i] = phase{Phase: demoapi.Phase{Name: p.name, Start: at(p.from), End: at(p.to)}}
			}
			for _, e := range tc.events {
				d.events = append(d.events, event{At: at(e.at), What: e.what})
			}
			svg := d.timelineSVG(ps)
			got, err := readTimeline(svg)
			if err != nil {
				t.Fatalf("%v:\n%s", err, svg)
			}
			named := map[string]bool{}
			for _, tx := range got.texts {
				named[tx.text] = true
				if tx.x0 < 0 || tx.x1 > got.width || tx.y0 < 0 || tx.y1 > got.height {
					t.Errorf("%q at [%.1f,%.1f]×[%.1f,%.1f] is not inside the %gx%g SVG", tx.text, tx.x0, tx.x1, tx.y0, tx.y1, got.width, got.height)
				}
			}
			for _, p := range tc.phases {
				if !named[p.name] {
					t.Errorf("no phase named %q; the texts: %v", p.name, got.texts)
				}
			}
			for _, tx := range got.texts {
				if isPhase(tc.phases, tx.text) && tx.y1 > got.bandTop {
					t.Errorf("the name %q reaches down to %.1f, into the band at %.1f", tx.text, tx.y1, got.bandTop)
				}
			}
			for i, a := range got.texts {
				for _, b := range got.texts[i+1:] {
					if a.baseline == b.baseline {
						if gap := max(b.x0-a.x1, a.x0-b.x1); gap < minGap {
							t.Errorf("%q [%.1f,%.1f] and %q [%.1f,%.1f] on the row at %.1f are %.1f apart, want at least %g", a.text, a.x0, a.x1, b.text, b.x0, b.x1, a.baseline, gap, minGap)
						}
					} else if a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1 {
						t.Errorf("%q [%.1f,%.1f]×[%.1f,%.1f] and %q [%.1f,%.1f]×[%.1f,%.1f] overlap", a.text, a.x0, a.x1, a.y0, a.y1, b.text, b.x0, b.x1, b.y0, b.y1)
					}
				}
			}
			if t.Failed() {
				t.Logf("the SVG:\n%s", svg)
			}
		})
	}
}

// span is a phase of a test's timeline, in seconds from its start.
type span struct {
	name     string
	from, to float64
}

func isPhase(phases []span, s string) bool {
	for _, p := range phases {
		if p.name == s {
			return true
		}
	}
	return false
}

// TestPlaceNames: names too close for one row go up a row, into the
// first with room, and a name that would run past the right edge is
// moved left to end there.
func TestPlaceNames(t *testing.T) {
	pad := nameSwatch + nameSwatchGap
	for _, tc := range []struct {
		name     string
		starts   []float64
		widths   []float64
		want     []nameSlot
		wantRows int
	}{
		{"far apart: one row", []float64{0, 200, 400}, []float64{50, 50, 50},
			[]nameSlot{{3, 50 + pad, 0}, {203, 50 + pad, 0}, {403, 50 + pad, 0}}, 1},
		{"close: staggered", []float64{0, 20, 40}, []float64{50, 50, 50},
			[]nameSlot{{3, 50 + pad, 0}, {23, 50 + pad, 1}, {43, 50 + pad, 2}}, 3},
		{"back down once there is room", []float64{0, 20, 100}, []float64{50, 50, 50},
			[]nameSlot{{3, 50 + pad, 0}, {23, 50 + pad, 1}, {103, 50 + pad, 0}}, 2},
		{"just nameGap apart: one row", []float64{0, 50 + pad + nameGap}, []float64{50, 50},
			[]nameSlot{{3, 50 + pad, 0}, {3 + 50 + pad + nameGap, 50 + pad, 0}}, 1},
		{"at the right edge", []float64{900}, []float64{100},
			[]nameSlot{{1000 - 100 - pad, 100 + pad, 0}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, rows := placeNames(tc.starts, tc.widths, 0, 1000)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) || rows != tc.wantRows {
				t.Fatalf("slots %v on %d rows, want %v on %d", got, rows, tc.want, tc.wantRows)
			}
		})
	}
}
