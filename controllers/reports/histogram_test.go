package reports

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
)

func TestBucketIndexIsHdrHistogramsIndex(t *testing.T) {
	// Walk every bucket of the stored geometry, as HdrHistogram bounds it:
	// its lowest and highest values must have our index for it.
	i := 0
	for v := int64(0); v <= wireHighest; i++ {
		h := newStored()
		if err := h.RecordValue(v); err != nil {
			t.Fatal(err)
		}
		lo, hi := h.Min(), h.Max()
		if lo != v {
			t.Fatalf("bucket %d starts at %d, not %d", i, lo, v)
		}
		if bucketIndex(lo) != i || bucketIndex(hi) != i {
			t.Fatalf("bucket %d is [%d, %d]; bucketIndex gives %d, %d", i, lo, hi, bucketIndex(lo), bucketIndex(hi))
		}
		v = hi + 1
	}
	if i != storedBuckets || storedBuckets != 2533 {
		t.Fatalf("%d buckets walked, storedBuckets %d, documented 2533", i, storedBuckets)
	}
}

func TestMovedMoreThanOneBucket(t *testing.T) {
	us := time.Microsecond
	cases := []struct {
		a, b time.Duration
		want bool
	}{
		{a: 0, b: 0},
		{a: 100 * us, b: 101 * us}, // exact below 256 µs: next bucket
		{a: 100 * us, b: 102 * us, want: true},
		{a: 1000 * us, b: 1003 * us}, // the same 4 µs bucket
		{a: 1000 * us, b: 1007 * us}, // the next one
		{a: 1000 * us, b: 1008 * us, want: true},
		{a: 1008 * us, b: 1000 * us, want: true},
		{a: 10 * time.Second, b: 10*time.Second + 100*time.Millisecond, want: true},
		{a: 10 * time.Second, b: 10*time.Second + 60*time.Millisecond},
		{a: -time.Second, b: 0},                    // clamped to 0
		{a: 61 * time.Second, b: 90 * time.Second}, // clamped to 60 s
		{a: 999 * time.Nanosecond, b: 0},           // whole microseconds
	}
	for _, tc := range cases {
		if got := MovedMoreThanOneBucket(tc.a, tc.b); got != tc.want {
			t.Errorf("MovedMoreThanOneBucket(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// distributions are what the truth test feeds: each returns n values.
var distributions = []struct {
	name   string
	values func(rng *rand.Rand, n int) []int64
}{
	{"constant 1 ms", func(_ *rand.Rand, n int) []int64 { return repeat(1000, n) }},
	{"uniform 1 µs to 300 µs (exact buckets)", func(rng *rand.Rand, n int) []int64 {
		return generate(n, func() int64 { return 1 + rng.Int64N(300) })
	}},
	{"uniform 1 ms to 100 ms", func(rng *rand.Rand, n int) []int64 {
		return generate(n, func() int64 { return 1000 + rng.Int64N(99_000) })
	}},
	{"lognormal around 2 ms", func(rng *rand.Rand, n int) []int64 { return lognormal(rng, n, 2000, 1) }},
	{"bimodal 200 µs and 50 ms", func(rng *rand.Rand, n int) []int64 {
		return generate(n, func() int64 {
			if rng.IntN(10) == 0 {
				return lognormal(rng, 1, 50_000, 0.3)[0]
			}
			return lognormal(rng, 1, 200, 0.3)[0]
		})
	}},
	{"pareto tail from 100 µs", func(rng *rand.Rand, n int) []int64 {
		return generate(n, func() int64 { return clampValue(int64(100 * math.Pow(1-rng.Float64(), -1/1.2))) })
	}},
	{"the range's edges", func(rng *rand.Rand, n int) []int64 {
		edges := []int64{1, 2, 255, 256, 257, 59_999_999, 60_000_000}
		return generate(n, func() int64 { return edges[rng.IntN(len(edges))] })
	}},
}

func repeat(v int64, n int) []int64 { return generate(n, func() int64 { return v }) }

func generate(n int, f func() int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = f()
	}
	return out
}

// TestMergedPercentilesAreTheTruth feeds the same values to 4 pods'
// reports and to one histogram: the window's aggregate must be exactly
// the 2-digit histogram of every value, and within one 2-digit bucket
// (in fact the same) of the merge of the 3-digit histograms reported.
func TestMergedPercentilesAreTheTruth(t *testing.T) {
	const pods, reports, perReport = 4, 6, 1000
	for seed, dist := range distributions {
		t.Run(dist.name, func(t *testing.T) {
			rng := newRand(uint64(seed) + 1)
			clk := newClock()
			svc, _ := newTestService(t, clk, nil)
			all2 := newStored()
			all3 := hdr.New(wireLowest, wireHighest, wireDigits)
			pod2 := make([]*hdr.PackedHistogram, pods)
			for seq := uint64(1); seq <= reports; seq++ {
				for pod := range pods {
					if pod2[pod] == nil {
						pod2[pod] = newStored()
					}
					values := dist.values(rng, perReport)
					dwell := values[:perReport/2]
					for _, v := range values {
						must(t, all2.RecordValue(v))
						must(t, pod2[pod].RecordValue(v))
					}
					sub := subReport(t, "billing", seq*perReport, values, dwell)
					wire, err := hdr.Decode(sub.GetEndToEnd())
					must(t, err)
					all3.Merge(wire)
					mustAccept(t, svc, pod, report(identity(pod).PodUID, "a", seq, []*xdsv1.SubscriptionReport{sub}))
				}
				clk.Advance(5 * time.Second)
			}
			sum, ok := svc.Store().Subscription("shop", "billing")
			if !ok {
				t.Fatal("no summary")
			}
			if want := packedLatency(all2); withoutBands(sum.EndToEnd) != want {
				t.Fatalf("aggregate %+v\nwant      %+v (one 2-digit histogram of every value)", sum.EndToEnd, want)
			}
			if sum.Dwell.Count != pods*reports*perReport/2 {
				t.Fatalf("dwell count %d", sum.Dwell.Count)
			}
			for _, p := range sum.Pods {
				i := int(p.PodUID[len("uid-")] - '0')
				if want := packedLatency(pod2[i]); withoutBands(p.EndToEnd) != want {
					t.Fatalf("%s: %+v, want %+v", p.Pod, p.EndToEnd, want)
				}
			}
			got := []time.Duration{sum.EndToEnd.P50, sum.EndToEnd.P90, sum.EndToEnd.P99, sum.EndToEnd.P999, sum.EndToEnd.P9999, sum.EndToEnd.Max}
			want3 := append(all3.ValueAtPercentilesSlice(summaryPercentiles), all3.Max())
			for i, v3 := range want3 {
				v2 := got[i].Microseconds()
				if bucketIndex(v2) != bucketIndex(v3) || MovedMoreThanOneBucket(got[i], micros(v3)) {
					t.Errorf("value %d: %d µs at 2 digits is not in the bucket of %d µs at 3", i, v2, v3)
				}
				// The 2-digit value is the top of the bucket holding the
				// 3-digit one: above it by less than 1/128 of it.
				if v2 < v3 || float64(v2-v3) > float64(v3)/128 {
					t.Errorf("value %d: %d µs at 2 digits, %d at 3: off by more than 1/128", i, v2, v3)
				}
			}
			t.Logf("p50 %v p99 %v p99.99 %v max %v", sum.EndToEnd.P50, sum.EndToEnd.P99, sum.EndToEnd.P9999, sum.EndToEnd.Max)
		})
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestToStoredKeepsEveryCount(t *testing.T) {
	rng := newRand(7)
	for _, dist := range distributions {
		values := dist.values(rng, 5000)
		stored, err := decodeHistogram(encode3(t, values))
		must(t, err)
		direct := newStored()
		for _, v := range values {
			must(t, direct.RecordValue(v))
		}
		var gotBuckets, wantBuckets []string
		stored.ForEachBucket(func(v, c int64) bool { gotBuckets = append(gotBuckets, fmt.Sprint(v, c)); return true })
		direct.ForEachBucket(func(v, c int64) bool { wantBuckets = append(wantBuckets, fmt.Sprint(v, c)); return true })
		if fmt.Sprint(gotBuckets) != fmt.Sprint(wantBuckets) || stored.TotalCount() != int64(len(values)) {
			t.Errorf("%s: re-recorded buckets differ from recording the values at 2 digits", dist.name)
		}
	}
}

// packedLatency is the reference summary: HdrHistogram's own percentiles
// of one packed histogram.
func packedLatency(h *hdr.PackedHistogram) Latency {
	if h.TotalCount() == 0 {
		return Latency{}
	}
	v := h.ValueAtPercentilesSlice(summaryPercentiles)
	return Latency{
		P50: micros(v[0]), P90: micros(v[1]), P99: micros(v[2]), P999: micros(v[3]), P9999: micros(v[4]),
		Max:   micros(h.Max()),
		Count: h.TotalCount(),
	}
}

// withoutBands is l's values alone, to compare with packedLatency.
func withoutBands(l Latency) Latency {
	l.Bands = Bands{}
	return l
}
