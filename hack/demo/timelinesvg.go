package main

import (
	"fmt"
	"html"
	"strings"
	"time"
)

// timelineSVG draws billing's phases as bands and the events as numbered
// marks on one time axis (seconds since the demo started), for the
// report; the table under it gives each mark's words.
func (d *demo) timelineSVG(ps []phase) string {
	if len(ps) == 0 {
		return ""
	}
	const width, left, right, band, top = 960.0, 20.0, 20.0, 40.0, 30.0
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
	x := func(t time.Time) float64 { return left + (width-left-right)*t.Sub(from).Seconds()/span }
	colors := []string{"#cfe8cf", "#f6c9c9", "#f9e6b3", "#d4d4f2", "#cfe0ef"}
	var b strings.Builder
	height := top + band + 30 + 18*float64(len(d.events))
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`, width, height)
	for i, p := range ps {
		x0, x1 := x(p.Start), x(p.End)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`, x0, top, x1-x0, band, colors[i%len(colors)])
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`, x0+3, top-6, html.EscapeString(p.Name))
	}
	for i, e := range d.events {
		ex := x(e.At)
		y := top + band + 18*float64(i+1)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`, ex, top, ex, y-10)
		anchor := "start"
		if ex > width/2 {
			anchor = "end"
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="%s">%s %s</text>`, ex, y, anchor, elapsed(d.p.since(e.At)), html.EscapeString(e.What))
	}
	b.WriteString(`</svg>`)
	return b.String()
}
