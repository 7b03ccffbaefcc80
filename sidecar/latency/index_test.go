package latency

import (
	"math/rand/v2"
	"testing"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// TestCountsIndexIsHdrHistograms: the recorder counts each value where
// HdrHistogram would, so that the histogram Snapshot imports is the one
// recording into HdrHistogram directly gives.
func TestCountsIndexIsHdrHistograms(t *testing.T) {
	values := []int64{MinMicros, 2, 1023, 1024, 2047, 2048, 2049, 4095, 4096, 1 << 20, MaxMicros - 1, MaxMicros}
	for range 1500 {
		values = append(values, MinMicros+rand.Int64N(MaxMicros))
		values = append(values, 1+rand.Int64N(100_000))
	}
	for _, v := range values {
		h := hdrhistogram.New(MinMicros, MaxMicros, SignificantDigits)
		if err := h.RecordValue(v); err != nil {
			t.Fatal(err)
		}
		want := -1
		for i, c := range h.Export().Counts {
			if c != 0 {
				want = i
			}
		}
		if got := countsIndex(v); got != want {
			t.Fatalf("countsIndex(%d) = %d, HdrHistogram counts it at %d", v, got, want)
		}
	}
	if got, want := len(NewRecorder().counts), len(hdrhistogram.New(MinMicros, MaxMicros, SignificantDigits).Export().Counts); got != want {
		t.Fatalf("%d counts, HdrHistogram has %d", got, want)
	}
}
