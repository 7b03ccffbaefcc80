package report

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/HdrHistogram/hdrhistogram-go"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
)

func snapshotOf(values ...int64) *hdrhistogram.Snapshot {
	h := hdrhistogram.New(1, 60_000_000, 3)
	for _, v := range values {
		if err := h.RecordValue(v); err != nil {
			panic(err)
		}
	}
	return h.Export()
}

// A delta is what the cumulative histogram recorded since the base, bucket
// by bucket; when the histogram cannot have grown from the base (the first
// report, a reset, a replacement), it is all of the histogram. Never
// negative.
func TestDelta(t *testing.T) {
	if b := baselineOf(snapshotOf(1, 10, 10, 1000)); len(b.index) != 3 || b.buckets != len(snapshotOf().Counts) {
		t.Fatalf("a baseline of 3 buckets keeps %d of %d", len(b.index), b.buckets)
	}
	// Another geometry, whose small values sit at the same indexes as the
	// base's, and above them: only the geometry tells it apart.
	other := hdrhistogram.New(1, 60_000_000, 2)
	for _, v := range []int64{1, 10, 10, 5} {
		if err := other.RecordValue(v); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name          string
		base, current *hdrhistogram.Snapshot
		want          *hdrhistogram.Snapshot
	}{
		{"the first report", nil, snapshotOf(1, 10, 10, 1000), snapshotOf(1, 10, 10, 1000)},
		{"values added", snapshotOf(1, 10), snapshotOf(1, 10, 10, 1000, 59_000_000), snapshotOf(10, 1000, 59_000_000)},
		{"nothing added", snapshotOf(1, 10), snapshotOf(1, 10), snapshotOf()},
		{"reset, fewer values since", snapshotOf(1, 10, 10), snapshotOf(10, 7), snapshotOf(10, 7)},
		{"reset, as many values elsewhere", snapshotOf(1, 2), snapshotOf(3, 4), snapshotOf(3, 4)},
		{"replaced by another geometry", snapshotOf(1, 10), other.Export(), other.Export()},
		{"the first bucket at index 0", nil, snapshotOf(0, 0, 1), snapshotOf(0, 0, 1)},
		{"the range's top", snapshotOf(60_000_000), snapshotOf(60_000_000, 60_000_000, 1), snapshotOf(60_000_000, 1)},
	}
	for _, tc := range tests {
		var base *baseline
		if tc.base != nil {
			base = baselineOf(tc.base)
		}
		got, total := delta(base, tc.current)
		var want int64
		for _, c := range tc.want.Counts {
			want += c
		}
		if total != want {
			t.Errorf("%s: %d values, want %d", tc.name, total, want)
		}
		if want == 0 {
			if got != nil {
				t.Errorf("%s: %d bytes of buckets for no value, want no histogram", tc.name, len(got.GetBuckets()))
			}
			continue
		}
		if got.GetLowestTrackableValue() != tc.current.LowestTrackableValue || got.GetHighestTrackableValue() != tc.current.HighestTrackableValue ||
			int64(got.GetSignificantDigits()) != tc.current.SignificantFigures {
			t.Errorf("%s: geometry %d..%d, %d digits; want the current histogram's", tc.name, got.GetLowestTrackableValue(), got.GetHighestTrackableValue(), got.GetSignificantDigits())
		}
		if dense := denseOf(t, got, len(tc.current.Counts)); !slices.Equal(dense, tc.want.Counts) {
			t.Errorf("%s: the buckets differ from the delta's, bucket by bucket", tc.name)
		}
	}
}

// denseOf lays a report's bucket counts out as HdrHistogram's counts
// array of n buckets, checking their form (report.proto): index distances
// of at least 1, counts of at least 1.
func denseOf(t *testing.T, h *xdsv1.Histogram, n int) []int64 {
	t.Helper()
	out := make([]int64, n)
	i := -1
	for b := h.GetBuckets(); len(b) > 0; {
		d, k := binary.Uvarint(b)
		if k <= 0 {
			t.Fatalf("a malformed varint after index %d", i)
		}
		c, m := binary.Uvarint(b[k:])
		if m <= 0 {
			t.Fatalf("a malformed varint after index %d", i)
		}
		b = b[k+m:]
		if d == 0 || c == 0 {
			t.Fatalf("after index %d: distance %d, count %d; both must be at least 1", i, d, c)
		}
		i += int(d)
		out[i] = int64(c)
	}
	return out
}
