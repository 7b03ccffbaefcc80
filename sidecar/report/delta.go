package report

import (
	"encoding/binary"

	"github.com/HdrHistogram/hdrhistogram-go"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
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

// delta returns the values current recorded since base, as the report
// carries them (report.proto's Histogram: current's geometry and its
// populated buckets), and their number; nil and 0 when the interval
// recorded no value. The histograms are cumulative, so the difference is
// what the interval recorded. When base is nil (the first report of a
// policy), has another geometry, or holds more in some bucket than current
// does (the histogram was reset or replaced), all of current is the delta:
// a delta is never negative.
func delta(base *baseline, current *hdrhistogram.Snapshot) (*xdsv1.Histogram, int64) {
	if !continues(base, current) {
		base = nil
	}
	var buf []byte
	var total int64
	last, next := -1, 0
	for i, c := range current.Counts {
		if base != nil && next < len(base.index) && int(base.index[next]) == i {
			c -= base.count[next]
			next++
		}
		if c <= 0 {
			continue
		}
		if buf == nil {
			// Most buckets take 2 bytes: the distance from the last one, a
			// small count.
			buf = make([]byte, 0, 256)
		}
		buf = binary.AppendUvarint(buf, uint64(i-last))
		buf = binary.AppendUvarint(buf, uint64(c))
		total += c
		last = i
	}
	if total == 0 {
		return nil, 0
	}
	return &xdsv1.Histogram{
		LowestTrackableValue:  current.LowestTrackableValue,
		HighestTrackableValue: current.HighestTrackableValue,
		SignificantDigits:     uint32(current.SignificantFigures),
		Buckets:               buf,
	}, total
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
