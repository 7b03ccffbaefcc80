package report

import (
	"slices"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/go-logr/logr"
	"google.golang.org/protobuf/types/known/timestamppb"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/sidecar"
	"github.com/weighstation/weighstation/sidecar/pending"
	"github.com/weighstation/weighstation/sidecar/policy"
)

// Kill causes, as report.proto names them. There is no "Shed": the sidecar
// sheds messages one by one (dropped, reason shed), never a whole
// Subscription.
const (
	causeManual = "Manual"
	causeAuto   = "Auto"
)

// builder builds one boot's reports: it numbers them and remembers every
// distribution as of the previous report, so that a report carries only
// what was recorded since.
type builder struct {
	podUID, bootID string
	sequence       uint64
	// start is where the next report's interval begins: the end of the
	// previous one, or when the builder was made.
	start time.Time
	// previous is every distribution as of the last report, by
	// Subscription policy name, [0] dwell and [1] end-to-end. It is kept
	// for the policies that were not reported too (out of the
	// configuration), so that one that comes back reports what was
	// recorded since the last report, and nothing twice.
	previous map[string][2]*baseline
	log      logr.Logger
}

func newBuilder(podUID, bootID string, start time.Time, log logr.Logger) *builder {
	return &builder{podUID: podUID, bootID: bootID, start: start, previous: map[string][2]*baseline{}, log: log}
}

// build makes the next report, for the interval that ends at now.
func (b *builder) build(src Source, now time.Time) *xdsv1.Report {
	subscriptions, topics := src.ConfiguredPolicies()
	b.sequence++
	r := &xdsv1.Report{
		SchemaVersion: SchemaVersion,
		PodUid:        b.podUID,
		BootId:        b.bootID,
		Sequence:      b.sequence,
		Start:         timestamppb.New(b.start),
		End:           timestamppb.New(now),
		Subscriptions: b.subscriptions(src, subscriptions),
		Topics:        topicReports(src.TopicCounters(), topics),
	}
	b.start = now
	return r
}

// subscriptions reports the configured Subscription policies that covered
// some SUB of the applications since the sidecar started (a recorder or
// accounting exists for them), and moves every distribution's baseline on.
func (b *builder) subscriptions(src Source, configured []string) []*xdsv1.SubscriptionReport {
	latencies := src.Latency()
	totals := src.PolicyTotals()
	kills := src.KillSwitches()
	current := make(map[string][2]*hdrhistogram.Snapshot, len(latencies))
	next := make(map[string][2]*baseline, len(latencies))
	for name, l := range latencies {
		dwell, endToEnd := l[0].Histogram.Export(), l[1].Histogram.Export()
		current[name] = [2]*hdrhistogram.Snapshot{dwell, endToEnd}
		next[name] = [2]*baseline{baselineOf(dwell), baselineOf(endToEnd)}
	}
	var out []*xdsv1.SubscriptionReport
	for _, name := range sortedNames(configured) {
		l, recorded := current[name]
		t, counted := totals[name]
		if !recorded && !counted {
			continue
		}
		sr := &xdsv1.SubscriptionReport{Name: name, Delivered: t.Delivered, Dropped: dropped(t), Kill: killState(kills[name])}
		if recorded {
			sr.DwellBuckets, _ = delta(b.previous[name][0], l[0])
			sr.EndToEndBuckets, _ = delta(b.previous[name][1], l[1])
		}
		out = append(out, sr)
	}
	b.previous = next // and forgets the policies the sidecar no longer has
	return out
}

// dropped lists the drops by reason, named as the sidecar's metrics name
// them; a reason not listed counts zero.
func dropped(t pending.Counts) []*xdsv1.ReasonCount {
	var out []*xdsv1.ReasonCount
	for r, n := range t.Dropped {
		if n > 0 {
			out = append(out, &xdsv1.ReasonCount{Reason: pending.Reason(r).String(), Count: n})
		}
	}
	return out
}

// killState is a kill switch as the report says it. A Subscription of the
// configuration whose switch is not installed yet (in the instant between
// a new configuration's policies and its switches) is not killed.
func killState(ks sidecar.KillSwitchStatus) *xdsv1.KillState {
	k := &xdsv1.KillState{Killed: ks.Killed, Reason: ks.Reason}
	if !ks.Since.IsZero() {
		k.Since = timestamppb.New(ks.Since)
	}
	if ks.Killed {
		// The manual switch wins: with it engaged the Subscription stays
		// killed whatever the breaker says (and the reason is the
		// switch's).
		k.Cause = causeAuto
		if ks.Engaged {
			k.Cause = causeManual
		}
	}
	return k
}

// topicReports reports the configured Topics the applications published
// under. FailedUpstream is left out: the broker was away, which is no
// refusal by the Topic's policy (the metrics call it failed_upstream, apart
// from the refused_* outcomes); it is Attempts - Forwarded - the refusals.
func topicReports(counters map[string]policy.CountsSnapshot, configured []string) []*xdsv1.TopicReport {
	var out []*xdsv1.TopicReport
	for _, name := range sortedNames(configured) {
		c, ok := counters[name]
		if !ok || c.Attempts == 0 {
			continue
		}
		tr := &xdsv1.TopicReport{Name: name, Attempts: c.Attempts, Forwarded: c.Forwarded}
		for _, rc := range []struct {
			reason string
			n      uint64
		}{{"access", c.RefusedAccess}, {"size", c.RefusedSize}, {"rate", c.RefusedRate}} {
			if rc.n > 0 {
				tr.Refused = append(tr.Refused, &xdsv1.ReasonCount{Reason: rc.reason, Count: rc.n})
			}
		}
		out = append(out, tr)
	}
	return out
}

// sortedNames is names sorted, without duplicates and without "" (the
// default policy, or SUBs no Subscription covers: no resource of the
// operator's).
func sortedNames(names []string) []string {
	out := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == "" })
	slices.Sort(out)
	return slices.Compact(out)
}
