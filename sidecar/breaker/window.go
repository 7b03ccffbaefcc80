package breaker

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latency window range, in microseconds: 1 µs to 10 minutes, 2
// significant digits (enough to compare a p99 with a threshold). Values
// outside it are clamped: a reply slower than 10 minutes counts as 10
// minutes, still over any threshold the API allows.
const (
	windowMinMicros = 1
	windowMaxMicros = int64(10 * time.Minute / time.Microsecond)
	windowSigFigs   = 2
)

// Window is the reply latency over roughly the last window: two tumbling
// HdrHistograms, the current one and the one before, judged together, so
// that the judgement always covers between one and two windows. It is not
// safe for concurrent use.
type Window struct {
	length  time.Duration
	h       *hdrhistogram.WindowedHistogram
	rotated time.Time
}

// NewWindow returns an empty window of the given length.
func NewWindow(length time.Duration, now time.Time) *Window {
	return &Window{length: length, h: hdrhistogram.NewWindowed(2, windowMinMicros, windowMaxMicros, windowSigFigs), rotated: now}
}

// Record adds one reply latency at now.
func (w *Window) Record(d time.Duration, now time.Time) {
	w.advance(now)
	us := max(d.Microseconds(), windowMinMicros)
	_ = w.h.Current.RecordValue(min(us, windowMaxMicros)) // in range after clamping
}

// P99 returns the p99 over the window and how many replies it holds.
func (w *Window) P99(now time.Time) (time.Duration, int64) {
	w.advance(now)
	merged := w.h.Merge()
	return time.Duration(merged.ValueAtQuantile(99)) * time.Microsecond, merged.TotalCount()
}

// Reset forgets everything (a trial starts from nothing).
func (w *Window) Reset(now time.Time) {
	for range 2 {
		w.h.Rotate()
	}
	w.rotated = now
}

func (w *Window) advance(now time.Time) {
	for i := 0; i < 2 && now.Sub(w.rotated) >= w.length; i++ {
		w.h.Rotate()
		w.rotated = w.rotated.Add(w.length)
	}
	if now.Sub(w.rotated) >= w.length {
		w.rotated = now // idle for more than two windows: both are empty now
	}
}
