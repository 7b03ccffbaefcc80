package reports

import (
	"runtime"
	"testing"
	"time"
	"unsafe"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
)

// benchReport is a report of 3 Subscriptions, each with 1,000 end-to-end
// and 1,000 dwell values of a lognormal-ish distribution.
func benchReport(b testing.TB, seed uint64) *xdsv1.Report {
	rng := newRand(seed)
	var subs []*xdsv1.SubscriptionReport
	for _, name := range []string{"billing", "shipping", "fraud"} {
		subs = append(subs, subReport(b, name, 1000, lognormal(rng, 1000, 2000, 1), lognormal(rng, 1000, 300, 1.2), reason("overflow", 3)))
	}
	return report("uid-0", "a", 1, subs, topicRep("orders", 1000, 990, reason("rate", 10)))
}

// BenchmarkReport checks, decodes and stores one report of 3
// Subscriptions of 1,000 values each, a steady pod's: one report per
// interval, so each evicts the one that left the window.
func BenchmarkReport(b *testing.B) {
	clk := newClock()
	svc, _ := newTestService(b, clk, nil)
	r := benchReport(b, 1)
	seq := uint64(0)
	b.ReportAllocs()
	for b.Loop() {
		seq++
		r.Sequence = seq
		clk.Advance(10 * time.Second)
		if refused := svc.accept(identity(0), r); refused != nil {
			b.Fatal(refused)
		}
	}
	slices := svc.Store().namespaces["shop"].subscriptions["billing"].pods["uid-0"].slices
	b.ReportMetric(float64(slices[len(slices)-1].bytes()), "B/slice")
}

// BenchmarkSubscriptionSummary summarizes a Subscription of 10 pods with
// 6 slices each (1,000 values per histogram): what the status writer does
// every interval per Subscription.
func BenchmarkSubscriptionSummary(b *testing.B) {
	clk := newClock()
	svc, _ := newTestService(b, clk, nil)
	for seq := uint64(1); seq <= 6; seq++ {
		for pod := range 10 {
			r := benchReport(b, seq*100+uint64(pod))
			r.PodUid, r.Sequence = identity(pod).PodUID, seq
			mustAccept(b, svc, pod, r)
		}
		clk.Advance(10 * time.Second)
	}
	clk.Advance(-5 * time.Second) // every slice in the window
	b.ReportAllocs()
	for b.Loop() {
		sum, ok := svc.Store().Subscription("shop", "billing")
		if !ok || len(sum.Pods) != 10 || sum.EndToEnd.Count != 60_000 {
			b.Fatalf("summary of %d pods, %d values", len(sum.Pods), sum.EndToEnd.Count)
		}
	}
}

// TestBytesPerSlice computes the worst case of a Subscription slice and
// measures one of 1,000 lognormal-ish values (estimate and heap).
func TestBytesPerSlice(t *testing.T) {
	// Worst case: every bucket populated, one count past 32 bits (8-byte
	// counts).
	worst := newStored()
	for i := range storedBuckets {
		must(t, worst.RecordValues(lowestOfBucket(t, i), 1))
	}
	must(t, worst.RecordValues(1000, 1<<33))
	worst.Compact()
	if got, want := worst.GetMemorySize(), 216+storedBuckets*12; worst.Populated() != int32(storedBuckets) || worst.CountWidth() != 8 || got != want {
		t.Fatalf("worst histogram: %d buckets, width %d, %d bytes; documented %d", worst.Populated(), worst.CountWidth(), got, want)
	}
	worstReasons := make(reasons, MaxReasons)
	for i := range worstReasons {
		worstReasons[i].Reason = string(make([]byte, MaxReasonLength))
	}
	worstSlice := &subscriptionSlice{endToEnd: worst, dwell: worst, dropped: worstReasons}
	t.Logf("worst case: %d bytes per histogram, %d per Subscription slice (2 histograms, %d reasons of %d bytes)",
		worst.GetMemorySize(), worstSlice.bytes(), MaxReasons, MaxReasonLength)

	// Measured: 1,000 lognormal-ish values per histogram, as BenchmarkReport.
	const n = 200
	rng := newRand(3)
	encoded := make([][2][]byte, n)
	for i := range encoded {
		encoded[i] = [2][]byte{encode3(t, lognormal(rng, 1000, 2000, 1)), encode3(t, lognormal(rng, 1000, 300, 1.2))}
	}
	held := make([]*subscriptionSlice, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var estimate int64
	for i := range held {
		e2e, err := decodeHistogram(encoded[i][0])
		must(t, err)
		dwell, err := decodeHistogram(encoded[i][1])
		must(t, err)
		held[i] = &subscriptionSlice{endToEnd: e2e, dwell: dwell, dropped: reasons{{Reason: "overflow", Count: 3}}}
		estimate += held[i].bytes()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := float64(after.HeapAlloc-before.HeapAlloc) / n
	runtime.KeepAlive(held)
	runtime.KeepAlive(encoded) // freed in between, it would hide what is held
	var endToEndBuckets, dwellBuckets int64
	for _, s := range held {
		endToEndBuckets += int64(s.endToEnd.Populated())
		dwellBuckets += int64(s.dwell.Populated())
	}
	t.Logf("1,000 lognormal-ish values per histogram: %d (end-to-end) and %d (dwell) populated buckets on average, width %d; estimate %d bytes per slice, heap %.0f (struct %d)",
		endToEndBuckets/n, dwellBuckets/n, held[0].endToEnd.CountWidth(), estimate/n, heap, unsafe.Sizeof(subscriptionSlice{}))
	if est := float64(estimate / n); heap > 1.5*est || est > 1.5*heap {
		t.Errorf("the estimate (%.0f) is off the heap (%.0f) by more than 1.5×", est, heap)
	}
	if float64(worstSlice.bytes()) < heap {
		t.Errorf("measured %.0f bytes, past the worst case %d", heap, worstSlice.bytes())
	}
}

// lowestOfBucket is the lowest value of bucket i of the stored geometry.
func lowestOfBucket(t *testing.T, i int) int64 {
	lo, hi := int64(0), int64(wireHighest)
	for lo < hi { // the first value whose index is i
		mid := (lo + hi) / 2
		if bucketIndex(mid) < i {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if bucketIndex(lo) != i {
		t.Fatalf("no value in bucket %d", i)
	}
	return lo
}
