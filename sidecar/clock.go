package sidecar

import "time"

// start anchors nanotime: time.Since reads the monotonic clock, so
// differences of nanotime are immune to wall-clock steps.
var start = time.Now()

func nanotime() int64 { return monotonic(time.Now()) }

// monotonic is t on nanotime's scale, for a caller that already read the
// clock.
func monotonic(t time.Time) int64 { return int64(t.Sub(start)) }
