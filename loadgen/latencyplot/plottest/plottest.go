// Package plottest reads back the SVG plots package latencyplot writes, for
// tests to check what they hold: the texts (title, legend, tick labels) and
// the lines, as gonum's vgsvg draws them.
package plottest

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/weighstation/weighstation/loadgen/latencyplot"
)

// Drawing is an SVG plot read back: its size (the viewBox'), the strings
// of its <text> elements in order, the same with where each is drawn, and
// each stroked <path> as a line.
type Drawing struct {
	Width, Height float64
	Texts         []string
	Labels        []Label
	Lines         []Line
}

// Label is one <text> element: its string, where its baseline starts in
// the canvas' coordinates (as Line's: y up), and its font size. Rotated
// texts (the latency axis' label) are marked as such, and their position
// is in the rotated frame.
type Label struct {
	Text    string
	X, Y    float64
	Size    float64
	Rotated bool
}

// Line is one stroked path: its colour and points, in the canvas'
// coordinates, whose y axis points up (vgsvg flips the whole drawing).
type Line struct {
	Stroke string
	Points [][2]float64
}

var (
	// vgsvg writes a polyline as "Mx,yLx,yLx,y...".
	pathPoint   = regexp.MustCompile(`[ML]([-0-9.e+]+),([-0-9.e+]+)`)
	strokeColor = regexp.MustCompile(`(?:^|;)stroke:(#[0-9A-Fa-f]{6})`)
)

// ReadSVG parses the file as XML, so that a malformed plot is an error.
func ReadSVG(path string) (*Drawing, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d := &Drawing{}
	dec := xml.NewDecoder(f)
	// rotated says, for each <g> open, whether it or one around it rotates.
	var rotated []bool
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return d, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s is not well-formed XML: %w", path, err)
		}
		if end, ok := tok.(xml.EndElement); ok && end.Name.Local == "g" && len(rotated) > 0 {
			rotated = rotated[:len(rotated)-1]
		}
		el, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		switch el.Name.Local {
		case "svg":
			if _, err := fmt.Sscanf(attr(el, "viewBox"), "0 0 %g %g", &d.Width, &d.Height); err != nil {
				return nil, fmt.Errorf("the viewBox of %s: %w", path, err)
			}
		case "g":
			in := len(rotated) > 0 && rotated[len(rotated)-1]
			rotated = append(rotated, in || strings.Contains(attr(el, "transform"), "rotate"))
		case "text":
			label, err := readLabel(el)
			if err != nil {
				return nil, fmt.Errorf("a <text> in %s: %w", path, err)
			}
			label.Rotated = len(rotated) > 0 && rotated[len(rotated)-1]
			if err := dec.DecodeElement(&label.Text, &el); err != nil {
				return nil, fmt.Errorf("a <text> in %s: %w", path, err)
			}
			d.Texts = append(d.Texts, label.Text)
			d.Labels = append(d.Labels, label)
		case "path":
			line, ok, err := readPath(el)
			if err != nil {
				return nil, fmt.Errorf("a <path> in %s: %w", path, err)
			}
			if ok {
				d.Lines = append(d.Lines, line)
			}
		}
	}
}

var fontSize = regexp.MustCompile(`(?:^|;)font-size:([0-9.]+)px`)

// readLabel reads where a <text> is drawn: vgsvg flips each text back
// upright (transform="scale(1, -1)") inside the drawing's flip, so that
// its y attribute is the canvas' y negated.
func readLabel(el xml.StartElement) (Label, error) {
	if tr := attr(el, "transform"); tr != "scale(1, -1)" {
		return Label{}, fmt.Errorf("transform %q, want vgsvg's scale(1, -1)", tr)
	}
	x, errX := strconv.ParseFloat(attr(el, "x"), 64)
	y, errY := strconv.ParseFloat(attr(el, "y"), 64)
	size := fontSize.FindStringSubmatch(attr(el, "style"))
	if size == nil {
		return Label{}, fmt.Errorf("no font size in style %q", attr(el, "style"))
	}
	s, errS := strconv.ParseFloat(size[1], 64)
	if err := errors.Join(errX, errY, errS); err != nil {
		return Label{}, err
	}
	return Label{X: x, Y: -y, Size: s}, nil
}

func attr(el xml.StartElement, name string) string {
	for _, a := range el.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// readPath reads a stroked polyline; filled shapes (the background) and
// curves are not lines of a plot.
func readPath(el xml.StartElement) (Line, bool, error) {
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
		return Line{}, false, nil
	}
	line := Line{Stroke: stroke[1]}
	for _, m := range pathPoint.FindAllStringSubmatch(data, -1) {
		x, errX := strconv.ParseFloat(m[1], 64)
		y, errY := strconv.ParseFloat(m[2], 64)
		if err := errors.Join(errX, errY); err != nil {
			return Line{}, false, fmt.Errorf("path data %q: %w", data, err)
		}
		line.Points = append(line.Points, [2]float64{x, y})
	}
	return line, true, nil
}

// HasText says whether one of the texts is s, exactly.
func (d *Drawing) HasText(s string) bool { return slices.Contains(d.Texts, s) }

// Series returns the lines that are series, in the order drawn: those
// through every percentile latencyplot plots and the maximum. Axes, ticks,
// grid lines and the legend's samples are all two-point lines.
func (d *Drawing) Series() []Line {
	var out []Line
	for _, l := range d.Lines {
		if len(l.Points) == len(latencyplot.Percentiles)+1 {
			out = append(out, l)
		}
	}
	return out
}

// LineLengths is how many points each line has, for a test's failure message.
func (d *Drawing) LineLengths() []int {
	n := make([]int, len(d.Lines))
	for i, l := range d.Lines {
		n[i] = len(l.Points)
	}
	return n
}
