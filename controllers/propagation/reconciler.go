// Package propagation writes how far each Topic's and Subscription's policy
// has reached the sidecars, from their acknowledgements: status.config and
// the conditions Ready and ConfigRejected.
package propagation

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/desired"
	"github.com/weighstation/weighstation/controllers/enqueue"
	"github.com/weighstation/weighstation/controllers/index"
	"github.com/weighstation/weighstation/controllers/request"
	"github.com/weighstation/weighstation/controllers/sidecarpods"
	"github.com/weighstation/weighstation/controllers/status"
	"github.com/weighstation/weighstation/controllers/xds"
	"github.com/weighstation/weighstation/meshconfig/xdsresource"
)

// Reasons of the propagation conditions and events.
const (
	ReasonApplied      = "Applied"
	ReasonPropagating  = "Propagating"
	ReasonRejected     = "Rejected"
	ReasonNotRejected  = "NotRejected"
	ReasonNotInForce   = "NotInForce"
	ReasonInvalid      = "Invalid"
	ReasonKillEngaged  = "KillSwitchEngaged"
	ReasonKillReleased = "KillSwitchReleased"
)

// MaxRejectedPods bounds status.config.rejected.
const MaxRejectedPods = 10

// DefaultBatch is the default Reconciler.Batch.
const DefaultBatch = 50 * time.Millisecond

// DefaultWriteInterval is the least time between two
// propagation writes of one object: a fleet acknowledging one change one
// pod at a time must not write the object once per pod.
const DefaultWriteInterval = time.Second

// Reconciler writes, under its own field manager
// (v1alpha1.FieldManagerPropagation), how far each Topic's and
// Subscription's policy has reached the sidecars: status.config and the
// conditions Ready and ConfigRejected, from the sidecars' ACKs and NACKs
// that xds.Tracker holds. Writes are coalesced to at most one per object
// per WriteInterval, and none when nothing changed.
type Reconciler struct {
	client.Client
	Tracker  *xds.Tracker
	Recorder recorder.EventRecorder
	// Served, if set, tells when a resource's current version was served
	// (xds.Publisher.ChangedAt): status.config.observedTime. Without it,
	// the first pass that sees a version stands in.
	Served        func(resource string) (time.Time, bool)
	WriteInterval time.Duration
	// Batch is how long a change waits before its object is reconciled,
	// so that the acknowledgements of one push, which arrive over a few
	// milliseconds, are read in one pass (DefaultBatch when
	// zero). Status times come from the acknowledgements, not from when
	// the pass ran.
	Batch time.Duration

	mu sync.Mutex
	// seen is, per object, what the last pass knew of it: the version it
	// first saw and when, and when it last wrote.
	seen map[request.Object]*seenObject
	// settledTopics is seenObject.settled by the Topic's xDS
	// resource name, as acknowledgements name it (changeSet.add).
	settledTopics map[string]string
}

type seenObject struct {
	version    string
	observed   time.Time
	propagated time.Duration // 0 until every counted pod applied version
	lastWrite  time.Time
	// announced is the kill switch state last announced by an Event (nil:
	// none yet, which counts as released).
	announced *bool
	nacked    map[string]bool // pod/version pairs an Event was sent for
	// settled is, for a Topic that applies to every pod, the version that
	// every pod holding the Topic applied, with no refusal, at the last
	// pass ("" otherwise). One more pod applying it changes nothing.
	settled string
}

// +kubebuilder:rbac:groups=weighstation.io,resources=topics/status;subscriptions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// countedPod reports whether a pod of the cache (scheduled, and neither
// Succeeded nor Failed: the cache's field selector) should be running a
// sidecar now: it is not terminating either.
func countedPod(p *metav1.PartialObjectMetadata) bool { return p.DeletionTimestamp == nil }

// podAck is what the tracker knows of one counted pod.
type podAck struct {
	name    string
	applied bool
	nack    *xds.NACK
	holds   bool // the pod holds some version of the resource
}

// progress gathers the counted pods' acknowledgements of one version.
func (r *Reconciler) progress(resource, version string, pods []metav1.PartialObjectMetadata) []podAck {
	nacks := r.Tracker.NACKs(resource)
	out := make([]podAck, 0, len(pods))
	for i := range pods {
		p := &pods[i]
		key := xds.PodKey(p.Namespace, p.Name, string(p.UID))
		acked := r.Tracker.Acked(key, resource)
		a := podAck{name: p.Name, applied: acked == version, holds: acked != ""}
		if n, ok := nacks[key]; ok && n.Version == version {
			a.nack = &n
		}
		out = append(out, a)
	}
	return out
}

// Reconcile computes the propagation status of the Topic or the
// Subscription the request names.
func (r *Reconciler) Reconcile(ctx context.Context, req request.Object) (reconcile.Result, error) {
	pods, err := sidecarpods.List(ctx, r, req.Namespace)
	if err != nil {
		return reconcile.Result{}, err
	}
	counted := slices.DeleteFunc(pods, func(p metav1.PartialObjectMetadata) bool { return !countedPod(&p) })
	return request.Dispatch(ctx, r, req,
		func(sub *v1alpha1.Subscription) (time.Duration, error) { return r.subscription(ctx, req, sub, counted) },
		func(topic *v1alpha1.Topic) (time.Duration, error) { return r.topic(ctx, req, topic, counted) },
		r.forget)
}

func (r *Reconciler) subscription(ctx context.Context, key request.Object, sub *v1alpha1.Subscription, pods []metav1.PartialObjectMetadata) (time.Duration, error) {
	selector, err := metav1.LabelSelectorAsSelector(&sub.Spec.Selector)
	if err != nil {
		// It selects no pod (Valid says why), so no pod holds it.
		next := *sub.Status.DeepCopy()
		next.Config = &v1alpha1.ConfigStatus{Version: xds.Version(xdsresource.SubscriptionResource(desired.SubscriptionPolicyOf(*sub)))}
		setInvalid(&next.Conditions, sub.Generation, "spec.selector is invalid (see Valid): the Subscription selects no pod")
		return r.write(ctx, sub, v1alpha1.GroupVersion.WithKind("Subscription"), key, &sub.Status, &next)
	}
	selected := slices.DeleteFunc(slices.Clone(pods), func(p metav1.PartialObjectMetadata) bool { return !selector.Matches(labels.Set(p.Labels)) })
	resource := xdsresource.SubscriptionName(sub.Namespace, sub.Name)
	version := xds.Version(xdsresource.SubscriptionResource(desired.SubscriptionPolicyOf(*sub)))
	engaged := sub.Spec.KillSwitch != nil && sub.Spec.KillSwitch.Engaged
	next := *sub.Status.DeepCopy()
	acks := r.progress(resource, version, selected)
	r.resume(key, version, sub.Status.Config)
	cfg, ready, msg := r.configStatus(key, version, acks, true)
	if engaged && ready {
		msg += fmt.Sprintf("; the kill switch is engaged in all %d", len(acks))
	} else if engaged {
		msg += fmt.Sprintf("; the kill switch is engaged in %d of them", cfg.AppliedPods)
	}
	next.Config = cfg
	r.setConditions(&next.Conditions, sub.Generation, ready, msg, acks)
	r.events(sub, key, version, ready, engaged, acks)
	return r.write(ctx, sub, v1alpha1.GroupVersion.WithKind("Subscription"), key, &sub.Status, &next)
}

func (r *Reconciler) topic(ctx context.Context, key request.Object, topic *v1alpha1.Topic, pods []metav1.PartialObjectMetadata) (time.Duration, error) {
	resource := xdsresource.TopicName(topic.Namespace, topic.Name)
	version := xds.Version(xdsresource.TopicResource(desired.TopicPolicyOf(*topic)))
	next := *topic.Status.DeepCopy()
	counts := topic.Spec.Publishers != nil
	all := pods
	inForce, err := r.inForce(ctx, topic)
	if err != nil {
		return 0, err
	}
	if !inForce {
		// Shadowed by a Topic with the same pattern: no pod holds it.
		next.Config = &v1alpha1.ConfigStatus{Version: version}
		status.SetCondition(&next.Conditions, topic.Generation, v1alpha1.ConditionReady, metav1.ConditionFalse, ReasonNotInForce,
			"another Topic with the same subject pattern is in force (see Valid)")
		status.SetCondition(&next.Conditions, topic.Generation, v1alpha1.ConditionConfigRejected, metav1.ConditionFalse, ReasonNotRejected, "no pod holds this Topic")
		return r.write(ctx, topic, v1alpha1.GroupVersion.WithKind("Topic"), key, &topic.Status, &next)
	}
	if counts {
		selector, err := metav1.LabelSelectorAsSelector(topic.Spec.Publishers)
		if err != nil {
			// It admits no publisher (Valid says why), so no pod holds it.
			next.Config = &v1alpha1.ConfigStatus{Version: version}
			setInvalid(&next.Conditions, topic.Generation, "spec.publishers is invalid (see Valid): the Topic admits no publisher")
			return r.write(ctx, topic, v1alpha1.GroupVersion.WithKind("Topic"), key, &topic.Status, &next)
		}
		pods = slices.DeleteFunc(slices.Clone(pods), func(p metav1.PartialObjectMetadata) bool { return !selector.Matches(labels.Set(p.Labels)) })
	} else {
		// A Topic for every pod is judged by the pods that hold some
		// version of it or refused the current one: a new pod does not
		// make it un-Ready, and its creation rewrites nothing.
		nacks := r.Tracker.NACKs(resource)
		pods = slices.DeleteFunc(slices.Clone(pods), func(p metav1.PartialObjectMetadata) bool {
			key := xds.PodKey(p.Namespace, p.Name, string(p.UID))
			_, refused := nacks[key]
			return r.Tracker.Acked(key, resource) == "" && !refused
		})
	}
	acks := r.progress(resource, version, pods)
	r.resume(key, version, topic.Status.Config)
	cfg, ready, msg := r.configStatus(key, version, acks, counts)
	if !counts && len(acks) == 0 && len(all) > 0 {
		// Pods run sidecars here, and none holds this Topic yet.
		ready, msg = false, fmt.Sprintf("no pod holds version %s yet", version)
		cfg.PropagationTime = nil
	}
	next.Config = cfg
	r.settle(key, !counts && ready && len(cfg.Rejected) == 0, version)
	r.setConditions(&next.Conditions, topic.Generation, ready, msg, acks)
	r.events(topic, key, version, ready, false, acks)
	return r.write(ctx, topic, v1alpha1.GroupVersion.WithKind("Topic"), key, &topic.Status, &next)
}

// setInvalid sets the propagation conditions of a resource whose selector
// is invalid: no pod holds its policy, so it is not Ready.
func setInvalid(conds *[]metav1.Condition, gen int64, msg string) {
	status.SetCondition(conds, gen, v1alpha1.ConditionReady, metav1.ConditionFalse, ReasonInvalid, msg)
	status.SetCondition(conds, gen, v1alpha1.ConditionConfigRejected, metav1.ConditionFalse, ReasonNotRejected, "no pod holds this policy")
}

// inForce reports whether topic is the one in force for its pattern:
// only the Topics with the same pattern compete (desired.ResolveConflicts).
func (r *Reconciler) inForce(ctx context.Context, topic *v1alpha1.Topic) (bool, error) {
	same, err := index.TopicsWithSubject(ctx, r, topic.Namespace, topic.Spec.Subject)
	if err != nil {
		return false, err
	}
	inForce, _ := desired.ResolveConflicts(same)
	for _, t := range inForce {
		if t.Name == topic.Name {
			return true, nil
		}
	}
	return false, nil
}

// resume takes the observed and propagation times of version from the
// status written before, when this process has not seen the object yet
// (it restarted, or became the leader).
func (r *Reconciler) resume(key request.Object, version string, written *v1alpha1.ConfigStatus) {
	if written == nil || written.Version != version || written.ObservedTime == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.seenLocked(key)
	if s.version != "" {
		return
	}
	s.version, s.observed = version, written.ObservedTime.Time
	if written.PropagationTime != nil {
		s.propagated = written.PropagationTime.Duration
	}
}

// settle records whether the last pass found a Topic for every pod
// settled at version (see seenObject.settled).
func (r *Reconciler) settle(key request.Object, settled bool, version string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.seenLocked(key)
	s.settled = ""
	resource := resourceOf(key)
	delete(r.settledTopics, resource)
	if settled {
		s.settled = version
		if r.settledTopics == nil {
			r.settledTopics = map[string]string{}
		}
		r.settledTopics[resource] = version
	}
}

// forget drops what was remembered of a deleted object.
func (r *Reconciler) forget(key request.Object) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.seen, key)
	delete(r.settledTopics, resourceOf(key))
}

// resourceOf is the xDS resource of a request's object.
func resourceOf(req request.Object) string {
	switch req.Kind {
	case request.Topic:
		return xdsresource.TopicName(req.Namespace, req.Name)
	case request.Subscription:
		return xdsresource.SubscriptionName(req.Namespace, req.Name)
	}
	return ""
}

// configStatus computes status.config and whether every counted pod
// applied version.
func (r *Reconciler) configStatus(key request.Object, version string, acks []podAck, counts bool) (*v1alpha1.ConfigStatus, bool, string) {
	applied, total := int32(0), int32(len(acks))
	var rejected []v1alpha1.ConfigRejection
	for _, a := range acks {
		if a.applied {
			applied++
		}
		if a.nack != nil {
			rejected = append(rejected, v1alpha1.ConfigRejection{Pod: a.name, Reason: a.nack.Reason})
		}
	}
	sort.Slice(rejected, func(i, j int) bool { return rejected[i].Pod < rejected[j].Pod })
	if len(rejected) > MaxRejectedPods {
		rejected = rejected[:MaxRejectedPods]
	}
	ready := applied == total

	now := time.Now()
	served, lastApplied := now, time.Time{}
	if resource := resourceOf(key); resource != "" {
		if r.Served != nil {
			if at, ok := r.Served(resource); ok && at.Before(now) {
				served = at
			}
		}
		lastApplied = r.Tracker.LastApplied(resource)
	}
	r.mu.Lock()
	s := r.seenLocked(key)
	if s.version != version {
		s.version, s.observed, s.propagated = version, served, 0
	}
	if ready && s.propagated == 0 {
		// The last acknowledgement completed it (unless every pod held
		// the version before it was served here: then this pass did).
		done := now
		if lastApplied.After(s.observed) {
			done = lastApplied
		}
		s.propagated = max(done.Sub(s.observed), time.Microsecond)
	}
	cfg := &v1alpha1.ConfigStatus{Version: version, Rejected: rejected, ObservedTime: &metav1.Time{Time: s.observed}}
	if s.propagated > 0 {
		cfg.PropagationTime = &metav1.Duration{Duration: s.propagated.Round(time.Millisecond)}
	}
	r.mu.Unlock()

	if counts {
		cfg.AppliedPods, cfg.TotalPods = applied, total
	}
	msg := fmt.Sprintf("%d of %d pod(s) applied version %s", applied, total, version)
	if !counts {
		msg = fmt.Sprintf("every pod that holds this Topic applied version %s", version)
		if !ready {
			msg = fmt.Sprintf("%d of %d pod(s) that hold this Topic applied version %s", applied, total, version)
		}
	}
	return cfg, ready, msg
}

func (r *Reconciler) seenLocked(key request.Object) *seenObject {
	if r.seen == nil {
		r.seen = map[request.Object]*seenObject{}
	}
	s, ok := r.seen[key]
	if !ok {
		s = &seenObject{nacked: map[string]bool{}}
		r.seen[key] = s
	}
	return s
}

func (r *Reconciler) setConditions(conds *[]metav1.Condition, gen int64, ready bool, msg string, acks []podAck) {
	if ready {
		status.SetCondition(conds, gen, v1alpha1.ConditionReady, metav1.ConditionTrue, ReasonApplied, msg)
	} else {
		status.SetCondition(conds, gen, v1alpha1.ConditionReady, metav1.ConditionFalse, ReasonPropagating, msg)
	}
	var reasons []string
	for _, a := range acks {
		if a.nack != nil {
			reasons = append(reasons, fmt.Sprintf("%s: %s", a.name, a.nack.Reason))
		}
	}
	sort.Strings(reasons)
	if len(reasons) > 0 {
		if len(reasons) > 3 {
			reasons = append(reasons[:3], fmt.Sprintf("and %d more", len(reasons)-3))
		}
		status.SetCondition(conds, gen, v1alpha1.ConditionConfigRejected, metav1.ConditionTrue, ReasonRejected,
			fmt.Sprintf("%d pod(s) refused the current version: %s", len(reasons), strings.Join(reasons, "; ")))
	} else {
		status.SetCondition(conds, gen, v1alpha1.ConditionConfigRejected, metav1.ConditionFalse, ReasonNotRejected, "no pod refused the current version")
	}
}

// events records a Warning for each new refusal and, for a Subscription,
// one when a change of its kill switch has reached every counted pod.
func (r *Reconciler) events(obj client.Object, key request.Object, version string, ready, engaged bool, acks []podAck) {
	if r.Recorder == nil {
		return
	}
	r.mu.Lock()
	s := r.seenLocked(key)
	var newNACKs []podAck
	for _, a := range acks {
		if a.nack != nil && !s.nacked[a.name+"/"+version] {
			s.nacked[a.name+"/"+version] = true
			newNACKs = append(newNACKs, a)
		}
	}
	announce := false
	if _, isSub := obj.(*v1alpha1.Subscription); isSub && ready {
		// Released is the normal state: a Subscription first seen engaged
		// (created so, or after a restart of the operator) is announced.
		was := s.announced != nil && *s.announced
		announce = was != engaged
		s.announced = &engaged
	}
	propagated := s.propagated
	r.mu.Unlock()
	for _, a := range newNACKs {
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonRejected, "Apply", "pod %s refused version %s: %s", a.name, version, a.nack.Reason)
	}
	if announce {
		reason, what := ReasonKillReleased, "released"
		if engaged {
			reason, what = ReasonKillEngaged, "engaged"
		}
		r.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, reason, "Propagate", "kill switch %s in all %d pod(s) in %s", what, len(acks), propagated.Round(time.Millisecond))
	}
}

// write applies the propagation part of the status, at most once per
// WriteInterval per object; it returns when to come back for a write it
// deferred.
func (r *Reconciler) write(ctx context.Context, obj client.Object, gvk schema.GroupVersionKind, key request.Object, current, next any) (time.Duration, error) {
	before, err := status.Propagation.Project(current)
	if err != nil {
		return 0, err
	}
	after, err := status.Propagation.Project(next)
	if err != nil {
		return 0, err
	}
	if equality.Semantic.DeepEqual(before, after) {
		return 0, nil
	}
	interval := r.WriteInterval
	if interval == 0 {
		interval = DefaultWriteInterval
	}
	r.mu.Lock()
	s := r.seenLocked(key)
	wait := interval - time.Since(s.lastWrite)
	if wait > 0 {
		r.mu.Unlock()
		return wait, nil
	}
	s.lastWrite = time.Now()
	r.mu.Unlock()
	if err := status.Propagation.Apply(ctx, r.Client, obj, gvk, current, next); err != nil {
		return 0, err
	}
	logf.FromContext(ctx).V(1).Info("propagation status written", "object", key)
	return 0, nil
}

// SetupWithManager registers the reconciler, fed by Topic, Subscription
// and sidecar pod changes and by the sidecars' acknowledgements. Its
// requests say which kind they name (request.Object).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	// The tracker is told from stream goroutines, which must never wait
	// on propagation: changes gather in a set, and one goroutine feeds
	// them to the controller.
	acks := make(chan event.TypedGenericEvent[request.Object])
	changes := &changeSet{wake: make(chan struct{}, 1), resources: map[string]bool{}, settled: r}
	r.Tracker.OnChange(changes.add)
	if err := mgr.Add(enqueue.Feeder(changes.wake, changes.take, acks)); err != nil {
		return fmt.Errorf("adding the acknowledgement feed: %w", err)
	}
	batch := r.Batch
	if batch == 0 {
		batch = DefaultBatch
	}
	itself := func(_ context.Context, req request.Object) []request.Object { return []request.Object{req} }
	return builder.TypedControllerManagedBy[request.Object](mgr).
		Named("propagation").
		WithLogConstructor(request.LogConstructor(mgr.GetLogger().WithValues("controller", "propagation"))).
		// Status writes (its own and the others') change no version.
		WatchesRawSource(source.TypedKind(mgr.GetCache(), client.Object(&v1alpha1.Subscription{}), enqueue.After(batch, request.Self), predicate.GenerationChangedPredicate{})).
		// A Topic's subject decides which Topic is in force.
		WatchesRawSource(source.TypedKind(mgr.GetCache(), client.Object(&v1alpha1.Topic{}), enqueue.After(batch, r.topicsOfNamespaceOnSubject), predicate.GenerationChangedPredicate{})).
		// On an update the map function sees the old pod and the new one, so
		// a pod leaving a selection updates that count too.
		WatchesRawSource(source.TypedKind(mgr.GetCache(), client.Object(sidecarpods.Meta()), enqueue.After(batch, r.selectedBy))).
		WatchesRawSource(source.TypedChannel(acks, enqueue.After(batch, itself))).
		Complete(r)
}

// topicsOfNamespaceOnSubject maps a Topic to itself and the other Topics
// of its namespace with the same subject: which of them is in force
// depends on all of them.
func (r *Reconciler) topicsOfNamespaceOnSubject(ctx context.Context, obj client.Object) []request.Object {
	reqs := []request.Object{topicRequest(obj.GetNamespace(), obj.GetName())}
	same, err := index.TopicsWithSubject(ctx, r, obj.GetNamespace(), index.SubjectOf(obj))
	if err != nil {
		logf.FromContext(ctx).Error(err, "listing topics to requeue")
		return reqs
	}
	for _, t := range same {
		if t.Name != obj.GetName() {
			reqs = append(reqs, topicRequest(t.Namespace, t.Name))
		}
	}
	return reqs
}

// selectedBy maps a pod to the Subscriptions and the selecting Topics of
// its namespace whose selector matches it (counts change with it).
func (r *Reconciler) selectedBy(ctx context.Context, obj client.Object) []request.Object {
	set := labels.Set(obj.GetLabels())
	var reqs []request.Object
	var subs v1alpha1.SubscriptionList
	if err := r.List(ctx, &subs, client.InNamespace(obj.GetNamespace())); err == nil {
		for _, s := range subs.Items {
			if sel, err := metav1.LabelSelectorAsSelector(&s.Spec.Selector); err == nil && sel.Matches(set) {
				reqs = append(reqs, request.Object{Kind: request.Subscription, NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}})
			}
		}
	}
	var topics v1alpha1.TopicList
	if err := r.List(ctx, &topics, client.InNamespace(obj.GetNamespace())); err == nil {
		for _, t := range topics.Items {
			if t.Spec.Publishers == nil {
				continue
			}
			if sel, err := metav1.LabelSelectorAsSelector(t.Spec.Publishers); err == nil && sel.Matches(set) {
				reqs = append(reqs, topicRequest(t.Namespace, t.Name))
			}
		}
	}
	return reqs
}

func topicRequest(namespace, name string) request.Object {
	return request.Object{Kind: request.Topic, NamespacedName: types.NamespacedName{Namespace: namespace, Name: name}}
}
