// Package reports receives the sidecars' measurements on the Reports
// stream (api/xds/v1/report.proto), checks and dedupes them, keeps them
// over a sliding window, and answers per-Subscription and per-Topic
// summaries for the status writer.
//
// # What is kept
//
// Each accepted report becomes one slice per policy it names, in the
// window of that (namespace, policy) and pod: the time the operator
// accepted it, its latency histograms re-recorded at 2 significant digits,
// and the counters' deltas since the previous accepted report of the same
// series. A series is one sidecar process, (pod UID, boot ID): its
// counters are totals since that process started, so a lost report loses
// nothing and a restarted sidecar is a new series, never a counter reset.
//
// Slices are timed by the operator's clock, not by the report's end: the
// window, staleness and eviction must not move with a sidecar's clock.
// A pod's window is anchored at its newest report, which replaces the one
// a window before it; a slice no newer report replaced leaves half an
// interval after the window (podCutoff), so that a report that comes a
// little late never shows a steady pod with one report fewer.
//
// # Precision
//
// Histograms arrive at 3 significant digits (HdrHistogram, 1 µs to 60 s)
// and are stored and merged at 2: every value is reported as the highest
// value of its bucket, within a relative error of 1/128 (0.8 %). HDR
// buckets are power-of-two aligned, so each 3-digit bucket lies inside
// one 2-digit bucket: re-recording the decoded buckets gives exactly the
// histogram that recording the raw values at 2 digits would have given,
// and the merged percentiles are those of one 2-digit histogram of every
// value (the tests check both).
//
// # Memory
//
// The 2-digit geometry of 0..60,000,000 µs has 2,533 buckets, so a stored
// histogram holds at most 2,533 populated buckets, each 4 bytes of index
// and 1, 2, 4 or 8 bytes of count (the width its largest count needs),
// plus 216 bytes of fixed overhead: 30,612 bytes at worst (every bucket,
// 8-byte counts), 12,881 with 1-byte counts. A Subscription slice holds
// two (end-to-end, dwell), its dropped reasons (at most MaxReasons of
// MaxReasonLength bytes) and 72 bytes of its own: 66,160 bytes at worst.
// Typical is far less, but not tiny: 1,000 values of a lognormal-ish
// distribution spread over two decades populate about 530 buckets (at 2
// digits, most values still get a bucket of their own), about 2.9 KB per
// histogram and 5.8 KB per slice, measured 6.2 KB on the heap
// (TestBytesPerSlice). What bounds the total: Options.MaxSeries series;
// at most maxSlices slices per (policy, pod), since reports that come
// faster than the interval are merged into the newest slice; the policies
// of a report, which must all be in the pod's configuration; and
// Options.MaxBytes, the estimate past which reports are refused.
//
// # Lock order
//
// Store.mu (the map of namespaces only), then namespace.mu. Store.listenMu
// is taken alone, and listeners are called with no lock held. Histograms
// are decoded before any lock is taken.
package reports
