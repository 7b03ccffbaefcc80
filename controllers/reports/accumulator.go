package reports

import (
	"cmp"
	"slices"
	"sync"
)

// dense is a histogram of the stored geometry as counts in blocks of 128
// buckets (block 0 and 1: the exact values 0 to 255; each further block
// one octave), each allocated when a value first lands in it: a
// distribution over three decades takes 10 of the 20 blocks, 10 KiB.
// Adding a sparse histogram is a walk over its bytes; the percentiles are
// HdrHistogram's (ValueAtPercentilesSlice), computed in one pass over the
// blocks.
//
// A Subscription's window keeps two as running sums of its slices (added
// when a report is stored, subtracted when it leaves), so that its
// summary adds nothing up; summaries of one pod sum its few slices into a
// pooled one.
type dense struct {
	blocks [denseBlocks]*[denseBlockLen]int64
	total  int64
	// allocated counts the blocks, for the memory estimate.
	allocated int
}

const (
	denseBlockLen = subBucketHalfCount
	denseBlocks   = (2560 + denseBlockLen - 1) / denseBlockLen // HdrHistogram's counts array at 2 digits up to 60 s
	// denseBlockBytes is one block's memory.
	denseBlockBytes = denseBlockLen * 8
	// denseBytes is a dense's size beside its blocks.
	denseBytes = denseBlocks*8 + 16
)

// add adds (sign 1) or subtracts (sign -1) a sparse histogram. Subtracting
// is only ever of what was added, so no count goes negative.
func (d *dense) add(s sparse, sign int64) {
	if s.empty() {
		return
	}
	i := -1
	for b := s.data; len(b) > 0; {
		// binary.Uvarint, inlined by hand for the common 1-byte case.
		var delta, count uint64
		if b[0] < 0x80 {
			delta, b = uint64(b[0]), b[1:]
		} else {
			delta, b = uvarint(b)
		}
		if b[0] < 0x80 {
			count, b = uint64(b[0]), b[1:]
		} else {
			count, b = uvarint(b)
		}
		i += int(delta)
		blk := d.blocks[i/denseBlockLen]
		if blk == nil {
			blk = new([denseBlockLen]int64)
			d.blocks[i/denseBlockLen] = blk
			d.allocated++
		}
		blk[i%denseBlockLen] += sign * int64(count)
	}
	d.total += sign * s.total
}

func uvarint(b []byte) (uint64, []byte) {
	var x uint64
	var s uint
	for i, c := range b {
		if c < 0x80 {
			return x | uint64(c)<<s, b[i+1:]
		}
		x |= uint64(c&0x7f) << s
		s += 7
	}
	return x, nil
}

// bytes is the memory d holds.
func (d *dense) bytes() int64 { return denseBytes + int64(d.allocated)*denseBlockBytes }

// reset empties d, keeping its blocks.
func (d *dense) reset() {
	if d.total == 0 {
		return
	}
	for _, blk := range d.blocks {
		if blk != nil {
			clear(blk[:])
		}
	}
	d.total = 0
}

// copyFrom makes d a copy of src, reusing d's blocks.
func (d *dense) copyFrom(src *dense) {
	d.reset()
	for i, blk := range src.blocks {
		if blk == nil {
			continue
		}
		if d.blocks[i] == nil {
			d.blocks[i] = new([denseBlockLen]int64)
			d.allocated++
		}
		*d.blocks[i] = *blk
	}
	d.total = src.total
}

// top is the index of the highest populated bucket; -1: none.
func (d *dense) top() int {
	if d.total == 0 {
		return -1
	}
	for b := denseBlocks - 1; b >= 0; b-- {
		blk := d.blocks[b]
		if blk == nil {
			continue
		}
		for j := denseBlockLen - 1; j >= 0; j-- {
			if blk[j] != 0 {
				return b*denseBlockLen + j
			}
		}
	}
	return -1
}

// percentileRank is HdrHistogram's rank of a percentile among total
// values: in [1, total].
func percentileRank(percentile float64, total int64) int64 {
	percentile = min(percentile, 100)
	rank := (percentile/100)*float64(total) + 0.5
	if !(rank >= 1) {
		return 1
	}
	if rank >= float64(total) {
		return total
	}
	return int64(rank)
}

// valuesAt writes into out, for each percentile, HdrHistogram's value at
// it (ValueAtPercentilesSlice): the highest value of the bucket where the
// running count reaches the percentile's rank; the lowest for a
// percentile of 0 or less. An empty d gives zeros.
func (d *dense) valuesAt(percentiles []float64, out []int64) {
	if d.total == 0 {
		clear(out)
		return
	}
	var targetsBuf [24]int64
	var orderBuf [24]int
	targets, order := targetsBuf[:0], orderBuf[:0]
	for k, p := range percentiles {
		targets = append(targets, percentileRank(p, d.total))
		order = append(order, k)
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(targets[a], targets[b]) })
	pos := 0
	var running int64
	for b, blk := range d.blocks {
		if blk == nil {
			continue
		}
		// A block that no rank falls in is skipped in one sum.
		var sum int64
		for _, c := range blk {
			sum += c
		}
		if running+sum < targets[order[pos]] {
			running += sum
			continue
		}
		for j, c := range blk {
			if c == 0 {
				continue
			}
			running += c
			for pos < len(order) && running >= targets[order[pos]] {
				k := order[pos]
				if i := b*denseBlockLen + j; percentiles[k] <= 0 {
					out[k] = lowestOf(i)
				} else {
					out[k] = highestOf(i)
				}
				pos++
			}
			if pos == len(order) {
				return
			}
		}
	}
}

// latency summarizes d: its percentiles, max and their noise bands.
func (d *dense) latency() Latency {
	if d.total <= 0 {
		return Latency{}
	}
	maxValue := highestOf(d.top())
	v, bands := bandsOf(d, maxValue)
	return Latency{
		P50: micros(v[0]), P90: micros(v[1]), P99: micros(v[2]), P999: micros(v[3]), P9999: micros(v[4]),
		Max:   micros(maxValue),
		Count: d.total,
		Bands: bands,
	}
}

// densePool holds the scratch histograms of summaries.
var densePool = sync.Pool{New: func() any { return new(dense) }}

func getDense() *dense { return densePool.Get().(*dense) }

func putDense(d *dense) {
	d.reset()
	densePool.Put(d)
}
