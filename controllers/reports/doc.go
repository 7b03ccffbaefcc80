// Package reports receives the sidecars' measurements on the Reports
// stream (api/xds/v1/report.proto), checks and dedupes them, keeps them
// over a sliding window, and answers per-Subscription and per-Topic
// summaries for the status writer.
//
// # What is kept
//
// Each accepted report becomes one slice per policy it names, in the
// window of that (namespace, policy) and pod: the time the operator
// accepted it, its latency histograms re-bucketed at 2 significant digits,
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
// # Precision and cost
//
// Histograms arrive at 3 significant digits (HdrHistogram, 1 µs to 60 s),
// as their populated buckets (report.proto's Histogram; older sidecars
// sent HdrHistogram's compressed V2 encoding, still read), and are stored
// and merged at 2: every value is reported as the highest value of its
// bucket, within a relative error of 1/128 (0.8 %). HDR buckets are
// power-of-two aligned, so each 3-digit bucket lies inside one 2-digit
// bucket: moving each bucket's count into its 2-digit bucket (a table
// lookup, readBuckets) gives exactly the histogram that recording the raw
// values at 2 digits would have given, and the merged percentiles are
// those of one 2-digit histogram of every value (the tests check both).
//
// Nothing is added up again at a summary: each Subscription keeps running
// sums of its window's slices (runningSums: added when a slice is stored,
// taken out when it leaves), and each pod's summary is kept until its
// slices change (podSummaryOf).
//
// # Memory
//
// A stored histogram (sparse) is its populated buckets of the 2-digit
// geometry as varint pairs: at most 2,533 buckets (0..60,000,000 µs) of
// at most 10 bytes, 25,330 bytes at worst. A Subscription slice holds two
// (end-to-end, dwell), its dropped reasons (at most MaxReasons of
// MaxReasonLength bytes) and 136 bytes of its own: 55,660 bytes at worst.
// 1,000 values of a lognormal-ish distribution spread over two decades
// populate about 530 buckets, about 1,050 bytes per histogram and 2,260
// per slice (TestBytesPerSlice checks the estimate on the heap). A
// Subscription's running sums take 1 KiB per 128-bucket block in use, at
// most 41 KB. What bounds the total: Options.MaxSeries series; at most
// maxSlices slices per (policy, pod), since reports that come faster than
// the interval are merged into the newest slice; the policies of a
// report, which must all be in the pod's configuration; and
// Options.MaxBytes (a quarter of GOMEMLIMIT by default), the estimate past
// which the reports' histograms are shed (counters and kill states kept),
// and past which by a quarter more reports are refused.
//
// # Lock order
//
// Store.mu (the map of namespaces only), then namespace.mu. Store.listenMu
// and Store.gatheredMu are taken alone, and listeners are called with no
// lock held. Histograms are read before any lock is taken.
package reports
