package reports

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/controllers/xds"
)

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// staticPolicies is a PolicyNamesFunc over a fixed table, by "ns/pod".
type staticPolicies map[string]struct{ topics, subscriptions []string }

func (p staticPolicies) names(namespace, pod string) (topics, subscriptions map[string]bool, ok bool) {
	cfg, ok := p[namespace+"/"+pod]
	if !ok {
		return nil, nil, false
	}
	topics, subscriptions = map[string]bool{}, map[string]bool{}
	for _, t := range cfg.topics {
		topics[t] = true
	}
	for _, s := range cfg.subscriptions {
		subscriptions[s] = true
	}
	return topics, subscriptions, true
}

// testPolicies configures pods shop/pod-0 to shop/pod-9 alike.
func testPolicies() staticPolicies {
	p := staticPolicies{}
	for i := range 10 {
		p[podName(i)] = struct{ topics, subscriptions []string }{
			topics: []string{"orders", "audit"}, subscriptions: []string{"billing", "shipping", "fraud"},
		}
	}
	return p
}

func podName(i int) string { return "shop/pod-" + string(rune('0'+i)) }

// identity is pod i of testPolicies.
func identity(i int) xds.Identity {
	return xds.Identity{Namespace: "shop", Pod: "pod-" + string(rune('0'+i)), PodUID: "uid-" + string(rune('0'+i)), Expiry: time.Now().Add(time.Hour)}
}

// newTestService returns a serving Service on clk, with its registry.
func newTestService(t testing.TB, clk *clock, tweak func(*Options)) (*Service, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts := Options{
		Serving:     func() bool { return true },
		PolicyNames: testPolicies().names,
		Now:         clk.Now,
		Registerer:  reg,
	}
	if tl, ok := t.(*testing.T); ok {
		opts.Log = testr.New(tl)
	}
	if tweak != nil {
		tweak(&opts)
	}
	svc, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return svc, reg
}

// encode3 is the older sidecars' encoding of values: HdrHistogram's
// compressed V2 encoding at 3 digits, 1 µs to 60 s.
func encode3(t testing.TB, values []int64) []byte {
	t.Helper()
	if len(values) == 0 {
		return nil
	}
	h := hdr.New(wireLowest, wireHighest, wireDigits)
	for _, v := range values {
		if err := h.RecordValue(v); err != nil {
			t.Fatal(err)
		}
	}
	b, err := h.Encode(hdr.V2CompressedEncodingCookieBase)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func encodeGeometry(t testing.TB, lowest, highest int64, digits int, values []int64) []byte {
	t.Helper()
	h := hdr.New(lowest, highest, digits)
	for _, v := range values {
		if err := h.RecordValue(v); err != nil {
			t.Fatal(err)
		}
	}
	b, err := h.Encode(hdr.V2CompressedEncodingCookieBase)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func report(uid, boot string, seq uint64, subs []*xdsv1.SubscriptionReport, topics ...*xdsv1.TopicReport) *xdsv1.Report {
	return &xdsv1.Report{SchemaVersion: ReportSchemaVersion, PodUid: uid, BootId: boot, Sequence: seq, Subscriptions: subs, Topics: topics}
}

// buckets3 is the sidecars' form of values: sparse bucket counts at 3
// digits, 1 µs to 60 s; nil for none.
func buckets3(t testing.TB, values []int64) *xdsv1.Histogram {
	return bucketsGeometry(t, wireLowest, wireHighest, wireDigits, values)
}

func bucketsGeometry(t testing.TB, lowest, highest int64, digits int, values []int64) *xdsv1.Histogram {
	t.Helper()
	if len(values) == 0 {
		return nil
	}
	h := hdr.New(lowest, highest, digits)
	for _, v := range values {
		if err := h.RecordValue(v); err != nil {
			t.Fatal(err)
		}
	}
	out := &xdsv1.Histogram{LowestTrackableValue: lowest, HighestTrackableValue: highest, SignificantDigits: uint32(digits)}
	last := -1
	for i, c := range h.Export().Counts {
		if c > 0 {
			out.Buckets = binary.AppendUvarint(out.Buckets, uint64(i-last))
			out.Buckets = binary.AppendUvarint(out.Buckets, uint64(c))
			last = i
		}
	}
	return out
}

// wireForm is how a report carries its histograms.
type wireForm string

const (
	// formBuckets is a current sidecar's: sparse bucket counts.
	formBuckets wireForm = "bucket counts"
	// formV2 is a sidecar's before them: HdrHistogram's compressed V2
	// encoding.
	formV2 wireForm = "V2 encoding (older sidecars)"
)

var wireForms = []wireForm{formBuckets, formV2}

// subReport is a Subscription's report as a current sidecar sends it.
func subReport(t testing.TB, name string, delivered uint64, endToEnd, dwell []int64, dropped ...*xdsv1.ReasonCount) *xdsv1.SubscriptionReport {
	return subReportAs(t, formBuckets, name, delivered, endToEnd, dwell, dropped...)
}

func subReportAs(t testing.TB, form wireForm, name string, delivered uint64, endToEnd, dwell []int64, dropped ...*xdsv1.ReasonCount) *xdsv1.SubscriptionReport {
	s := &xdsv1.SubscriptionReport{Name: name, Delivered: delivered, Dropped: dropped}
	switch form {
	case formBuckets:
		s.EndToEndBuckets, s.DwellBuckets = buckets3(t, endToEnd), buckets3(t, dwell)
	case formV2:
		s.EndToEnd, s.Dwell = encode3(t, endToEnd), encode3(t, dwell)
	default:
		t.Fatalf("no wire form %q", form)
	}
	return s
}

// newStored is the reference the stored histograms are checked against:
// HdrHistogram's own, at the stored geometry.
func newStored() *hdr.PackedHistogram { return hdr.NewPacked(wireLowest, wireHighest, storedDigits) }

// sparseOf is values as the operator stores them.
func sparseOf(t testing.TB, values []int64) sparse {
	t.Helper()
	counts := map[int]int64{}
	for _, v := range values {
		counts[bucketIndex(v)]++
	}
	b := newSparseBuilder()
	for _, i := range slices.Sorted(maps.Keys(counts)) {
		b.add(i, counts[i])
	}
	return b.done()
}

// bucketsOf lists a sparse's buckets as "index:count".
func bucketsOf(s sparse) []string {
	var out []string
	s.each(func(i int, c int64) { out = append(out, fmt.Sprintf("%d:%d", i, c)) })
	return out
}

// referenceBuckets lists a reference histogram's buckets the same way.
func referenceBuckets(h *hdr.PackedHistogram) []string {
	var out []string
	h.ForEachBucket(func(v, c int64) bool { out = append(out, fmt.Sprintf("%d:%d", bucketIndex(v), c)); return true })
	return out
}

func reason(r string, n uint64) *xdsv1.ReasonCount { return &xdsv1.ReasonCount{Reason: r, Count: n} }

func topicRep(name string, attempts, forwarded uint64, refused ...*xdsv1.ReasonCount) *xdsv1.TopicReport {
	return &xdsv1.TopicReport{Name: name, Attempts: attempts, Forwarded: forwarded, Refused: refused}
}

// mustAccept runs a report of pod i through every check into the store.
func mustAccept(t testing.TB, svc *Service, pod int, r *xdsv1.Report) {
	t.Helper()
	if refused := svc.accept(identity(pod), r); refused != nil {
		t.Fatalf("report %d of pod %d refused: %v", r.GetSequence(), pod, refused)
	}
}

// lognormal returns n values around median µs, clamped to the range.
func lognormal(rng *rand.Rand, n int, median, sigma float64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = clampValue(int64(math.Exp(math.Log(median) + sigma*rng.NormFloat64())))
	}
	return out
}

func clampValue(v int64) int64 { return max(wireLowest, min(v, wireHighest)) }

// recorder collects OnChange notifications.
type recorder struct {
	mu  sync.Mutex
	got []string
	ch  chan string
}

func newRecorder(s *Store) *recorder {
	r := &recorder{ch: make(chan string, 1024)}
	s.OnChange(func(kind, namespace, name string) {
		key := kind + " " + namespace + "/" + name
		r.mu.Lock()
		r.got = append(r.got, key)
		r.mu.Unlock()
		select {
		case r.ch <- key:
		default:
		}
	})
	return r
}

// take returns what was notified since the last take.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.got
	r.got = nil
	return got
}

// value reads a counter or gauge.
func value(m prometheus.Metric) float64 {
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		panic(err)
	}
	if c := out.GetCounter(); c != nil {
		return c.GetValue()
	}
	return out.GetGauge().GetValue()
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// wireBuckets is report.proto's bucket bytes of (index distance, count)
// pairs.
func wireBuckets(pairs ...uint64) []byte {
	var out []byte
	for _, v := range pairs {
		out = binary.AppendUvarint(out, v)
	}
	return out
}
