package reports

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
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
		if lowestOf(i) != lo || highestOf(i) != hi {
			t.Fatalf("bucket %d is [%d, %d]; lowestOf and highestOf give [%d, %d]", i, lo, hi, lowestOf(i), highestOf(i))
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
// (in fact the same) of the merge of the 3-digit histograms reported;
// whichever form the reports carry, or both forms mixed (a rolling
// upgrade: half the pods' sidecars older).
func TestMergedPercentilesAreTheTruth(t *testing.T) {
	const pods, reports, perReport = 4, 6, 1000
	forms := map[string]func(pod int) wireForm{
		"bucket counts":                        func(int) wireForm { return formBuckets },
		"V2 encoding (older sidecars)":         func(int) wireForm { return formV2 },
		"half the pods' sidecars older, mixed": func(pod int) wireForm { return wireForms[pod%2] },
	}
	for formName, formOf := range forms {
		for seed, dist := range distributions {
			t.Run(formName+"/"+dist.name, func(t *testing.T) {
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
							must(t, all3.RecordValue(v))
						}
						sub := subReportAs(t, formOf(pod), "billing", seq*perReport, values, dwell)
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
			})
		}
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Reading a report's histogram, in either form and at any precision the
// operator takes, gives exactly the 2-digit histogram of its values.
func TestReadingKeepsEveryCount(t *testing.T) {
	rng := newRand(7)
	for _, dist := range distributions {
		values := dist.values(rng, 5000)
		want := newStored()
		for _, v := range values {
			must(t, want.RecordValue(v))
		}
		forms := map[string]func() (sparse, error){
			"V2 encoding": func() (sparse, error) { return readHistogram(nil, encode3(t, values)) },
		}
		for d := minWireDigits; d <= maxWireDigits; d++ {
			forms[fmt.Sprintf("bucket counts, %d digits", d)] = func() (sparse, error) {
				return readHistogram(bucketsGeometry(t, wireLowest, wireHighest, d, values), nil)
			}
		}
		for name, read := range forms {
			got, err := read()
			must(t, err)
			if fmt.Sprint(bucketsOf(got)) != fmt.Sprint(referenceBuckets(want)) || got.total != int64(len(values)) {
				t.Errorf("%s, %s: the stored buckets differ from recording the values at 2 digits", dist.name, name)
			}
		}
	}
}

// The wire geometries are HdrHistogram's: walking every index of one,
// the lowest value of each lands in that index.
func TestWireGeometriesAreHdrHistograms(t *testing.T) {
	for d := minWireDigits; d <= maxWireDigits; d++ {
		g := &wireGeometries[d]
		h := hdr.New(wireLowest, wireHighest, d)
		if n := len(h.Export().Counts); n != g.countsLen {
			t.Fatalf("%d digits: %d counts, HdrHistogram has %d", d, g.countsLen, n)
		}
		table := g.storedTable()
		for i := range g.countsLen {
			v := g.lowestOf(i)
			must(t, h.RecordValue(v))
			if got, want := g.storedOf(table, i), bucketIndex(v); got != want {
				t.Fatalf("%d digits: index %d (from %d µs) maps to stored bucket %d, want %d", d, i, v, got, want)
			}
		}
		for i, c := range h.Export().Counts {
			if c != 1 {
				t.Fatalf("%d digits: index %d holds %d of the buckets' lowest values, want 1", d, i, c)
			}
		}
	}
}

// dense's percentiles are HdrHistogram's, at every percentile, and a
// sum less what was added is what it was.
func TestDenseIsHdrHistogram(t *testing.T) {
	percentiles := []float64{0, 1e-9, 0.5, 10, 50, 50, 90, 99, 99.9, 99.99, 99.9999, 100, 120, -3}
	rng := newRand(11)
	for _, dist := range distributions {
		for _, n := range []int{1, 3, 1000} {
			values := dist.values(rng, n)
			ref := newStored()
			for _, v := range values {
				must(t, ref.RecordValue(v))
			}
			var d dense
			other := sparseOf(t, dist.values(rng, 100))
			d.add(other, 1)
			d.add(sparseOf(t, values), 1)
			d.add(other, -1)
			got := make([]int64, len(percentiles))
			d.valuesAt(percentiles, got)
			want := ref.ValueAtPercentilesSlice(percentiles)
			if fmt.Sprint(got) != fmt.Sprint(want) || d.total != int64(n) || highestOf(d.top()) != ref.Max() {
				t.Errorf("%s, %d values: %v, max %d; HdrHistogram %v, max %d", dist.name, n, got, highestOf(d.top()), want, ref.Max())
			}
		}
	}
	var empty dense
	if l := empty.latency(); l != (Latency{}) {
		t.Errorf("an empty histogram summarizes as %+v", l)
	}
}

func TestMergeAddsBucketByBucket(t *testing.T) {
	rng := newRand(13)
	cases := []struct {
		name string
		a, b []int64
	}{
		{"both empty", nil, nil},
		{"one empty", []int64{1, 2, 3}, nil},
		{"the other empty", nil, []int64{300, 60_000_000}},
		{"disjoint", []int64{1, 2}, []int64{1000, 2000}},
		{"interleaved and shared", []int64{1, 5, 1000, 1001, 50_000}, []int64{2, 5, 1003, 60_000_000}},
		{"lognormal", lognormal(rng, 1000, 2000, 1), lognormal(rng, 1000, 3000, 1)},
	}
	for _, tc := range cases {
		got := merge(sparseOf(t, tc.a), sparseOf(t, tc.b))
		want := sparseOf(t, append(slices.Clone(tc.a), tc.b...))
		if fmt.Sprint(bucketsOf(got)) != fmt.Sprint(bucketsOf(want)) || got.total != want.total {
			t.Errorf("%s: %v, want %v", tc.name, bucketsOf(got), bucketsOf(want))
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

// FuzzReadBuckets: whatever bytes a report's bucket counts carry, reading
// them refuses or stores exactly their counts, never more buckets than
// the stored geometry has, and never panics.
func FuzzReadBuckets(f *testing.F) {
	f.Add(uint32(3), wireBuckets(1, 1))
	f.Add(uint32(3), wireBuckets(101, 3, 1, 1, 7_000, 2))
	f.Add(uint32(2), wireBuckets(1, 1<<62))
	f.Add(uint32(5), wireBuckets(1_300_000, 1))
	f.Add(uint32(3), []byte{0x80})
	f.Fuzz(func(t *testing.T, digits uint32, buckets []byte) {
		h := &xdsv1.Histogram{LowestTrackableValue: wireLowest, HighestTrackableValue: wireHighest, SignificantDigits: digits, Buckets: buckets}
		got, err := readBuckets(h)
		if err != nil {
			return
		}
		var want int64
		for b := buckets; len(b) > 0; {
			_, n := binary.Uvarint(b)
			c, m := binary.Uvarint(b[n:])
			b = b[n+m:]
			want = saturatingAdd(want, int64(c))
		}
		listed := bucketsOf(got)
		var sum int64
		got.each(func(i int, c int64) {
			if i < 0 || i >= storedBuckets || c <= 0 {
				t.Fatalf("stored bucket %d with %d", i, c)
			}
			sum = saturatingAdd(sum, c)
		})
		if sum != want || got.total != want || len(listed) > storedBuckets {
			t.Fatalf("stored %d values in %d buckets (total %d), want %d", sum, len(listed), got.total, want)
		}
	})
}
