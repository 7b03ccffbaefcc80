package report

import (
	"fmt"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// delta returns the values current recorded since base, bucket by bucket,
// as a snapshot of current's geometry, and their number. The histograms are
// cumulative, so the difference is what the interval recorded. When base
// is nil (the first report of a policy), has another geometry, or holds
// more in some bucket than current does (the histogram was reset or
// replaced), all of current is the delta: a delta is never negative.
func delta(base, current *hdrhistogram.Snapshot) (*hdrhistogram.Snapshot, int64) {
	d := &hdrhistogram.Snapshot{
		LowestTrackableValue:           current.LowestTrackableValue,
		HighestTrackableValue:          current.HighestTrackableValue,
		SignificantFigures:             current.SignificantFigures,
		IntegerToDoubleConversionRatio: current.IntegerToDoubleConversionRatio,
		Counts:                         make([]int64, len(current.Counts)),
	}
	var total int64
	if continues(base, current) {
		for i, c := range current.Counts {
			d.Counts[i] = c - base.Counts[i]
			total += d.Counts[i]
		}
		return d, total
	}
	for i, c := range current.Counts {
		d.Counts[i] = c
		total += c
	}
	return d, total
}

// continues reports whether current can be base plus what was recorded
// since: the same geometry, and no bucket that went down.
func continues(base, current *hdrhistogram.Snapshot) bool {
	if base == nil ||
		base.LowestTrackableValue != current.LowestTrackableValue ||
		base.HighestTrackableValue != current.HighestTrackableValue ||
		base.SignificantFigures != current.SignificantFigures ||
		len(base.Counts) != len(current.Counts) {
		return false
	}
	for i, c := range current.Counts {
		if c < base.Counts[i] {
			return false
		}
	}
	return true
}

// encodeDelta is the report's form of delta(base, current): HdrHistogram's
// compressed V2 encoding (base64 text, as hdrhistogram.Decode reads it),
// or nothing when the interval recorded no value.
func encodeDelta(base, current *hdrhistogram.Snapshot) ([]byte, error) {
	d, total := delta(base, current)
	if total == 0 {
		return nil, nil
	}
	b, err := hdrhistogram.Import(d).Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	if err != nil {
		return nil, fmt.Errorf("encoding a histogram: %w", err)
	}
	return b, nil
}
