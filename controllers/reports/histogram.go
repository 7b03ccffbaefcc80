package reports

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
)

// The geometry the sidecars record at (sidecar/latency): microseconds,
// 1 µs to 60 s, 3 significant digits. A histogram of another range is
// refused; one of another precision from 2 to 5 digits is read (its
// buckets nest in the stored ones), for a future sidecar's sake.
const (
	wireLowest    = 1
	wireHighest   = 60_000_000
	wireDigits    = 3
	minWireDigits = 2
	maxWireDigits = 5
)

// storedDigits is the precision the operator stores and merges at: 2
// significant digits, so a value is known within 1/128 of itself (the
// buckets of [2^k, 2^(k+1)) are 2^(k-7) wide from 256 up; exact below).
const storedDigits = 2

// The 2-digit geometry's index math, as HdrHistogram computes it for
// lowest 1 (unit magnitude 0) and 2 digits (sub-bucket count 256, half
// count 128).
const (
	subBucketHalfCountMagnitude = 7
	subBucketHalfCount          = 1 << subBucketHalfCountMagnitude
	subBucketMask               = 2*subBucketHalfCount - 1
)

// storedBuckets is the number of buckets of the stored geometry, 0 to the
// top of 60,000,000's bucket: the most a stored histogram populates. A
// value above that bucket (HdrHistogram's counts array reaches 2^26 − 1)
// is refused.
var storedBuckets = bucketIndex(wireHighest) + 1

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

// lowestOf and highestOf are the lowest and the highest value of the
// stored bucket i (HdrHistogram's lowestEquivalentValue and
// highestEquivalentValue of its values): a summarized value is the
// highest of its bucket.
func lowestOf(i int) int64 {
	if i < 2*subBucketHalfCount {
		return int64(i)
	}
	bucket := i>>subBucketHalfCountMagnitude - 1
	return int64(i&(subBucketHalfCount-1)+subBucketHalfCount) << uint(bucket)
}

func highestOf(i int) int64 {
	if i < 2*subBucketHalfCount {
		return int64(i)
	}
	bucket := i>>subBucketHalfCountMagnitude - 1
	return lowestOf(i) + 1<<uint(bucket) - 1
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

// sparse is a stored histogram: its populated buckets of the stored
// geometry, ascending, as pairs of unsigned varints (the index's distance
// from the previous bucket's, or from -1 for the first; the count). A
// 1,000-value distribution over two decades takes about 2 bytes a bucket,
// where HdrHistogram's packed form takes 5 and more; adding it up is a
// walk over its bytes. The zero value holds no value.
type sparse struct {
	data  []byte
	total int64
}

func (s sparse) empty() bool { return s.total == 0 }

func (s sparse) bytes() int64 {
	if s.data == nil {
		return 0
	}
	return int64(cap(s.data))
}

// each calls f with every bucket's index and count, ascending.
func (s sparse) each(f func(i int, count int64)) {
	i := -1
	for b := s.data; len(b) > 0; {
		d, n := binary.Uvarint(b)
		c, m := binary.Uvarint(b[n:])
		b = b[n+m:]
		i += int(d)
		f(i, int64(c))
	}
}

// sparseBuilder writes a sparse from buckets given in ascending order of
// their stored index; a bucket given again (the wire's finer buckets
// inside one stored bucket) adds to it.
type sparseBuilder struct {
	buf         []byte
	last, index int   // the last bucket written, the one being summed
	count       int64 // its count so far; 0: none
	total       int64
}

var builderPool = sync.Pool{New: func() any { return &sparseBuilder{buf: make([]byte, 0, 4096)} }}

func newSparseBuilder() *sparseBuilder {
	b := builderPool.Get().(*sparseBuilder)
	b.buf, b.last, b.index, b.count, b.total = b.buf[:0], -1, -1, 0, 0
	return b
}

// add adds count values in stored bucket i, at or after the last one.
func (b *sparseBuilder) add(i int, count int64) {
	if i != b.index {
		b.flush()
		b.index = i
	}
	b.count = saturatingAdd(b.count, count)
	b.total = saturatingAdd(b.total, count)
}

func (b *sparseBuilder) flush() {
	if b.count > 0 {
		b.buf = binary.AppendUvarint(b.buf, uint64(b.index-b.last))
		b.buf = binary.AppendUvarint(b.buf, uint64(b.count))
		b.last = b.index
	}
	b.count = 0
}

// done returns the sparse, its data exactly as long as it needs, and
// gives the builder back.
func (b *sparseBuilder) done() sparse {
	b.flush()
	var out sparse
	if b.total > 0 {
		out = sparse{data: append(make([]byte, 0, len(b.buf)), b.buf...), total: b.total}
	}
	builderPool.Put(b)
	return out
}

// merge returns the sum of two sparse histograms.
func merge(a, b sparse) sparse {
	if a.empty() {
		return b
	}
	if b.empty() {
		return a
	}
	out := newSparseBuilder()
	ia, ca, ra := next(-1, a.data)
	ib, cb, rb := next(-1, b.data)
	for ia >= 0 || ib >= 0 {
		switch {
		case ib < 0 || (ia >= 0 && ia < ib):
			out.add(ia, ca)
			ia, ca, ra = next(ia, ra)
		case ia < 0 || ib < ia:
			out.add(ib, cb)
			ib, cb, rb = next(ib, rb)
		default:
			out.add(ia, saturatingAdd(ca, cb))
			ia, ca, ra = next(ia, ra)
			ib, cb, rb = next(ib, rb)
		}
	}
	return out.done()
}

// next reads the bucket after the one at index i from b: its index (-1
// when b is read through), its count and what is left of b.
func next(i int, b []byte) (int, int64, []byte) {
	if len(b) == 0 {
		return -1, 0, nil
	}
	d, n := binary.Uvarint(b)
	c, m := binary.Uvarint(b[n:])
	return i + int(d), int64(c), b[n+m:]
}

// wireGeometry is HdrHistogram's layout of the counts array for lowest 1
// and some significant digits up to wireHighest, and how its buckets map
// to the stored ones.
type wireGeometry struct {
	halfCountMagnitude uint
	countsLen          int
	// stored is, for each sub-bucket index s of the wire's bucket 0 (and
	// of the upper half of every other), the stored bucket of the value s:
	// the wire's index i, in its bucket b ≥ 1 with sub-bucket s, holds
	// the values from s·2^b, whose stored bucket is stored[s] + 128·b
	// (HDR buckets are power-of-two aligned). Made on first use.
	stored     []uint32
	storedOnce *sync.Once
}

var wireGeometries = func() (g [maxWireDigits + 1]wireGeometry) {
	for d := minWireDigits; d <= maxWireDigits; d++ {
		// HdrHistogram's construction, for lowest 1 (unit magnitude 0).
		largest := int64(2)
		for range d {
			largest *= 10
		}
		subBucketCountMagnitude := bits.Len64(uint64(largest - 1))
		subBucketCount := int64(1) << subBucketCountMagnitude
		buckets, smallestUntrackable := 1, subBucketCount
		for smallestUntrackable <= wireHighest {
			smallestUntrackable <<= 1
			buckets++
		}
		g[d] = wireGeometry{halfCountMagnitude: uint(subBucketCountMagnitude - 1), countsLen: (buckets + 1) * int(subBucketCount/2), storedOnce: new(sync.Once)}
	}
	return g
}()

// storedTable returns g.stored, making it.
func (g *wireGeometry) storedTable() []uint32 {
	g.storedOnce.Do(func() {
		t := make([]uint32, 2<<g.halfCountMagnitude)
		for s := range t {
			t[s] = uint32(bucketIndex(int64(s)))
		}
		g.stored = t
	})
	return g.stored
}

// storedOf is the stored bucket of the wire's bucket i, i < countsLen;
// table is g.storedTable().
func (g *wireGeometry) storedOf(table []uint32, i int) int {
	if half := 1 << g.halfCountMagnitude; i >= 2*half {
		return int(table[i&(half-1)+half]) + (i>>g.halfCountMagnitude-1)<<subBucketHalfCountMagnitude
	}
	return int(table[i])
}

// lowestOf is the lowest value of the wire's bucket i.
func (g *wireGeometry) lowestOf(i int) int64 {
	half := 1 << g.halfCountMagnitude
	bucket := i>>g.halfCountMagnitude - 1
	sub := i&(half-1) + half
	if bucket < 0 {
		sub -= half
		bucket = 0
	}
	return int64(sub) << uint(bucket)
}

// readHistogram reads one of a report's histograms into the stored
// geometry: the sparse bucket counts when present, else the compressed
// V2 encoding of a sidecar before them. Neither: no value.
func readHistogram(buckets *xdsv1.Histogram, encoded []byte) (sparse, error) {
	if buckets != nil {
		return readBuckets(buckets)
	}
	return decodeHistogram(encoded)
}

// readBuckets re-buckets a report's bucket counts at 2 digits. HDR
// buckets are power-of-two aligned, so each bucket of 2 or more digits
// lies inside one 2-digit bucket: its lowest value's 2-digit bucket takes
// its count, which gives exactly the histogram that recording the values
// at 2 digits would have given. Two varints, a table lookup and an add per
// bucket; nothing is decoded, nothing allocated but the result.
func readBuckets(h *xdsv1.Histogram) (sparse, error) {
	lo, hi, d := h.GetLowestTrackableValue(), h.GetHighestTrackableValue(), h.GetSignificantDigits()
	if lo != wireLowest || hi != wireHighest || d < minWireDigits || d > maxWireDigits {
		return sparse{}, fmt.Errorf("geometry is lowest %d, highest %d, %d digits; want lowest %d, highest %d, %d to %d digits (µs)", lo, hi, d, wireLowest, wireHighest, minWireDigits, maxWireDigits)
	}
	in := h.GetBuckets()
	if len(in) == 0 {
		return sparse{}, nil
	}
	g := &wireGeometries[d]
	table := g.storedTable()
	b := newSparseBuilder()
	buf := b.buf[:0]
	var total int64
	var err error
	i, k := -1, 0       // the wire's index, and the bucket's number
	last, cur := -1, -1 // the last stored bucket written, the one being summed
	var curCount int64
	for ; len(in) > 0; k++ {
		// Most distances and counts take one byte.
		var delta, c uint64
		if in[0] < 0x80 {
			delta, in = uint64(in[0]), in[1:]
		} else if delta, in = readUvarint(in); in == nil {
			err = errMalformedVarint
			break
		}
		if len(in) > 0 && in[0] < 0x80 {
			c, in = uint64(in[0]), in[1:]
		} else if c, in = readUvarint(in); in == nil {
			err = errMalformedVarint
			break
		}
		if delta == 0 {
			err = errors.New("index distance 0 (the buckets must ascend)")
			break
		}
		if delta >= uint64(g.countsLen) || i+int(delta) >= g.countsLen {
			err = fmt.Errorf("index %d is beyond the highest trackable value", uint64(i)+delta)
			break
		}
		i += int(delta)
		stored := g.storedOf(table, i)
		if stored >= storedBuckets {
			err = fmt.Errorf("index %d is beyond the highest trackable value", i)
			break
		}
		if c == 0 || c > 1<<62 {
			err = fmt.Errorf("count %d (must be 1 to 2^62)", c)
			break
		}
		if stored != cur {
			if curCount > 0 {
				buf = binary.AppendUvarint(buf, uint64(cur-last))
				buf = binary.AppendUvarint(buf, uint64(curCount))
				last = cur
			}
			cur, curCount = stored, 0
		}
		// At most 2^62 each, and len(in)/2 of them: no overflow before
		// 2 GiB of buckets; saturating all the same.
		curCount = saturatingAdd(curCount, int64(c))
		total = saturatingAdd(total, int64(c))
	}
	if err != nil {
		b.buf = buf
		builderPool.Put(b)
		return sparse{}, fmt.Errorf("bucket %d: %w", k, err)
	}
	buf = binary.AppendUvarint(buf, uint64(cur-last))
	buf = binary.AppendUvarint(buf, uint64(curCount))
	out := sparse{data: append(make([]byte, 0, len(buf)), buf...), total: total}
	b.buf = buf
	builderPool.Put(b)
	return out, nil
}

var errMalformedVarint = errors.New("a malformed varint")

// readUvarint reads an unsigned varint from the start of b and returns it
// with the rest of b, or nil for the rest when b holds none.
func readUvarint(b []byte) (uint64, []byte) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil
	}
	return v, b[n:]
}

// decodeHistogram decodes a histogram in HdrHistogram's compressed V2
// encoding (as sidecars before the sparse bucket counts sent them) and
// re-records it at 2 digits. Empty is no value.
func decodeHistogram(encoded []byte) (sparse, error) {
	if len(encoded) == 0 {
		return sparse{}, nil
	}
	wire, err := hdr.DecodePacked(encoded)
	if err != nil {
		return sparse{}, fmt.Errorf("decoding: %w", err)
	}
	if lo, hi, d := wire.LowestTrackableValue(), wire.HighestTrackableValue(), wire.SignificantFigures(); lo != wireLowest || hi != wireHighest || d != wireDigits {
		return sparse{}, fmt.Errorf("geometry is lowest %d, highest %d, %d digits; want lowest %d, highest %d, %d digits (µs)", lo, hi, d, wireLowest, wireHighest, wireDigits)
	}
	out := newSparseBuilder()
	wire.ForEachBucket(func(value, count int64) bool {
		i := bucketIndex(value)
		if i >= storedBuckets {
			err = fmt.Errorf("value %d is beyond the highest trackable value", value)
			return false
		}
		out.add(i, count)
		return true
	})
	if err != nil {
		builderPool.Put(out)
		return sparse{}, err
	}
	return out.done(), nil
}
