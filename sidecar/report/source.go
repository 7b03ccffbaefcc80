package report

import (
	"github.com/weighstation/weighstation/sidecar"
	"github.com/weighstation/weighstation/sidecar/latency"
	"github.com/weighstation/weighstation/sidecar/pending"
	"github.com/weighstation/weighstation/sidecar/policy"
)

// Source is what a report is built from: *sidecar.Server.
type Source interface {
	// ConfiguredPolicies names the Subscriptions and Topics of the
	// configuration in force: only those are reported.
	ConfiguredPolicies() (subscriptions, topics []string)
	// Latency is each Subscription policy's cumulative distributions:
	// [0] dwell, [1] end-to-end.
	Latency() map[string][2]latency.Snapshot
	// PolicyTotals is each Subscription policy's delivery accounting,
	// totals since the sidecar started.
	PolicyTotals() map[string]pending.Counts
	// KillSwitches is each configured Subscription's kill switch.
	KillSwitches() map[string]sidecar.KillSwitchStatus
	// TopicCounters is each Topic's publish counters, totals since the
	// sidecar started ("" is the default policy).
	TopicCounters() map[string]policy.CountsSnapshot
}
