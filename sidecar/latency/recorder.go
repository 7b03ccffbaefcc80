// Package latency records the sidecar's latency distributions with
// HdrHistogram, as response times, never as averages.
package latency

import (
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The recorded range, in microseconds: 1 µs to 60 s at 3 significant
// digits (about 136 KiB per histogram). Values outside it are clamped to
// its edge and counted, never dropped silently; negative values (a
// cross-node clock skew) are clamped to the minimum and counted apart.
const (
	MinMicros         = 1
	MaxMicros         = 60_000_000
	SignificantDigits = 3
)

// Recorder is one distribution. Recording takes no lock: a value is one
// atomic add to its bucket's count (HdrHistogram's buckets, counted apart),
// so the connections' writers that record into one policy's recorder never
// wait for each other or for a reader; Snapshot merges the counts into a
// histogram when it is read.
type Recorder struct {
	counts   []atomic.Int64 // by HdrHistogram's index of the value (countsIndex)
	negative atomic.Uint64
	tooLarge atomic.Uint64
}

// The histogram's geometry, as hdrhistogram.New computes it for MinMicros
// (unit magnitude 0) and SignificantDigits: sub-buckets of 2^11 values,
// half of which each bucket past the first adds.
const (
	subBucketHalfCountMagnitude = 10 // log2(2 * 10^SignificantDigits) rounded up, minus 1
	subBucketMask               = 1<<(subBucketHalfCountMagnitude+1) - 1
)

// countsLen is the number of buckets of the range.
var countsLen = len(hdrhistogram.New(MinMicros, MaxMicros, SignificantDigits).Export().Counts)

// countsIndex is the index of v (MinMicros to MaxMicros) in the counts of
// hdrhistogram.New(MinMicros, MaxMicros, SignificantDigits): its
// countsIndexFor, which TestCountsIndexIsHdrHistogramsChecks.
func countsIndex(v int64) int {
	bucket := 64 - bits.LeadingZeros64(uint64(v|subBucketMask)) - (subBucketHalfCountMagnitude + 1)
	subBucket := int(v >> uint(bucket))
	return (bucket+1)<<subBucketHalfCountMagnitude + subBucket - 1<<subBucketHalfCountMagnitude
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder {
	return &Recorder{counts: make([]atomic.Int64, countsLen)}
}

// Record adds one observation, clamping it into the range.
func (r *Recorder) Record(d time.Duration) {
	us := d.Microseconds() // truncated toward zero: a negative d is tested itself
	switch {
	case d < 0:
		r.negative.Add(1)
		us = MinMicros
	case us < MinMicros:
		us = MinMicros // sub-microsecond: the range's floor, not an error
	case us > MaxMicros:
		r.tooLarge.Add(1)
		us = MaxMicros
	}
	r.counts[countsIndex(us)].Add(1)
}

// Snapshot is a copy of a distribution and its out-of-range counts.
type Snapshot struct {
	Histogram *hdrhistogram.Histogram
	Negative  uint64
	TooLarge  uint64
}

// Snapshot copies the distribution. Values recorded while it copies are
// in it or not, each whole.
func (r *Recorder) Snapshot() Snapshot {
	counts := make([]int64, len(r.counts))
	for i := range r.counts {
		counts[i] = r.counts[i].Load()
	}
	h := hdrhistogram.Import(&hdrhistogram.Snapshot{LowestTrackableValue: MinMicros, HighestTrackableValue: MaxMicros,
		SignificantFigures: SignificantDigits, Counts: counts})
	return Snapshot{Histogram: h, Negative: r.negative.Load(), TooLarge: r.tooLarge.Load()}
}
