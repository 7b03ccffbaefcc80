package latencyplot_test

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// drawing is what a test reads back from an SVG that gonum's vgsvg wrote:
// the strings of its <text> elements, and each stroked <path> as its
// points (vgsvg writes a polyline as "M x,y L x,y L x,y ...") and colour.
type drawing struct {
	texts []string
	lines []polyline
}

type polyline struct {
	stroke string
	points [][2]float64
}

var (
	pathPoint   = regexp.MustCompile(`[ML]([-0-9.e+]+),([-0-9.e+]+)`)
	strokeColor = regexp.MustCompile(`(?:^|;)stroke:(#[0-9A-Fa-f]{6})`)
)

// readSVG parses path as XML: a malformed file fails the test.
func readSVG(t *testing.T, path string) drawing {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var d drawing
	dec := xml.NewDecoder(f)
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", path, err)
		}
		el, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		switch el.Name.Local {
		case "text":
			var s string
			if err := dec.DecodeElement(&s, &el); err != nil {
				t.Fatalf("a <text> in %s: %v", path, err)
			}
			d.texts = append(d.texts, s)
		case "path":
			var data, style string
			for _, a := range el.Attr {
				switch a.Name.Local {
				case "d":
					data = a.Value
				case "style":
					style = a.Value
				}
			}
			stroke := strokeColor.FindStringSubmatch(style)
			if stroke == nil || strings.ContainsAny(data, "AQCZ") {
				continue // a filled shape (the background), not a line
			}
			line := polyline{stroke: stroke[1]}
			for _, m := range pathPoint.FindAllStringSubmatch(data, -1) {
				x, errX := strconv.ParseFloat(m[1], 64)
				y, errY := strconv.ParseFloat(m[2], 64)
				if errX != nil || errY != nil {
					t.Fatalf("path data %q: %v %v", data, errX, errY)
				}
				line.points = append(line.points, [2]float64{x, y})
			}
			d.lines = append(d.lines, line)
		}
	}
	return d
}

// linesOf returns the lines of exactly n points: the series, since axes,
// ticks, grid lines and legend thumbnails are all two-point lines.
func (d drawing) linesOf(n int) []polyline {
	var out []polyline
	for _, l := range d.lines {
		if len(l.points) == n {
			out = append(out, l)
		}
	}
	return out
}

func (d drawing) hasText(s string) bool {
	for _, t := range d.texts {
		if t == s {
			return true
		}
	}
	return false
}
