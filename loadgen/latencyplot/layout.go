package latencyplot

import (
	"image/color"
	"math"
	"unicode/utf8"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// legendEntry is one series' name in the legend and the line it names,
// whose thumbnail (a short stretch of it) goes before the name.
type legendEntry struct {
	name string
	line plot.Thumbnailer
}

// The legend's geometry: the thumbnail's width, and the gaps, in ems of
// the legend's font, between the thumbnail and its name, between
// columns, and around the legend's band (above it, from the title; below
// it, from the axes).
const (
	thumbnailWidth = vg.Length(20)
	thumbnailGap   = 0.5
	columnGap      = 2.0
	bandGap        = 0.5
)

// layout draws the plot onto c in three bands, top to bottom, each half
// an em of the legend's font below the one above: the title, centred, as
// gonum draws it; the legend, one row per entry, its font's line height
// each, in as many columns as fit in the data area's width (filled top to
// bottom, then left to right), from the data area's left edge; and the
// axes with the data in the rest. gonum's own legend goes inside the data
// area, where it crowded the title and the lines, so the plot's Legend
// and Title are left empty and drawn here instead. So is the latency
// axis' label (taken out of p), centred on the data area: gonum reserves
// room above the axes for where it reckons the label's middle is, the
// middle of the axis' range in data units, which on a log axis is near
// the top.
func layout(c draw.Canvas, p *plot.Plot, title string, entries []legendEntry) {
	c.SetColor(color.White)
	c.Fill(c.Rectangle.Path())

	titleStyle := p.Title.TextStyle
	top := c.Max.Y
	if title != "" {
		c.FillText(titleStyle, vg.Point{X: c.Center().X, Y: top + titleStyle.FontExtents().Descent}, title)
		top -= titleStyle.Rectangle(title).Size().Y
	}

	sty := p.Legend.TextStyle
	sty.Color = color.Black
	em := sty.Font.Size
	ext := sty.FontExtents()
	rowHeight := ext.Height // ascent, descent and the line gap

	// The data area's left edge and width do not depend on how far down
	// it starts, so the legend's columns can be fitted first.
	legendTop := top - bandGap*em
	var widest vg.Length
	for _, e := range entries {
		widest = max(widest, thumbnailWidth+thumbnailGap*em+textWidth(sty, e.name))
	}
	yLabel, yLabelStyle := p.Y.Label.Text, p.Y.Label.TextStyle
	p.Y.Label.Text = ""
	var left vg.Length
	if yLabel != "" {
		left = yLabelStyle.Height(yLabel) + yLabelStyle.FontExtents().Descent + p.Y.Label.Padding
	}
	data := p.DataCanvas(draw.Crop(c, left, 0, 0, legendTop-c.Max.Y))
	rows := legendRows(len(entries), float64(widest), float64(columnGap*em), float64(data.Max.X-data.Min.X))

	face := sty.Handler.Cache().Lookup(sty.Font, sty.Font.Size)
	for i, e := range entries {
		col, row := i/rows, i%rows
		x := data.Min.X + vg.Length(col)*(widest+columnGap*em)
		rowTop := legendTop - vg.Length(row)*rowHeight
		baseline := rowTop - ext.Ascent
		// The thumbnail's line about mid-height of the name's lower case.
		mid := baseline + ext.Ascent/3
		e.line.Thumbnail(&draw.Canvas{Canvas: c.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: x, Y: mid - 1},
			Max: vg.Point{X: x + thumbnailWidth, Y: mid + 1},
		}})
		c.SetColor(sty.Color)
		c.FillString(face, vg.Point{X: x + thumbnailWidth + thumbnailGap*em, Y: baseline}, e.name)
	}

	dataTop := legendTop - vg.Length(rows)*rowHeight
	if rows > 0 {
		dataTop -= bandGap * em
	}
	axes := draw.Crop(c, left, 0, 0, dataTop-c.Max.Y)
	p.Draw(axes)
	if yLabel != "" {
		sty := yLabelStyle
		sty.Rotation += math.Pi / 2
		x := c.Min.X + yLabelStyle.Height(yLabel) - yLabelStyle.FontExtents().Descent
		area := p.DataCanvas(axes)
		c.FillText(sty, vg.Point{X: x, Y: area.Center().Y}, yLabel)
	}
}

// charWidth is a generous estimate of a character's width, in ems: the
// plot names its font (Liberation Serif), but a viewer that lacks it
// draws the text in another, DejaVu Serif say, which is wider.
const charWidth = 0.6

// textWidth is the larger of the text's width in the plot's font and
// charWidth per character, so that columns laid out by it stay apart in
// whatever font the text is drawn.
func textWidth(sty text.Style, s string) vg.Length {
	return max(sty.Width(s), vg.Length(utf8.RuneCountInString(s))*charWidth*sty.Font.Size)
}

// legendRows is how many rows the legend's n entries take: as many
// columns of the widest entry's width, gap between, as fit in the width
// (at least one, whatever the width), the entries spread evenly over
// them. Filled top to bottom, the columns then even out by themselves:
// the last is not much shorter than the others.
func legendRows(n int, widest, gap, width float64) int {
	if n == 0 {
		return 0
	}
	cols := max(1, min(n, int((width+gap)/(widest+gap))))
	return (n + cols - 1) / cols
}
