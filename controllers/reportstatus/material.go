package reportstatus

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/reports"
)

// What makes a new report status worth a write. Latency moves with every
// report, so writing whatever differs would write every object at every
// report: the etcd load that keeps other projects' dynamic data out of
// status. A change is material when it says something new: a percentile
// that moved by more than one histogram bucket beyond what sampling alone
// explains (reports/noise.go), a count over the window that changed
// (delivered, measured, dropped, refused, published), a pod that joined,
// left, went stale or was killed, or Degraded's verdict. The window's
// start and the last report times alone are not. A steady flow keeps its
// window counts exactly (reports.Store counts each pod's last window of
// reports), so it writes nothing.

// latencyJudge tells whether a written percentile or max moved
// materially.
type latencyJudge interface {
	// between compares the value written for one distribution with the
	// next for another (a pod that replaced another in the list): the
	// distributions as latencyMoved names them ("end-to-end", "pod a
	// dwell"), i the value in reports.Bands' order.
	between(curWhat, nextWhat string, i int, cur, next time.Duration) bool
}

// materialSubscriptionChange returns why next differs materially from
// cur ("" when it does not).
func materialSubscriptionChange(cur, next *v1alpha1.SubscriptionStatus, moved latencyJudge) string {
	switch {
	case (cur.Aggregate == nil) != (next.Aggregate == nil):
		return "reports began or ended"
	case cur.Killed != next.Killed:
		return fmt.Sprintf("kill state %q -> %q", cur.Killed, next.Killed)
	case cur.Dropped != next.Dropped:
		return fmt.Sprintf("dropped %d -> %d", cur.Dropped, next.Dropped)
	}
	if cur.Aggregate != nil {
		a, b := cur.Aggregate, next.Aggregate
		if a.Count != b.Count || a.Delivered != b.Delivered {
			return fmt.Sprintf("%d measured, %d delivered -> %d, %d", a.Count, a.Delivered, b.Count, b.Delivered)
		}
		if a.LatencyShedReports != b.LatencyShedReports {
			return fmt.Sprintf("latency shed from %d -> %d reports", a.LatencyShedReports, b.LatencyShedReports)
		}
		if a.Pods != b.Pods || a.StalePods != b.StalePods {
			return fmt.Sprintf("pods %d (%d stale) -> %d (%d stale)", a.Pods, a.StalePods, b.Pods, b.StalePods)
		}
		if !slices.Equal(a.Dropped, b.Dropped) {
			return "drops by reason changed"
		}
		if why := latencyMoved(endToEnd, &a.LatencySummary, &b.LatencySummary, moved); why != "" {
			return why
		}
		if why := latencyMoved(dwell, a.Dwell, b.Dwell, moved); why != "" {
			return why
		}
	}
	cut := next.Aggregate != nil && int(next.Aggregate.Pods) > len(next.Pods)
	if why := listedPodsChanged(cur.Pods, next.Pods, cut, moved); why != "" {
		return why
	}
	if why := conditionChanged(cur.Conditions, next.Conditions, v1alpha1.ConditionDegraded); why != "" {
		return why
	}
	return ""
}

// listedPodsChanged compares the listed pods by name: their order is by
// p99, which sampling noise reorders. When the list is cut (more pods
// report than it lists), noise also swaps pods at its end: a pod that
// left the list for another is then material only when they are not
// alike, the one listed now stale or killed, or its p99 apart from the
// leaver's beyond the noise. Uncut, the list is every reporting pod, and
// another name is another pod.
func listedPodsChanged(cur, next []v1alpha1.SubscriptionPodStatus, cut bool, moved latencyJudge) string {
	if len(cur) != len(next) {
		return fmt.Sprintf("%d pods listed -> %d", len(cur), len(next))
	}
	was := make(map[string]*v1alpha1.SubscriptionPodStatus, len(cur))
	for i := range cur {
		was[cur[i].Name] = &cur[i]
	}
	var joined []*v1alpha1.SubscriptionPodStatus
	for i := range next {
		b := &next[i]
		a, ok := was[b.Name]
		if !ok {
			joined = append(joined, b)
			continue
		}
		delete(was, b.Name)
		if why := podChanged(a, b, moved); why != "" {
			return why
		}
	}
	left := slices.SortedFunc(maps.Values(was), func(a, b *v1alpha1.SubscriptionPodStatus) int { return strings.Compare(a.Name, b.Name) })
	for i, b := range joined { // as many joined as left
		a := left[i]
		if !cut || b.Stale || b.Killed != nil || p99Moved(a, b, moved) {
			return fmt.Sprintf("pod %s listed instead of %s", b.Name, a.Name)
		}
	}
	return ""
}

// podChanged compares one pod listed in both.
func podChanged(a, b *v1alpha1.SubscriptionPodStatus, moved latencyJudge) string {
	switch {
	case a.Stale != b.Stale:
		return fmt.Sprintf("pod %s stale: %t", b.Name, b.Stale)
	case a.Delivered != b.Delivered:
		return fmt.Sprintf("pod %s delivered %d -> %d", b.Name, a.Delivered, b.Delivered)
	case !killEqual(a.Killed, b.Killed):
		return fmt.Sprintf("pod %s kill state changed", b.Name)
	case !slices.Equal(a.Dropped, b.Dropped):
		return fmt.Sprintf("pod %s drops changed", b.Name)
	}
	if why := latencyMoved(podDistribution(b.Name, endToEnd), a.Latency, b.Latency, moved); why != "" {
		return why
	}
	return latencyMoved(podDistribution(b.Name, dwell), a.Dwell, b.Dwell, moved)
}

// p99Moved reports whether the pod that joined the list is apart, by its
// end-to-end p99, from the one that left it.
func p99Moved(left, joined *v1alpha1.SubscriptionPodStatus, moved latencyJudge) bool {
	if (left.Latency == nil) != (joined.Latency == nil) {
		return true
	}
	if left.Latency == nil {
		return false
	}
	return moved.between(podDistribution(left.Name, endToEnd), podDistribution(joined.Name, endToEnd), reports.BandP99, left.Latency.P99.Duration, joined.Latency.P99.Duration)
}

// materialTopicChange is materialSubscriptionChange for a Topic's publish
// counts over the window.
func materialTopicChange(cur, next *v1alpha1.TopicStatus) string {
	a, b := cur.Publish, next.Publish
	switch {
	case (a == nil) != (b == nil):
		return "reports began or ended"
	case a == nil:
		return ""
	case a.Attempts != b.Attempts || a.Forwarded != b.Forwarded:
		return fmt.Sprintf("%d attempts, %d forwarded -> %d, %d", a.Attempts, a.Forwarded, b.Attempts, b.Forwarded)
	case a.Pods != b.Pods:
		return fmt.Sprintf("pods %d -> %d", a.Pods, b.Pods)
	case !slices.Equal(a.Refused, b.Refused):
		return "refusals changed"
	}
	return ""
}

// latencyMoved says which percentile of what moved materially ("" for
// none).
func latencyMoved(what string, a, b *v1alpha1.LatencySummary, moved latencyJudge) string {
	switch {
	case a == nil && b == nil:
		return ""
	case a == nil || b == nil:
		return what + " latency appeared or vanished"
	}
	for i, p := range []struct {
		name string
		a, b metav1.Duration
	}{{"p50", a.P50, b.P50}, {"p90", a.P90, b.P90}, {"p99", a.P99, b.P99}, {"p99.9", a.P999, b.P999}, {"p99.99", a.P9999, b.P9999}, {"max", a.Max, b.Max}} {
		if moved.between(what, what, i, p.a.Duration, p.b.Duration) {
			return fmt.Sprintf("%s %s %s -> %s", what, p.name, p.a.Duration, p.b.Duration)
		}
	}
	return ""
}

func killEqual(a, b *v1alpha1.PodKill) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Reason == b.Reason && a.Since.Equal(&b.Since)
}

// conditionChanged reports a change of one condition's status or reason.
func conditionChanged(cur, next []metav1.Condition, condType string) string {
	var a, b metav1.Condition
	for _, c := range cur {
		if c.Type == condType {
			a = c
		}
	}
	for _, c := range next {
		if c.Type == condType {
			b = c
		}
	}
	if a.Status != b.Status || a.Reason != b.Reason {
		return fmt.Sprintf("%s %s/%s -> %s/%s", condType, a.Status, a.Reason, b.Status, b.Reason)
	}
	return ""
}

// Drop reasons that mean lost messages, for Degraded; the others (closed,
// unsubscribed, killed, unsupported) are what the application or its
// operator asked for. shutdown is what a stopping sidecar could not
// deliver within its -drain-grace.
var lossReasons = []string{"overflow", "budget", "shed", "connection", "shutdown"}

// Reasons of the Degraded condition.
const (
	ReasonNoReports      = "NoReports"
	ReasonHealthy        = "Healthy"
	ReasonTrouble        = "Trouble"
	degradedMaxListedPod = 3
)

// degraded judges a Subscription's report status: stale pods, refused
// configuration (from propagation's status.config.rejected), tripped
// breakers and drops that mean loss.
func degraded(st *v1alpha1.SubscriptionStatus) (metav1.ConditionStatus, string, string) {
	agg := st.Aggregate
	if agg == nil {
		return metav1.ConditionUnknown, ReasonNoReports, "no sidecar reported in the window"
	}
	var trouble []string
	if agg.StalePods > 0 {
		var names []string
		for _, p := range st.Pods {
			if p.Stale {
				names = append(names, p.Name)
			}
		}
		trouble = append(trouble, fmt.Sprintf("%d pod(s) stopped reporting%s", agg.StalePods, listed(names)))
	}
	if st.Config != nil && len(st.Config.Rejected) > 0 {
		var names []string
		for _, r := range st.Config.Rejected {
			names = append(names, r.Pod)
		}
		trouble = append(trouble, fmt.Sprintf("%d pod(s) refused the configuration%s", len(st.Config.Rejected), listed(names)))
	}
	var tripped []string
	for _, p := range st.Pods {
		if p.Killed != nil && p.Killed.Reason == v1alpha1.KillAuto {
			tripped = append(tripped, p.Name)
		}
	}
	if len(tripped) > 0 {
		trouble = append(trouble, fmt.Sprintf("the breaker tripped in %d pod(s)%s", len(tripped), listed(tripped)))
	}
	if agg.LatencyShedReports > 0 {
		trouble = append(trouble, fmt.Sprintf("the operator shed the latency of %d report(s) at its report memory cap (-report-max-bytes): the percentiles leave them out", agg.LatencyShedReports))
	}
	var lost []string
	for _, d := range agg.Dropped {
		if slices.Contains(lossReasons, d.Reason) && d.Count > 0 {
			lost = append(lost, fmt.Sprintf("%d %s", d.Count, d.Reason))
		}
	}
	if len(lost) > 0 {
		trouble = append(trouble, "messages lost in the window: "+strings.Join(lost, ", "))
	}
	if len(trouble) == 0 {
		return metav1.ConditionFalse, ReasonHealthy, fmt.Sprintf("%d pod(s) reporting, no loss, no stale pod, no tripped breaker", agg.Pods)
	}
	return metav1.ConditionTrue, ReasonTrouble, strings.Join(trouble, "; ")
}

func listed(names []string) string {
	if len(names) == 0 {
		return ""
	}
	slices.Sort(names)
	if len(names) > degradedMaxListedPod {
		return fmt.Sprintf(" (%s and %d more)", strings.Join(names[:degradedMaxListedPod], ", "), len(names)-degradedMaxListedPod)
	}
	return " (" + strings.Join(names, ", ") + ")"
}
