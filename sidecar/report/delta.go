package report

import (
	"fmt"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// baseline is a cumulative histogram as of the previous report, which the
// next report's delta is taken from. It is kept sparse: a distribution
// fills a few hundred of its ~17,000 buckets, and the sidecar keeps one
// baseline per distribution of every policy (a dense copy would double the
// recorders' 136 KiB each).
type baseline struct {
	lowest, highest, digits int64
	buckets                 int     // the dense histogram's number of counts
	index                   []int32 // the buckets that hold values
	count                   []int64 // and how many
}

func baselineOf(s *hdrhistogram.Snapshot) *baseline {
	b := &baseline{lowest: s.LowestTrackableValue, highest: s.HighestTrackableValue, digits: s.SignificantFigures, buckets: len(s.Counts)}
	for i, c := range s.Counts {
		if c != 0 {
			b.index = append(b.index, int32(i))
			b.count = append(b.count, c)
		}
	}
	return b
}

// delta returns the values current recorded since base, bucket by bucket,
// as a snapshot of current's geometry, and their number. The histograms are
// cumulative, so the difference is what the interval recorded. When base
// is nil (the first report of a policy), has another geometry, or holds
// more in some bucket than current does (the histogram was reset or
// replaced), all of current is the delta: a delta is never negative.
func delta(base *baseline, current *hdrhistogram.Snapshot) (*hdrhistogram.Snapshot, int64) {
	d := &hdrhistogram.Snapshot{
		LowestTrackableValue:           current.LowestTrackableValue,
		HighestTrackableValue:          current.HighestTrackableValue,
		SignificantFigures:             current.SignificantFigures,
		IntegerToDoubleConversionRatio: current.IntegerToDoubleConversionRatio,
		Counts:                         make([]int64, len(current.Counts)),
	}
	var total int64
	for i, c := range current.Counts {
		d.Counts[i] = c
		total += c
	}
	if continues(base, current) {
		for k, i := range base.index {
			d.Counts[i] -= base.count[k]
			total -= base.count[k]
		}
	}
	return d, total
}

// continues reports whether current can be base plus what was recorded
// since: the same geometry, and no bucket that went down.
func continues(base *baseline, current *hdrhistogram.Snapshot) bool {
	if base == nil ||
		base.lowest != current.LowestTrackableValue ||
		base.highest != current.HighestTrackableValue ||
		base.digits != current.SignificantFigures ||
		base.buckets != len(current.Counts) {
		return false
	}
	for k, i := range base.index {
		if current.Counts[i] < base.count[k] {
			return false
		}
	}
	return true
}

// encodeDelta is the report's form of delta(base, current): HdrHistogram's
// compressed V2 encoding (base64 text, as hdrhistogram.Decode reads it),
// or nothing when the interval recorded no value.
func encodeDelta(base *baseline, current *hdrhistogram.Snapshot) ([]byte, error) {
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
