package report

import (
	"errors"
	"fmt"
	"time"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"

	"github.com/go-logr/logr"

	"github.com/weighstation/weighstation/sidecar/xdsclient"
)

// SchemaVersion is the version of the Report schema this package writes
// (xdsv1.ReportSchemaVersion).
const SchemaVersion = xdsv1.ReportSchemaVersion

// IntervalFlag is the sidecar command's flag for Options.Interval, which
// CheckInterval's errors name.
const IntervalFlag = "report-interval"

// Defaults: a report every 10 s, so that the operator's windows (a minute
// or more) hold several per pod; and one minute of reports kept while the
// operator is unreachable (a leader failover takes seconds, a restart tens
// of seconds).
const (
	DefaultInterval   = 10 * time.Second
	DefaultMaxPending = 6
)

// MinInterval is the shortest interval: every report costs the operator's
// leader a merge of histograms per Subscription per pod, and a fleet of
// sidecars reporting faster would spend it on that.
const MinInterval = time.Second

// Options configure a Reporter.
type Options struct {
	// Source is the sidecar's measurements.
	Source Source
	// PodUID is the sidecar's pod (downward API), which every report
	// names: the operator refuses a report of another pod.
	PodUID string
	// TokenFile holds the pod's projected ServiceAccount token, sent as
	// the stream's bearer token. It is read again at every stream, because
	// the kubelet rotates it.
	TokenFile string
	// Interval is the time between reports: DefaultInterval when zero, at
	// least MinInterval.
	Interval time.Duration
	// MaxPending bounds the reports kept until the operator acknowledges
	// them: DefaultMaxPending when zero.
	MaxPending int
	// InitialBackoff and MaxBackoff bound the wait between stream attempts
	// (doubling, with jitter): xdsclient's defaults when zero.
	InitialBackoff, MaxBackoff time.Duration
	Log                        logr.Logger
}

// CheckInterval checks the value of the -report-interval flag: 0 turns
// reporting off; anything else must be at least MinInterval.
func CheckInterval(d time.Duration) error {
	switch {
	case d < 0:
		return fmt.Errorf("-%s %s is negative: give the time between reports (at least %s), or 0 to send none", IntervalFlag, d, MinInterval)
	case d > 0 && d < MinInterval:
		return fmt.Errorf("-%s %s is below the minimum of %s (or 0 to send no reports)", IntervalFlag, d, MinInterval)
	}
	return nil
}

// withDefaults checks the options and fills in the defaults.
func (o Options) withDefaults() (Options, error) {
	switch {
	case o.Source == nil:
		return o, errors.New("reports: no source of measurements")
	case o.PodUID == "":
		return o, errors.New("-pod-uid is required to send reports (the pod's UID, from the downward API): the operator refuses a report that does not name its pod")
	case o.TokenFile == "":
		return o, errors.New("-identity-token-file is required to send reports: the pod's projected ServiceAccount token")
	case o.MaxPending < 0:
		return o, fmt.Errorf("reports: MaxPending must not be negative, got %d", o.MaxPending)
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if err := CheckInterval(o.Interval); err != nil {
		return o, err
	}
	if o.MaxPending == 0 {
		o.MaxPending = DefaultMaxPending
	}
	if o.InitialBackoff <= 0 {
		o.InitialBackoff = xdsclient.DefaultInitialBackoff
	}
	if o.MaxBackoff < o.InitialBackoff {
		o.MaxBackoff = max(xdsclient.DefaultMaxBackoff, o.InitialBackoff)
	}
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	return o, nil
}
