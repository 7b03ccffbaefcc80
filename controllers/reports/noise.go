package reports

import (
	"math"
	"time"
)

// Sampling noise. A percentile of the window's values is itself a random
// quantity: replace the window's oldest report with a new one from the
// same traffic and its p99.9 moves, by more than one bucket for tens of
// thousands of values, and its max by as much as the distribution's tail
// is wide. Judged by "more than one bucket" alone, every object of real
// traffic would change at every report. So each summarized value comes
// with the range of values it could have taken from sampling alone, and
// the status writer calls a move material only when the new range and
// the range last written do not meet (more than a bucket apart).
//
// The range of the q-quantile of n values is the values at the ranks
// q·n ± k, where k = max(noiseSigmas·√(n·q·(1−q)), noiseTailRanks): the
// rank of the q-quantile is binomial, with standard deviation √(n·q·(1−q)).
// Two summaries of the same traffic are both noisy, so two such ranges
// meet unless the ranks moved by more than 2·k, 2·4/√2 ≈ 5.7 standard
// deviations of their difference: about 1 in 10⁸ per comparison for
// independent windows, and summaries of overlapping windows move less.
// Near the top of the distribution the normal approximation fails (a
// pod's p99.99 of 6,000 values is its max), and k is at least
// noiseTailRanks: the max's range is the top 24 values, and two ranges of
// the same traffic miss each other only when one window's 24 largest
// values all exceed the other's max (about 2·2⁻²⁴).
const (
	noiseSigmas    = 4
	noiseTailRanks = 24
)

// Band is the range a summarized value could have taken from sampling
// alone: the values at the ranks noiseSigmas standard deviations either
// side of its own (at least noiseTailRanks), each the highest value of its
// bucket as the percentiles are.
type Band struct{ Low, High time.Duration }

// Bands are a Latency's: P50, P90, P99, P999, P9999 and Max, in that
// order (the Band* indexes).
type Bands [6]Band

// Indexes into Bands.
const (
	BandP50 = iota
	BandP90
	BandP99
	BandP999
	BandP9999
	BandMax
)

// Apart reports whether two bands are more than one bucket apart: a move
// that sampling noise does not explain.
func Apart(a, b Band) bool {
	switch {
	case a.High < b.Low:
		return MovedMoreThanOneBucket(a.High, b.Low)
	case b.High < a.Low:
		return MovedMoreThanOneBucket(b.High, a.Low)
	}
	return false
}

// Point is the band of a value known exactly (a summary that was written
// before its bands were known, as after a restart).
func Point(v time.Duration) Band { return Band{Low: v, High: v} }

// bandsOf computes a histogram's summary percentiles and their bands in
// one pass over its counts; maxValue is its max.
func bandsOf(h *dense, maxValue int64) (values [5]int64, bands Bands) {
	n := float64(h.total)
	// For each summary percentile: its band's low end, itself, its high
	// end; then the max's low end. valuesAt sorts them if they are not
	// ascending (small n).
	var psBuf [3*5 + 1]float64
	ps := psBuf[:0]
	for _, p := range summaryPercentiles {
		q := p / 100
		k := max(noiseSigmas*math.Sqrt(n*q*(1-q)), noiseTailRanks)
		ps = append(ps, clampPercentile(100*(q*n-k)/n), p, clampPercentile(100*(q*n+k)/n))
	}
	ps = append(ps, clampPercentile(100*(n-noiseTailRanks)/n))
	var v [len(psBuf)]int64
	h.valuesAt(ps, v[:])
	for i := range summaryPercentiles {
		values[i] = v[3*i+1]
		bands[i] = Band{Low: micros(v[3*i]), High: micros(min(v[3*i+2], maxValue))}
	}
	bands[BandMax] = Band{Low: micros(v[len(v)-1]), High: micros(maxValue)}
	return values, bands
}

func clampPercentile(p float64) float64 { return min(max(p, 0), 100) }
