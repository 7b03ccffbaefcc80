package main

import (
	"errors"
	"fmt"

	"github.com/weighstation/weighstation/loadgen"
	"github.com/weighstation/weighstation/loadgen/latencyplot"
)

// checkPlotFlag refuses a -plot that could not be written: a format other
// than SVG or PNG, or respond mode, which measures nothing.
func checkPlotFlag(path, mode string) error {
	if path == "" {
		return nil
	}
	if _, err := latencyplot.FormatOf(path); err != nil {
		return fmt.Errorf("-plot %w", err)
	}
	if mode == "respond" {
		return errors.New("-plot: respond mode measures nothing to plot")
	}
	return nil
}

// plotBench draws the run's corrected distribution (response time, from
// each message's intended send time) over its uncorrected one (service
// time, from the actual send): the gap between them is what coordinated
// omission would have hidden.
func plotBench(path string, res *loadgen.Result) error {
	c := res.Config
	title := fmt.Sprintf("weighstation bench: %s, %d B at %g/s for %s over %d connection(s)\nsent %d, received %d, failed %d",
		c.Mode, c.Size, c.Rate, c.Duration, c.Connections, res.Sent, res.Received, res.Failed)
	return latencyplot.WriteFile(path, title, []latencyplot.Series{
		{Name: "corrected: response time, from the intended send", Histogram: res.Corrected},
		{Name: "uncorrected: service time, from the actual send", Histogram: res.Uncorrected},
	})
}
