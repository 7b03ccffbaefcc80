// Package reportstatus writes what the sidecars reported into the status of
// the Topics and Subscriptions they reported on.
package reportstatus

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/enqueue"
	"github.com/weighstation/weighstation/controllers/reports"
	"github.com/weighstation/weighstation/controllers/request"
	"github.com/weighstation/weighstation/controllers/status"
)

// Defaults of the report status writer.
const (
	// DefaultWriteInterval is the least time between two report writes
	// of one object.
	DefaultWriteInterval = 10 * time.Second
	// DefaultPods is how many pods status.pods lists.
	DefaultPods = 10
	// batch gathers the reports of one object's pods, which arrive
	// spread over each interval, into one pass.
	batch = time.Second
)

// Reconciler writes, under its own field manager
// (v1alpha1.FieldManagerReports), what the sidecars reported: a
// Subscription's aggregate latency, drops, worst pods, effective kill
// state and Degraded; a Topic's publish counts. It writes an object at
// most once per WriteInterval, and only on a material change (see
// material.go).
type Reconciler struct {
	client.Client
	Reports       *reports.Store
	WriteInterval time.Duration
	// Pods is how many pods status.pods lists (at most
	// v1alpha1.MaxReportedPods).
	Pods int

	mu     sync.Mutex
	writes map[request.Object]lastWrite
}

// lastWrite is an object's last report write: when (the write interval
// runs from it), and for a Subscription the noise bands of the latencies
// it wrote, for the next test of a material change.
type lastWrite struct {
	at    time.Time
	bands latencyBands
}

// latencyBands are the noise bands of one status's latencies, by
// latencyMoved's names of them.
type latencyBands map[string]reports.Bands

// The names of a status's distributions, for latencyBands and the
// material-change messages.
const (
	endToEnd = "end-to-end"
	dwell    = "dwell"
)

// podDistribution names a listed pod's distribution ("pod a dwell").
func podDistribution(pod, distribution string) string { return "pod " + pod + " " + distribution }

func bandsOfSummary(s reports.SubscriptionSummary, listed []v1alpha1.SubscriptionPodStatus) latencyBands {
	out := latencyBands{endToEnd: s.EndToEnd.Bands, dwell: s.Dwell.Bands}
	for i := range listed { // s.Pods in the same order
		out[podDistribution(s.Pods[i].Pod, endToEnd)] = s.Pods[i].EndToEnd.Bands
		out[podDistribution(s.Pods[i].Pod, dwell)] = s.Pods[i].Dwell.Bands
	}
	return out
}

// movedBeyondNoise judges a latency against the bands last written and
// next's. A written value outside its remembered band (as after another
// replica's write) is taken as exact.
type movedBeyondNoise struct{ written, next latencyBands }

func (m movedBeyondNoise) between(curWhat, nextWhat string, i int, cur, next time.Duration) bool {
	was, now := reports.Point(cur), reports.Point(next)
	if b, ok := m.written[curWhat]; ok && b[i].Low <= cur && cur <= b[i].High {
		was = b[i]
	}
	if b, ok := m.next[nextWhat]; ok {
		now = b[i]
	}
	return reports.Apart(was, now)
}

// Reconcile writes the report status of the Topic or the Subscription
// the request names.
func (r *Reconciler) Reconcile(ctx context.Context, req request.Object) (reconcile.Result, error) {
	return request.Dispatch(ctx, r, req,
		func(sub *v1alpha1.Subscription) (time.Duration, error) { return r.subscription(ctx, req, sub) },
		func(topic *v1alpha1.Topic) (time.Duration, error) { return r.topic(ctx, req, topic) },
		r.forget)
}

func (r *Reconciler) subscription(ctx context.Context, key request.Object, sub *v1alpha1.Subscription) (time.Duration, error) {
	if wait := r.untilWritable(key); wait > 0 {
		// Written within the interval: nothing could be written now, so the
		// summary (merging every pod's histograms) waits for the requeue.
		return wait, nil
	}
	next := *sub.Status.DeepCopy()
	summary, ok := r.Reports.Subscription(sub.Namespace, sub.Name)
	r.fillSubscription(&next, summary, ok)
	verdict, reason, msg := degraded(&next)
	status.SetCondition(&next.Conditions, sub.Generation, v1alpha1.ConditionDegraded, verdict, reason, msg)
	nextBands := bandsOfSummary(summary, next.Pods)
	r.mu.Lock()
	written := r.writes[key].bands
	r.mu.Unlock()
	why := materialSubscriptionChange(&sub.Status, &next, movedBeyondNoise{written: written, next: nextBands})
	if why == "" {
		return 0, nil
	}
	return r.write(ctx, sub, v1alpha1.GroupVersion.WithKind("Subscription"), key, why, &sub.Status, &next, nextBands)
}

// fillSubscription sets the report fields of st from summary (ok: some pod
// reported in the window).
func (r *Reconciler) fillSubscription(st *v1alpha1.SubscriptionStatus, s reports.SubscriptionSummary, ok bool) {
	st.Aggregate, st.Pods, st.Dropped, st.Killed = nil, nil, 0, ""
	if !ok {
		return
	}
	agg := &v1alpha1.AggregateStatus{
		Dwell:     latencySummary(s.Dwell),
		Delivered: s.Delivered,
		Dropped:   reasonCounts(s.Dropped),
		Pods:      int32(s.ReportingPods),
		StalePods: int32(s.StalePods),
		// Shed latency is marked, never hidden: the percentiles then
		// cover fewer reports than Pods sent.
		LatencyShedReports: int32(s.ShedReports),
		WindowStart:        metav1.NewTime(s.WindowStart),
		Window:             metav1.Duration{Duration: s.Window},
	}
	if e2e := latencySummary(s.EndToEnd); e2e != nil {
		agg.LatencySummary = *e2e
	}
	st.Aggregate = agg
	for _, d := range s.Dropped {
		st.Dropped += d.Count
	}
	pods := r.Pods
	if pods <= 0 {
		pods = DefaultPods
	}
	for _, p := range s.Pods[:min(len(s.Pods), pods, v1alpha1.MaxReportedPods)] {
		ps := v1alpha1.SubscriptionPodStatus{
			Name:           p.Pod,
			Delivered:      p.Delivered,
			Dropped:        reasonCounts(p.Dropped),
			Latency:        latencySummary(p.EndToEnd),
			Dwell:          latencySummary(p.Dwell),
			LastReportTime: &metav1.Time{Time: p.LastReport},
			Stale:          p.Stale,
		}
		if p.Kill.Killed {
			ps.Killed = &v1alpha1.PodKill{Reason: v1alpha1.KillReason(p.Kill.Cause), Since: metav1.NewTime(p.Kill.Since)}
		}
		st.Pods = append(st.Pods, ps)
	}
	st.Killed = killedSummary(s)
}

// killedSummary renders the effective kill state: "Manual" when every
// reporting pod has the switch engaged, otherwise the cause and how many
// of the reporting pods (stale ones left out), as "Auto 2/5 pods".
func killedSummary(s reports.SubscriptionSummary) string {
	reporting := s.ReportingPods - s.StalePods
	switch {
	case reporting <= 0:
		return ""
	case s.KilledManual == reporting:
		return string(v1alpha1.KillManual)
	case s.KilledManual > 0:
		return fmt.Sprintf("%s %d/%d pods", v1alpha1.KillManual, s.KilledManual, reporting)
	case s.KilledAuto > 0:
		return fmt.Sprintf("%s %d/%d pods", v1alpha1.KillAuto, s.KilledAuto, reporting)
	case s.KilledShed > 0:
		return fmt.Sprintf("%s %d/%d pods", v1alpha1.KillShed, s.KilledShed, reporting)
	}
	return ""
}

func (r *Reconciler) topic(ctx context.Context, key request.Object, topic *v1alpha1.Topic) (time.Duration, error) {
	if wait := r.untilWritable(key); wait > 0 {
		return wait, nil
	}
	next := *topic.Status.DeepCopy()
	next.Publish = nil
	if s, ok := r.Reports.Topic(topic.Namespace, topic.Name); ok {
		next.Publish = &v1alpha1.PublishStatus{
			Attempts:    s.Attempts,
			Forwarded:   s.Forwarded,
			Refused:     reasonCounts(s.Refused),
			Pods:        int32(s.Pods),
			WindowStart: metav1.NewTime(s.WindowStart),
			Window:      metav1.Duration{Duration: s.Window},
		}
	}
	why := materialTopicChange(&topic.Status, &next)
	if why == "" {
		return 0, nil
	}
	return r.write(ctx, topic, v1alpha1.GroupVersion.WithKind("Topic"), key, why, &topic.Status, &next, nil)
}

// write applies the report part of the status, at most once per
// WriteInterval per object, and remembers bands, the noise bands of the
// latencies it writes (nil for a Topic); it returns when to come back for
// a write it deferred.
func (r *Reconciler) write(ctx context.Context, obj client.Object, gvk schema.GroupVersionKind, key request.Object, why string, current, next any, bands latencyBands) (time.Duration, error) {
	r.mu.Lock()
	if wait := r.untilWritableLocked(key); wait > 0 {
		r.mu.Unlock()
		return wait, nil
	}
	if r.writes == nil {
		r.writes = map[request.Object]lastWrite{}
	}
	// The interval runs from the attempt, failed or not; the bands are
	// those written, so they change only once the write succeeded.
	last := r.writes[key]
	last.at = time.Now()
	r.writes[key] = last
	r.mu.Unlock()
	if err := status.Reports.Apply(ctx, r.Client, obj, gvk, current, next); err != nil {
		return 0, err
	}
	r.mu.Lock()
	if last, ok := r.writes[key]; ok { // not forgotten meanwhile
		last.bands = bands
		r.writes[key] = last
	}
	r.mu.Unlock()
	logf.FromContext(ctx).V(1).Info("report status written", "object", key, "why", why)
	return 0, nil
}

// untilWritable is how long until the object may be written again (0:
// now).
func (r *Reconciler) untilWritable(key request.Object) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.untilWritableLocked(key)
}

func (r *Reconciler) untilWritableLocked(key request.Object) time.Duration {
	last, ok := r.writes[key]
	if !ok {
		return 0
	}
	interval := r.WriteInterval
	if interval <= 0 {
		interval = DefaultWriteInterval
	}
	return max(interval-time.Since(last.at), 0)
}

func (r *Reconciler) forget(key request.Object) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.writes, key)
}

// SetupWithManager registers the reconciler, fed by the report store's
// changes; its writes follow reports, not spec changes. Its requests say
// which kind they name (request.Object).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	changed := make(chan event.TypedGenericEvent[request.Object])
	changes := enqueue.NewSet[request.Object]()
	r.Reports.OnChange(func(kind, namespace, name string) {
		nn := types.NamespacedName{Namespace: namespace, Name: name}
		switch kind {
		case reports.KindSubscription:
			changes.Add(request.Object{Kind: request.Subscription, NamespacedName: nn})
		case reports.KindTopic:
			changes.Add(request.Object{Kind: request.Topic, NamespacedName: nn})
		}
	})
	if err := mgr.Add(changes.Feeder(changed)); err != nil {
		return fmt.Errorf("adding the report feed: %w", err)
	}
	itself := func(_ context.Context, req request.Object) []request.Object { return []request.Object{req} }
	return builder.TypedControllerManagedBy[request.Object](mgr).
		Named("reports").
		WithLogConstructor(request.LogConstructor(mgr.GetLogger().WithValues("controller", "reports"))).
		WatchesRawSource(source.TypedChannel(changed, enqueue.After(batch, itself))).
		Complete(r)
}

func latencySummary(l reports.Latency) *v1alpha1.LatencySummary {
	if l.Count == 0 {
		return nil
	}
	d := func(x time.Duration) metav1.Duration { return metav1.Duration{Duration: x} }
	return &v1alpha1.LatencySummary{P50: d(l.P50), P90: d(l.P90), P99: d(l.P99), P999: d(l.P999), P9999: d(l.P9999), Max: d(l.Max), Count: l.Count}
}

func reasonCounts(in []reports.ReasonCount) []v1alpha1.ReasonCount {
	var out []v1alpha1.ReasonCount
	for _, c := range in {
		out = append(out, v1alpha1.ReasonCount{Reason: c.Reason, Count: c.Count})
	}
	return out
}
