package reports

import (
	"cmp"
	"slices"
	"time"

	"google.golang.org/grpc/codes"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/controllers/xds"
)

// checkedReport is a report that passed every check, its histograms
// re-bucketed at 2 digits, ready to store.
type checkedReport struct {
	namespace, pod, podUID string
	bootID                 string
	sequence               uint64
	subscriptions          []subscriptionReport
	topics                 []topicReport
	// changed and gathered are filled by Store.add: the objects whose
	// summaries the report changed, to notify at once or at the next
	// sweep (Store.OnChange).
	changed, gathered []change
}

type subscriptionReport struct {
	name            string
	endToEnd, dwell sparse  // at 2 digits; empty: no value
	delivered       int64   // total since the series started
	dropped         reasons // totals
	kill            KillState
}

type topicReport struct {
	name                string
	attempts, forwarded int64   // totals since the series started
	refused             reasons // totals
}

// KillState is whether delivery to a pod is stopped, why and since when.
type KillState struct {
	Killed bool
	// Cause is KillCauseManual, KillCauseAuto or KillCauseShed.
	Cause  string
	Reason string
	Since  time.Time
}

// checkHeader checks what identifies a report: that it is the stream's
// pod's, of a known schema, numbered in a series.
func checkHeader(id xds.Identity, r *xdsv1.Report) *refusal {
	if v := r.GetSchemaVersion(); v != ReportSchemaVersion {
		return refuse(codes.InvalidArgument, refusedSchema, "report schema version %d is not known; this operator reads version %d", v, ReportSchemaVersion)
	}
	if uid := r.GetPodUid(); uid != id.PodUID {
		return refuse(codes.PermissionDenied, refusedPodUID, "the report is of pod UID %q, but this stream is pod %s/%s with UID %q", uid, id.Namespace, id.Pod, id.PodUID)
	}
	if b := r.GetBootId(); b == "" || len(b) > MaxBootIDLength {
		return refuse(codes.InvalidArgument, refusedMalformed, "boot_id must be 1 to %d bytes, not %d", MaxBootIDLength, len(b))
	}
	if r.GetSequence() == 0 {
		return refuse(codes.InvalidArgument, refusedMalformed, "sequence numbers start at 1")
	}
	return nil
}

// checkPolicies checks that every policy of r is in the pod's
// configuration, once.
func checkPolicies(r *xdsv1.Report, topics, subscriptions map[string]bool) *refusal {
	seen := make(map[string]bool, len(r.GetSubscriptions()))
	if ref := checkNames("Subscription", r.GetSubscriptions(), subscriptions, seen); ref != nil {
		return ref
	}
	clear(seen)
	return checkNames("Topic", r.GetTopics(), topics, seen)
}

// checkNames checks that each policy of one kind is known, once; seen is
// scratch space, empty.
func checkNames[P interface{ GetName() string }](kind string, policies []P, known, seen map[string]bool) *refusal {
	for _, p := range policies {
		name := p.GetName()
		if !known[name] {
			return refuse(codes.InvalidArgument, refusedPolicy, "%s %q is not in this pod's configuration", kind, name)
		}
		if seen[name] {
			return refuse(codes.InvalidArgument, refusedMalformed, "%s %q is reported twice", kind, name)
		}
		seen[name] = true
	}
	return nil
}

// decodeReport reads the counters, kill states and histograms of a report
// whose header and policies were checked.
func decodeReport(id xds.Identity, r *xdsv1.Report) (*checkedReport, *refusal) {
	out := &checkedReport{
		namespace: id.Namespace, pod: id.Pod, podUID: id.PodUID,
		bootID: r.GetBootId(), sequence: r.GetSequence(),
		subscriptions: make([]subscriptionReport, 0, len(r.GetSubscriptions())),
		topics:        make([]topicReport, 0, len(r.GetTopics())),
	}
	for _, s := range r.GetSubscriptions() {
		dropped, bad := readReasons(s.GetDropped())
		if bad != nil {
			return nil, refuse(codes.InvalidArgument, refusedMalformed, "Subscription %q dropped: %w", s.GetName(), bad)
		}
		kill, bad := readKill(s.GetKill())
		if bad != nil {
			return nil, refuse(codes.InvalidArgument, refusedMalformed, "Subscription %q kill: %w", s.GetName(), bad)
		}
		e2e, err := readHistogram(s.GetEndToEndBuckets(), s.GetEndToEnd())
		if err != nil {
			return nil, refuse(codes.InvalidArgument, refusedHistogram, "Subscription %q end_to_end histogram: %w", s.GetName(), err)
		}
		dwell, err := readHistogram(s.GetDwellBuckets(), s.GetDwell())
		if err != nil {
			return nil, refuse(codes.InvalidArgument, refusedHistogram, "Subscription %q dwell histogram: %w", s.GetName(), err)
		}
		out.subscriptions = append(out.subscriptions, subscriptionReport{
			name: s.GetName(), endToEnd: e2e, dwell: dwell,
			delivered: toInt64(s.GetDelivered()), dropped: dropped, kill: kill,
		})
	}
	for _, t := range r.GetTopics() {
		refused, bad := readReasons(t.GetRefused())
		if bad != nil {
			return nil, refuse(codes.InvalidArgument, refusedMalformed, "Topic %q refused: %w", t.GetName(), bad)
		}
		out.topics = append(out.topics, topicReport{
			name: t.GetName(), attempts: toInt64(t.GetAttempts()), forwarded: toInt64(t.GetForwarded()), refused: refused,
		})
	}
	return out, nil
}

// readReasons copies a counter by reason, sorted, checking its limits.
func readReasons(in []*xdsv1.ReasonCount) (reasons, error) {
	if len(in) > MaxReasons {
		return nil, errorf("%d reasons; at most %d", len(in), MaxReasons)
	}
	if len(in) == 0 {
		return nil, nil
	}
	out := make(reasons, 0, len(in))
	for _, rc := range in {
		if r := rc.GetReason(); r == "" || len(r) > MaxReasonLength {
			return nil, errorf("a reason must be 1 to %d bytes, not %d", MaxReasonLength, len(r))
		}
		// A reason that never counted is no reason.
		if rc.GetCount() > 0 {
			out = append(out, ReasonCount{Reason: rc.GetReason(), Count: toInt64(rc.GetCount())})
		}
	}
	slices.SortFunc(out, func(a, b ReasonCount) int { return cmp.Compare(a.Reason, b.Reason) })
	for i := 1; i < len(out); i++ {
		if out[i].Reason == out[i-1].Reason {
			return nil, errorf("reason %q is listed twice", out[i].Reason)
		}
	}
	return out, nil
}

func readKill(k *xdsv1.KillState) (KillState, error) {
	if !k.GetKilled() {
		return KillState{}, nil
	}
	switch k.GetCause() {
	case KillCauseManual, KillCauseAuto, KillCauseShed:
	default:
		return KillState{}, errorf("cause %q is none of %s, %s, %s", k.GetCause(), KillCauseManual, KillCauseAuto, KillCauseShed)
	}
	if len(k.GetReason()) > MaxKillReasonLength {
		return KillState{}, errorf("the reason is %d bytes; at most %d", len(k.GetReason()), MaxKillReasonLength)
	}
	var since time.Time
	if k.GetSince() != nil {
		since = k.GetSince().AsTime()
	}
	return KillState{Killed: true, Cause: k.GetCause(), Reason: k.GetReason(), Since: since}, nil
}
