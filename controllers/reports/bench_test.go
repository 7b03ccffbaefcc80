package reports

import (
	"runtime"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/protobuf/proto"

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

// BenchmarkReportOffTheWire is BenchmarkReport with the protobuf decoding
// of the report (what gRPC does before the service sees it), in each form
// a sidecar may send: the bucket counts of current sidecars, the V2
// encoding of older ones.
func BenchmarkReportOffTheWire(b *testing.B) {
	for _, form := range wireForms {
		b.Run(string(form), func(b *testing.B) {
			clk := newClock()
			svc, _ := newTestService(b, clk, nil)
			rng := newRand(1)
			var subs []*xdsv1.SubscriptionReport
			for _, name := range []string{"billing", "shipping", "fraud"} {
				subs = append(subs, subReportAs(b, form, name, 1000, lognormal(rng, 1000, 2000, 1), lognormal(rng, 1000, 300, 1.2), reason("overflow", 3)))
			}
			wire, err := proto.Marshal(report("uid-0", "a", 1, subs, topicRep("orders", 1000, 990, reason("rate", 10))))
			if err != nil {
				b.Fatal(err)
			}
			seq := uint64(0)
			b.ReportAllocs()
			for b.Loop() {
				var got xdsv1.Report
				if err := proto.Unmarshal(wire, &got); err != nil {
					b.Fatal(err)
				}
				seq++
				got.Sequence = seq
				clk.Advance(10 * time.Second)
				if refused := svc.accept(identity(0), &got); refused != nil {
					b.Fatal(refused)
				}
			}
			b.ReportMetric(float64(len(wire)), "B/report")
		})
	}
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
// measures one of 1,000 lognormal-ish values (estimate and heap); the
// figures docs/operator.md states.
func TestBytesPerSlice(t *testing.T) {
	// Worst case: every bucket populated, each with a count of 2^62 (the
	// most a report may carry: a 9-byte varint, beside its 1-byte index
	// delta).
	b := newSparseBuilder()
	for i := range storedBuckets {
		b.add(i, 1<<62)
	}
	worst := b.done()
	if got, want := worst.bytes(), int64(storedBuckets*10); got != want {
		t.Fatalf("worst histogram: %d bytes; documented %d (2,533 buckets of 10 bytes)", got, want)
	}
	worstReasons := make(reasons, MaxReasons)
	for i := range worstReasons {
		worstReasons[i].Reason = string(make([]byte, MaxReasonLength))
	}
	worstSlice := &subscriptionSlice{endToEnd: worst, dwell: worst, dropped: worstReasons}
	t.Logf("worst case: %d bytes per histogram, %d per Subscription slice (2 histograms, %d reasons of %d bytes; %d of its own)",
		worst.bytes(), worstSlice.bytes(), MaxReasons, MaxReasonLength, subscriptionSliceBytes)

	// Measured: 1,000 lognormal-ish values per histogram, as the sidecars
	// send them (BenchmarkReport, make bench-reports).
	const n = 200
	rng := newRand(3)
	wire := make([][2]*xdsv1.Histogram, n)
	for i := range wire {
		wire[i] = [2]*xdsv1.Histogram{buckets3(t, lognormal(rng, 1000, 2000, 1)), buckets3(t, lognormal(rng, 1000, 300, 1.2))}
	}
	held := make([]*subscriptionSlice, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var estimate int64
	for i := range held {
		e2e, err := readHistogram(wire[i][0], nil)
		must(t, err)
		dwell, err := readHistogram(wire[i][1], nil)
		must(t, err)
		held[i] = &subscriptionSlice{endToEnd: e2e, dwell: dwell, dropped: reasons{{Reason: "overflow", Count: 3}}}
		estimate += held[i].bytes()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := float64(after.HeapAlloc-before.HeapAlloc) / n
	runtime.KeepAlive(held)
	runtime.KeepAlive(wire) // freed in between, it would hide what is held
	var endToEndBuckets, dwellBuckets, endToEndBytes, dwellBytes int64
	for _, s := range held {
		endToEndBuckets += int64(len(bucketsOf(s.endToEnd)))
		dwellBuckets += int64(len(bucketsOf(s.dwell)))
		endToEndBytes += s.endToEnd.bytes()
		dwellBytes += s.dwell.bytes()
	}
	t.Logf("1,000 lognormal-ish values per histogram: %d (end-to-end) and %d (dwell) populated buckets on average, %d and %d bytes; estimate %d bytes per slice, heap %.0f (struct %d)",
		endToEndBuckets/n, dwellBuckets/n, endToEndBytes/n, dwellBytes/n, estimate/n, heap, unsafe.Sizeof(subscriptionSlice{}))
	if est := float64(estimate / n); heap > 1.25*est || est > 1.25*heap {
		t.Errorf("the estimate (%.0f) is off the heap (%.0f) by more than 1.25×", est, heap)
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
