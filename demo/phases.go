package main

import (
	"fmt"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/weighstation/weighstation/demo/demoapi"
)

// phase is one of billing's latency phases, its histogram imported.
type phase struct {
	demoapi.Phase
	h *hdrhistogram.Histogram
}

// phases reads billing's latency phases, without the warm-up.
func (d *demo) phases() ([]phase, error) {
	var raw []demoapi.Phase
	if err := d.apps[billing].get(demoapi.PathPhases, &raw); err != nil {
		return nil, err
	}
	var out []phase
	for _, p := range raw {
		if p.Name == "warm-up" || p.Histogram == nil {
			continue
		}
		out = append(out, phase{Phase: p, h: hdrhistogram.Import(p.Histogram)})
	}
	return out, nil
}

// showPhases prints billing's latency so far, phase by phase: the
// application's own measurement, from each order's intended send time.
func (d *demo) showPhases() error {
	ps, err := d.phases()
	if err != nil {
		return err
	}
	text := fmt.Sprintf("%-28s %8s %9s %9s %9s %9s", "phase", "orders", "p50", "p99", "p99.9", "max")
	for _, p := range ps {
		text += fmt.Sprintf("\n%-28s %8d %9s %9s %9s %9s", p.Name, p.h.TotalCount(),
			micros(p.h.ValueAtQuantile(50)), micros(p.h.ValueAtQuantile(99)), micros(p.h.ValueAtQuantile(99.9)), micros(p.h.Max()))
	}
	d.p.block("billing's own latency (from each order's intended send time to its arrival in billing):", text)
	return nil
}

// micros prints a latency in microseconds as a duration.
func micros(us int64) string {
	return (time.Duration(us) * time.Microsecond).Round(10 * time.Microsecond).String()
}
