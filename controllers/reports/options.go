package reports

import (
	"errors"
	"math"
	"runtime/debug"
	"time"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
)

// ReportSchemaVersion is the version of the Report schema this operator
// reads (xdsv1.ReportSchemaVersion).
const ReportSchemaVersion = xdsv1.ReportSchemaVersion

// Defaults of Options.
const (
	DefaultWindow    = time.Minute
	DefaultInterval  = 10 * time.Second
	DefaultMaxSeries = 100_000
	// DefaultMaxBytes is the reports' memory cap when neither
	// Options.MaxBytes nor GOMEMLIMIT sets it.
	DefaultMaxBytes = 1 << 30
	// MemoryLimitShare is the share of the Go memory limit (GOMEMLIMIT,
	// runtime/debug.SetMemoryLimit) that the reports' memory cap takes by
	// default: a quarter, beside the informers' caches, the xDS streams'
	// buffers and the pods' configurations.
	MemoryLimitShare = 4
	// DefaultPodReportsPerInterval is twice a sidecar's cadence (one
	// report per interval), for jitter and resends.
	DefaultPodReportsPerInterval = 2
	// DefaultPodReportBurst covers a sidecar that reconnects with its
	// queue full (the sidecar's report.DefaultMaxPending, 6) and its next
	// report.
	DefaultPodReportBurst = 8
)

// Limits on what one report may carry: they bound what a sidecar can make
// the operator hold.
const (
	// MaxReasons is the most reasons one counter may list.
	MaxReasons = 32
	// MaxReasonLength is the longest reason of a counter, in bytes.
	MaxReasonLength = 128
	// MaxKillReasonLength is the longest human reason of a kill state.
	MaxKillReasonLength = 1024
	// MaxBootIDLength is the longest boot ID.
	MaxBootIDLength = 128
	// MaxSeriesPerPod is the most series one pod may hold in the window: a
	// sidecar restarting more often than that is refused rather than let
	// take the room of every other pod (Options.MaxSeries).
	MaxSeriesPerPod = 8
	// maxRatedPods is the most pods with a report rate bucket; past it
	// the least recently reporting is forgotten (bounded.Limiters), and
	// starts again with a full bucket.
	maxRatedPods = 65_536
)

// Kill causes a sidecar reports (KillState.Cause).
const (
	KillCauseManual = "Manual"
	KillCauseAuto   = "Auto"
	KillCauseShed   = "Shed"
)

// Kinds that OnChange names.
const (
	KindSubscription = "Subscription"
	KindTopic        = "Topic"
)

// PolicyNamesFunc returns the names of the Topics and Subscriptions of a
// pod's configuration, or false for a pod that has none (not published).
type PolicyNamesFunc func(namespace, pod string) (topics, subscriptions map[string]bool, ok bool)

// Options configure New.
type Options struct {
	// Serving is true while this replica is the leader and has computed
	// every pod; streams are refused with UNAVAILABLE otherwise. Required.
	Serving func() bool
	// PolicyNames is each pod's configuration (PublisherPolicyNames wires
	// it from the xDS Publisher). Required.
	PolicyNames PolicyNamesFunc
	// Window is how long slices are kept (default 1 min).
	Window time.Duration
	// Interval is the sidecars' report interval (default 10 s): a pod is
	// stale after 2 intervals without a report, and staleness and eviction
	// are evaluated every Interval/2.
	Interval time.Duration
	// MaxSeries caps the series (pod UID, boot ID) held; a new one past it
	// is refused with RESOURCE_EXHAUSTED (default 100,000).
	MaxSeries int
	// MaxBytes caps the estimated memory of what is held. Past it, the
	// reports' latency histograms are shed (their counters and kill states
	// are kept, the shed reports counted and summaries say how many of
	// theirs shed them); past it by a quarter more, which counters alone
	// fill slowly, reports are refused with RESOURCE_EXHAUSTED. Default: a
	// MemoryLimitShare of the Go memory limit (GOMEMLIMIT) when one is
	// set, else DefaultMaxBytes.
	MaxBytes int64
	// PodReportsPerInterval and PodReportBurst bound how fast one pod may
	// report (a token bucket per pod UID, refilled PodReportsPerInterval
	// times per Interval): every report costs a decode and a merge, so a
	// pod reporting faster than a sidecar does would take the operator's
	// CPU from every other pod. A report over it ends the stream
	// RESOURCE_EXHAUSTED; the sidecar keeps it and sends it again later.
	// Defaults DefaultPodReportsPerInterval and DefaultPodReportBurst.
	PodReportsPerInterval int
	PodReportBurst        int
	// Now is the clock; tests inject one (default time.Now).
	Now func() time.Time
	Log logr.Logger
	// Registerer takes the metrics; nil registers none.
	Registerer prometheus.Registerer
}

func (o Options) withDefaults() (Options, error) {
	if o.Serving == nil {
		return o, errors.New("reports: Options.Serving is required")
	}
	if o.PolicyNames == nil {
		return o, errors.New("reports: Options.PolicyNames is required")
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Window < o.Interval {
		return o, errors.New("reports: Options.Window must be at least Options.Interval")
	}
	if o.MaxSeries <= 0 {
		o.MaxSeries = DefaultMaxSeries
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = MaxBytesFor(debug.SetMemoryLimit(-1))
	}
	if o.PodReportsPerInterval <= 0 {
		o.PodReportsPerInterval = DefaultPodReportsPerInterval
	}
	if o.PodReportBurst <= 0 {
		o.PodReportBurst = DefaultPodReportBurst
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o, nil
}

// cutoff is the store's cutoff at now: a slice accepted at or before it
// is in no summary, and evicted. It lies half an interval before the
// window, so that a pod whose report comes late by less than half an
// interval still has its oldest slice when summarized in between (see
// podCutoff): cut at the window itself, every summary in that gap (the
// other pods of a Subscription report all through the interval) would
// find one report fewer, and status would write twice.
func (o Options) cutoff(now time.Time) time.Time { return now.Add(-o.Window - o.Interval/2) }

// replacedBy is the cutoff of a pod's window once a report was accepted
// from it at now: podCutoff leaves the slices at or before it out of
// every later summary, so they are evicted when the report is stored.
func (o Options) replacedBy(now time.Time) time.Time { return now.Add(-o.Window + o.Interval/2) }

// maxSlices is how many slices one (policy, pod) keeps: twice what a
// sidecar reporting every interval fills the window with, plus two. A
// sidecar reporting faster has its reports merged into the newest slice,
// so a fast or misbehaving sidecar cannot grow the window.
func (o Options) maxSlices() int {
	n := int((o.Window + o.Interval - 1) / o.Interval)
	return 2*n + 2
}

// MaxBytesFor is the default reports' memory cap under a Go memory limit
// (runtime/debug.SetMemoryLimit(-1), which GOMEMLIMIT sets; math.MaxInt64:
// none): a MemoryLimitShare of it, or DefaultMaxBytes without one.
func MaxBytesFor(memoryLimit int64) int64 {
	if memoryLimit <= 0 || memoryLimit == math.MaxInt64 {
		return DefaultMaxBytes
	}
	return max(memoryLimit/MemoryLimitShare, 1)
}

// hardMaxBytes is where reports are refused: MaxBytes and a quarter more,
// the headroom that shed reports (counters and kill states) fill.
func (o Options) hardMaxBytes() int64 {
	if o.MaxBytes > math.MaxInt64/5*4 {
		return math.MaxInt64
	}
	return o.MaxBytes + o.MaxBytes/4
}
