// Package latency records the sidecar's latency distributions with
// HdrHistogram, as response times, never as averages.
package latency

import (
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The recorded range, in microseconds: 1 µs to 60 s at 3 significant
// digits (about 136 KiB per histogram). Values outside it are clamped to
// its edge and counted, never dropped silently; negative values (a
// cross-node clock skew) are clamped to the minimum and counted apart.
const (
	MinMicros         = 1
	MaxMicros         = 60_000_000
	SignificantDigits = 3
)

// Recorder is one distribution. Recording takes a mutex that only the
// recording goroutine (a connection's writer) and an occasional reader
// (metrics, status) contend for: hdrhistogram-go is not safe for concurrent
// use.
type Recorder struct {
	mu       sync.Mutex
	h        *hdrhistogram.Histogram
	negative uint64
	tooLarge uint64
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder {
	return &Recorder{h: hdrhistogram.New(MinMicros, MaxMicros, SignificantDigits)}
}

// Record adds one observation, clamping it into the range.
func (r *Recorder) Record(d time.Duration) {
	us := d.Microseconds() // truncated toward zero: a negative d is tested itself
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case d < 0:
		r.negative++
		us = MinMicros
	case us < MinMicros:
		us = MinMicros // sub-microsecond: the range's floor, not an error
	case us > MaxMicros:
		r.tooLarge++
		us = MaxMicros
	}
	if err := r.h.RecordValue(us); err != nil {
		// Unreachable after clamping; count it rather than lose it.
		r.tooLarge++
	}
}

// Snapshot is a copy of a distribution and its out-of-range counts.
type Snapshot struct {
	Histogram *hdrhistogram.Histogram
	Negative  uint64
	TooLarge  uint64
}

// Snapshot copies the distribution.
func (r *Recorder) Snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Snapshot{Histogram: hdrhistogram.Import(r.h.Export()), Negative: r.negative, TooLarge: r.tooLarge}
}
