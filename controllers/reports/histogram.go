package reports

import (
	"fmt"
	"math/bits"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// The geometry the sidecars record at (sidecar/latency): microseconds,
// 1 µs to 60 s, 3 significant digits. A histogram of another geometry is
// refused: its buckets would not nest in the stored ones.
const (
	wireLowest  = 1
	wireHighest = 60_000_000
	wireDigits  = 3
)

// storedDigits is the precision the operator stores and merges at: 2
// significant digits, so a value is known within 1/128 of itself (the
// buckets of [2^k, 2^(k+1)) are 2^(k-7) wide from 256 up; exact below).
const storedDigits = 2

// The 2-digit geometry's index math, as HdrHistogram computes it for
// lowest 1 (unit magnitude 0) and 2 digits (sub-bucket count 256, half
// count 128): used to tell how many buckets apart two values are.
const (
	subBucketHalfCountMagnitude = 7
	subBucketHalfCount          = 1 << subBucketHalfCountMagnitude
	subBucketMask               = 2*subBucketHalfCount - 1
)

// storedBuckets is the number of buckets of the stored geometry, 0 to the
// top of 60,000,000's bucket: the most a stored histogram populates.
var storedBuckets = bucketIndex(wireHighest) + 1

// newStored returns an empty histogram of the stored geometry.
func newStored() *hdr.PackedHistogram {
	return hdr.NewPacked(wireLowest, wireHighest, storedDigits)
}

// decodeHistogram decodes one of a report's histograms (HdrHistogram's
// compressed V2 encoding) and re-records it at 2 digits. Empty is no
// value: nil.
func decodeHistogram(encoded []byte) (*hdr.PackedHistogram, error) {
	if len(encoded) == 0 {
		return nil, nil
	}
	wire, err := hdr.DecodePacked(encoded)
	if err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	if lo, hi, d := wire.LowestTrackableValue(), wire.HighestTrackableValue(), wire.SignificantFigures(); lo != wireLowest || hi != wireHighest || d != wireDigits {
		return nil, fmt.Errorf("geometry is lowest %d, highest %d, %d digits; want lowest %d, highest %d, %d digits (µs)", lo, hi, d, wireLowest, wireHighest, wireDigits)
	}
	if wire.TotalCount() == 0 {
		return nil, nil
	}
	return toStored(wire)
}

// toStored re-records a 3-digit histogram at 2 digits. Each 3-digit
// bucket lies inside one 2-digit bucket, so recording its lowest value
// with its count is exact. The buckets come in ascending order, so every
// record appends or hits the last bucket.
func toStored(wire *hdr.PackedHistogram) (*hdr.PackedHistogram, error) {
	stored := newStored()
	var err error
	wire.ForEachBucket(func(value, count int64) bool {
		err = stored.RecordValues(value, count)
		return err == nil
	})
	if err != nil {
		return nil, fmt.Errorf("re-recording at %d digits: %w", storedDigits, err)
	}
	// Recording grew the arrays by doubling: give back the slack, and the
	// count width becomes the narrowest that holds the largest count.
	stored.Compact()
	return stored, nil
}

// bucketIndex is the index of v's bucket in the stored geometry
// (HdrHistogram's countsIndexFor for lowest 1 and 2 digits).
func bucketIndex(v int64) int {
	if v < 0 {
		v = 0
	}
	pow2Ceiling := 64 - bits.LeadingZeros64(uint64(v)|subBucketMask)
	bucket := pow2Ceiling - (subBucketHalfCountMagnitude + 1)
	subBucket := int(v >> uint(bucket))
	return (bucket+1)<<subBucketHalfCountMagnitude + subBucket - subBucketHalfCount
}

// MovedMoreThanOneBucket reports whether two latencies are more than one
// bucket apart in the stored 2-digit geometry (buckets are 1/128 to 1/256
// of their value wide): the status writer's test of a material change.
// Values are compared in whole microseconds, clamped to 0..60 s.
func MovedMoreThanOneBucket(a, b time.Duration) bool {
	ia, ib := bucketIndex(clampMicros(a)), bucketIndex(clampMicros(b))
	return ia-ib > 1 || ib-ia > 1
}

func clampMicros(d time.Duration) int64 {
	us := d.Microseconds()
	if us < 0 {
		return 0
	}
	return min(us, wireHighest)
}

func micros(v int64) time.Duration { return time.Duration(v) * time.Microsecond }

// Latency is a distribution's summary: percentiles and max are the
// highest value of their 2-digit bucket (within 1/128 above the truth).
type Latency struct {
	P50, P90, P99, P999, P9999 time.Duration
	Max                        time.Duration
	// Count is the number of values; 0: no value, and the rest is zero.
	Count int64
	// Bands are the ranges the percentiles and max could have taken from
	// sampling alone (noise.go), for the status writer's test of a
	// material change; not written to status.
	Bands Bands
}

var summaryPercentiles = []float64{50, 90, 99, 99.9, 99.99}

// mergeInto adds src to *dst, creating *dst on first use. Every stored
// histogram has the same geometry, so nothing is ever dropped.
func mergeInto(dst **hdr.PackedHistogram, src *hdr.PackedHistogram) {
	if src == nil || src.TotalCount() == 0 {
		return
	}
	if *dst == nil {
		*dst = src.Clone()
		return
	}
	(*dst).Merge(src)
}

func histogramBytes(h *hdr.PackedHistogram) int64 {
	if h == nil {
		return 0
	}
	return int64(h.GetMemorySize())
}
