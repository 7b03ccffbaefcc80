package sidecar

import "time"

// start anchors nanotime: time.Since reads the monotonic clock, so
// differences of nanotime are immune to wall-clock steps.
var start = time.Now()

func nanotime() int64 { return int64(time.Since(start)) }
