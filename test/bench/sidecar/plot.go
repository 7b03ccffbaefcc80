package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/weighstation/weighstation/loadgen/latencyplot"
)

// writePlot draws one configuration's corrected distributions, each
// setup's merged over its rounds, overlaid in one plot:
// <configuration>.corrected.svg in dir. The direct-again row stays in as
// the measure of the machine's noise: a sidecar line that sits between
// the two direct lines is not distinguishable from direct.
func writePlot(dir string, c config, setups []setup, results [][]run, duration time.Duration) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	series := make([]latencyplot.Series, len(setups))
	for i, s := range setups {
		series[i] = latencyplot.Series{Name: s.name, Histogram: mergeRounds(results[i], true)}
	}
	title := fmt.Sprintf("bench-sidecar: %s (%d B payloads, %d connection(s)), %d round(s) × %s merged\ncorrected latency, from each message's intended send time",
		c.name, c.size, c.connections, len(results[0]), duration)
	path := filepath.Join(dir, configSlug(c)+".corrected.svg")
	if err := latencyplot.WriteFile(path, title, series); err != nil {
		return "", err
	}
	return path, nil
}
