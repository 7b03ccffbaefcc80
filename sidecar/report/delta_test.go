package report

import (
	"slices"
	"testing"

	"github.com/HdrHistogram/hdrhistogram-go"
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
		if total != want || !slices.Equal(got.Counts, tc.want.Counts) || got.SignificantFigures != tc.current.SignificantFigures {
			t.Errorf("%s: %d values, want %d, bucket by bucket", tc.name, total, want)
		}
		if slices.ContainsFunc(got.Counts, func(c int64) bool { return c < 0 }) {
			t.Errorf("%s: a negative count", tc.name)
		}
		enc, err := encodeDelta(base, tc.current)
		switch {
		case err != nil:
			t.Errorf("%s: encoding: %v", tc.name, err)
		case want == 0 && len(enc) != 0:
			t.Errorf("%s: %d bytes for no value, want none", tc.name, len(enc))
		case want > 0:
			dec, err := hdrhistogram.Decode(enc)
			if err != nil || !slices.Equal(dec.Export().Counts, tc.want.Counts) {
				t.Errorf("%s: the encoding decodes to another histogram (%v)", tc.name, err)
			}
		}
	}
}
