package reports

import (
	"fmt"
	"testing"
)

var bandNames = [6]string{"p50", "p90", "p99", "p99.9", "p99.99", "max"}

// latencyOf summarizes values as a Subscription summary does.
func latencyOf(t *testing.T, values []int64) Latency {
	t.Helper()
	var d dense
	d.add(sparseOf(t, values), 1)
	return d.latency()
}

func valuesOf(l Latency) [6]int64 {
	us := func(d interface{ Microseconds() int64 }) int64 { return d.Microseconds() }
	return [6]int64{us(l.P50), us(l.P90), us(l.P99), us(l.P999), us(l.P9999), us(l.Max)}
}

func TestEveryBandHoldsItsValueAndTheTailsAreWider(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     int
		sigma float64
	}{
		{"10 values", 10, 1},
		{"a pod's window", 6_000, 1},
		{"a Subscription's window", 60_000, 1},
		{"a wide tail", 60_000, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := latencyOf(t, lognormal(newRand(7), tc.n, 2000, tc.sigma))
			v := valuesOf(l)
			for i, b := range l.Bands {
				if b.Low.Microseconds() > v[i] || b.High.Microseconds() < v[i] {
					t.Errorf("%s %dµs lies outside its band [%v, %v]", bandNames[i], v[i], b.Low, b.High)
				}
			}
			if got := l.Bands[5].High.Microseconds(); got != v[5] {
				t.Errorf("the max's band ends at %dµs, want the max %dµs", got, v[5])
			}
			if tc.n <= noiseTailRanks {
				// As few values as the tail's ranks: any of them could be any
				// percentile.
				for i, b := range l.Bands {
					if b != l.Bands[5] {
						t.Errorf("with %d values %s's band %v is not all of them, %v", tc.n, bandNames[i], b, l.Bands[5])
					}
				}
				return
			}
			// Relative width: the tails' bands are wider than the median's.
			width := func(i int) float64 { return float64(l.Bands[i].High-l.Bands[i].Low) / float64(l.Bands[i].High) }
			if width(4) <= width(0) {
				t.Errorf("p99.99's band (%.3f of its value) is no wider than p50's (%.3f)", width(4), width(0))
			}
		})
	}
}

// TestTheSameTrafficIsNeverApart is the reason for the bands: two windows
// of the same traffic differ by more than one bucket (so "more than one
// bucket" alone would write), and their bands meet.
func TestTheSameTrafficIsNeverApart(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      int
		median float64
		sigma  float64
		trials int
	}{
		{"a pod's end-to-end", 6_000, 2000, 1, 100},
		{"a pod's dwell", 6_000, 300, 1.2, 100},
		{"a Subscription's end-to-end", 60_000, 2000, 1, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := newRand(11)
			var movedByBuckets [6]int
			for trial := range tc.trials {
				a := latencyOf(t, lognormal(rng, tc.n, tc.median, tc.sigma))
				b := latencyOf(t, lognormal(rng, tc.n, tc.median, tc.sigma))
				va, vb := valuesOf(a), valuesOf(b)
				for i := range a.Bands {
					if MovedMoreThanOneBucket(micros(va[i]), micros(vb[i])) {
						movedByBuckets[i]++
					}
					if Apart(a.Bands[i], b.Bands[i]) {
						t.Errorf("trial %d: %s %dµs and %dµs of the same traffic are apart: bands %v and %v", trial, bandNames[i], va[i], vb[i], a.Bands[i], b.Bands[i])
					}
				}
			}
			// Without the bands these would be writes.
			if movedByBuckets[3] < tc.trials/2 || movedByBuckets[5] < tc.trials/2 {
				t.Errorf("p99.9 moved by more than one bucket in %d of %d trials, max in %d: the noise this test guards against is not there", movedByBuckets[3], tc.trials, movedByBuckets[5])
			}
		})
	}
}

// TestAMoveIsApart: what the bench's moving Subscriptions do (one report
// in six at 1.5 times the latency) and what a real slowdown does are
// seen.
func TestAMoveIsApart(t *testing.T) {
	rng := newRand(13)
	scaled := func(values []int64, f float64) []int64 {
		out := make([]int64, len(values))
		for i, v := range values {
			out[i] = min(int64(float64(v)*f), wireHighest)
		}
		return out
	}
	steady := lognormal(rng, 60_000, 2000, 1)
	for _, tc := range []struct {
		name  string
		next  []int64
		apart []string // at least these
	}{
		{"everything 1.5 times slower", scaled(lognormal(rng, 60_000, 2000, 1), 1.5), []string{"p50", "p90", "p99"}},
		{"one report in six 1.5 times slower", append(lognormal(rng, 50_000, 2000, 1), scaled(lognormal(rng, 10_000, 2000, 1), 1.5)...), []string{"p50", "p90"}},
		{"1% of messages take a second", append(lognormal(rng, 59_400, 2000, 1), repeated(1_000_000, 600)...), []string{"p99.9", "p99.99", "max"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := latencyOf(t, steady), latencyOf(t, tc.next)
			got := map[string]bool{}
			for i := range a.Bands {
				got[bandNames[i]] = Apart(a.Bands[i], b.Bands[i])
			}
			for _, name := range tc.apart {
				if !got[name] {
					t.Errorf("%s did not move beyond the noise: %v", name, fmt.Sprint(got))
				}
			}
		})
	}
}

func repeated(v int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestApartNeedsMoreThanOneBucketBetweenTheBands(t *testing.T) {
	ms := func(v float64) Band { return Point(micros(int64(v * 1000))) }
	for _, tc := range []struct {
		name string
		a, b Band
		want bool
	}{
		{"overlapping", Band{Low: micros(1000), High: micros(2000)}, Band{Low: micros(1500), High: micros(3000)}, false},
		{"one bucket apart", ms(10), ms(10.08), false},
		{"well apart", ms(10), ms(11), true},
		{"well apart, the other way", Band{Low: micros(20_000), High: micros(30_000)}, Band{Low: micros(1000), High: micros(19_000)}, true},
	} {
		if got := Apart(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: Apart(%v, %v) = %v, want %v", tc.name, tc.a, tc.b, got, tc.want)
		}
	}
}
