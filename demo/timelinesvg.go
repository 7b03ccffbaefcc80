package main

import (
	"fmt"
	"html"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// The timeline's geometry, in pixels: its width and margins, the phases'
// band, the font, and the rows of the phases' names above the band and of
// the events' below it.
const (
	timelineWidth = 960.0
	timelineLeft  = 20.0
	timelineRight = 20.0
	timelineBand  = 40.0
	timelineFont  = 12.0
	// timelineCharWidth is a generous estimate of a character's width in ems:
	// the page names sans-serif, whose letters (DejaVu Sans', Arial's,
	// Helvetica's) average under 0.6 em.
	timelineCharWidth = 0.6
	// namePitch is how far apart the rows of the phases' names are; the
	// lowest row's baseline is nameBaseline above the band.
	namePitch    = 16.0
	nameBaseline = 6.0
	// nameGap is the least space between two names on one row.
	nameGap = 8.0
	// nameSwatch is the size of the square in a phase's colour before its
	// name, which ties a name moved up a row or two to its band; and
	// nameSwatchGap the space between them.
	nameSwatch, nameSwatchGap = 10.0, 4.0
	// eventPitch is how far apart the events' rows are, one each.
	eventPitch = 18.0
)

// timelineTextWidth estimates how wide a text is drawn in the timeline's font.
func timelineTextWidth(s string) float64 {
	return float64(utf8.RuneCountInString(s)) * timelineCharWidth * timelineFont
}

// nameSlot is where a phase's name goes: its left edge (the nameSwatch's),
// its width with the nameSwatch, and its row, 0 next to the band.
type nameSlot struct {
	x, w float64
	row  int
}

// placeNames lays the phases' names out over the band, in the order
// given (by start). Each starts just right of where its phase starts,
// or further left if it would run past right, though not past left; and
// takes the lowest row where it starts at least nameGap after the end of
// the row's last name, a new row above the others when none has room.
// So names on one row never overlap, however close the phases are.
func placeNames(starts, widths []float64, left, right float64) (slots []nameSlot, rows int) {
	var ends []float64 // the right edge of each row's last name
	for i, start := range starts {
		w := nameSwatch + nameSwatchGap + widths[i]
		x := start + 3
		if x+w > right {
			x = max(left, right-w)
		}
		row := 0
		for row < len(ends) && ends[row]+nameGap > x {
			row++
		}
		if row == len(ends) {
			ends = append(ends, math.Inf(-1))
		}
		ends[row] = x + w
		slots = append(slots, nameSlot{x: x, w: w, row: row})
	}
	return slots, len(ends)
}

// timelineSVG draws billing's phases as bands and the events as numbered
// marks on one time axis (seconds since the demo started), for the
// report; the table under it gives each mark's words. The phases' names
// go above the band, on as many rows as keep them apart (see placeNames),
// the band below the highest; each event's time and words go on a row of
// their own below the band, on a white halo, so that the marks of the
// later events, which run down past them, do not cross them out.
func (d *demo) timelineSVG(ps []phase) string {
	if len(ps) == 0 {
		return ""
	}
	from, to := ps[0].Start, ps[len(ps)-1].End
	for _, e := range d.events {
		if e.At.Before(from) {
			from = e.At
		}
	}
	span := to.Sub(from).Seconds()
	if span <= 0 {
		return ""
	}
	x := func(t time.Time) float64 {
		return timelineLeft + (timelineWidth-timelineLeft-timelineRight)*t.Sub(from).Seconds()/span
	}
	starts, widths := make([]float64, len(ps)), make([]float64, len(ps))
	for i, p := range ps {
		starts[i], widths[i] = x(p.Start), timelineTextWidth(p.Name)
	}
	slots, rows := placeNames(starts, widths, 2, timelineWidth-2)
	// The highest row's baseline where the one row's was: 24.
	top := 30 + namePitch*float64(rows-1)

	colors := []string{"#cfe8cf", "#f6c9c9", "#f9e6b3", "#d4d4f2", "#cfe0ef"}
	var b strings.Builder
	height := top + timelineBand + 30 + eventPitch*float64(len(d.events))
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="%g">`, timelineWidth, height, timelineFont)
	for i, p := range ps {
		x0, x1 := starts[i], x(p.End)
		color := colors[i%len(colors)]
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`, x0, top, x1-x0, timelineBand, color)
		s := slots[i]
		baseline := top - nameBaseline - namePitch*float64(s.row)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%g" height="%g" fill="%s" stroke="#999"/>`, s.x, baseline-nameSwatch, nameSwatch, nameSwatch, color)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`, s.x+nameSwatch+nameSwatchGap, baseline, html.EscapeString(p.Name))
	}
	y := func(i int) float64 { return top + timelineBand + eventPitch*float64(i+1) }
	for i, e := range d.events {
		ex := x(e.At)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`, ex, top, ex, y(i)-10)
	}
	for i, e := range d.events {
		ex := x(e.At)
		anchor := "start"
		if ex > timelineWidth/2 {
			anchor = "end"
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="%s" stroke="white" stroke-width="3" paint-order="stroke">%s %s</text>`,
			ex, y(i), anchor, elapsed(d.p.since(e.At)), html.EscapeString(e.What))
	}
	b.WriteString(`</svg>`)
	return b.String()
}
