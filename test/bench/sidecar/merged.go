package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// configSlug and setupSlug name the files of a configuration and a setup.
func configSlug(c config) string {
	return strings.NewReplacer(" ", "", ",", "", "/", "per", "(", "", ")", "").Replace(c.name)
}

func setupSlug(s setup) string {
	return strings.NewReplacer(" ", "-", "(", "", ")", "", "/", "-").Replace(s.name)
}

// mergeRounds is one setup's distribution over all its rounds: corrected
// (from the intended send time) or uncorrected (from the actual send).
func mergeRounds(runs []run, corrected bool) *hdrhistogram.Histogram {
	merged := hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3) // loadgen's range, microseconds
	for _, r := range runs {
		d := r.summary.Uncorrected
		if corrected {
			d = r.summary.Corrected
		}
		merged.Merge(hdrhistogram.Import(d.Histogram))
	}
	return merged
}

// writeMerged writes each setup's merged distributions in HdrHistogram's
// plotter format: <configuration>.<setup>.corrected.hgrm and .uncorrected.hgrm.
func writeMerged(dir string, c config, setups []setup, results [][]run) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i, s := range setups {
		for _, corrected := range []bool{true, false} {
			kind := map[bool]string{true: "corrected", false: "uncorrected"}[corrected]
			path := filepath.Join(dir, fmt.Sprintf("%s.%s.%s.hgrm", configSlug(c), setupSlug(s), kind))
			if err := writeHgrm(path, mergeRounds(results[i], corrected)); err != nil {
				return fmt.Errorf("writing %s: %w", path, err)
			}
		}
	}
	return nil
}

func writeHgrm(path string, h *hdrhistogram.Histogram) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := h.PercentilesPrint(f, 5, 1); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
