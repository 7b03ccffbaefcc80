package controllers

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/desired"
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

// DefaultPropagationBatch is the default PropagationReconciler.Batch.
const DefaultPropagationBatch = 50 * time.Millisecond

// DefaultPropagationWriteInterval is the least time between two
// propagation writes of one object: a fleet acknowledging one change one
// pod at a time must not write the object once per pod.
const DefaultPropagationWriteInterval = time.Second

// PropagationReconciler writes, under its own field manager
// (v1alpha1.FieldManagerPropagation), how far each Topic's and
// Subscription's policy has reached the sidecars: status.config and the
// conditions Ready and ConfigRejected, from the sidecars' ACKs and NACKs
// that xds.Tracker holds. Writes are coalesced to at most one per object
// per WriteInterval, and none when nothing changed.
type PropagationReconciler struct {
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
	// milliseconds, are read in one pass (DefaultPropagationBatch when
	// zero). Status times come from the acknowledgements, not from when
	// the pass ran.
	Batch time.Duration

	mu sync.Mutex
	// seen is, per object, what the last pass knew of it: the version it
	// first saw and when, and when it last wrote.
	seen map[types.NamespacedName]*propagationSeen
	// settledTopics is propagationSeen.settled by the Topic's xDS
	// resource name, as acknowledgements name it (changeSet.add).
	settledTopics map[string]string
}

type propagationSeen struct {
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
func (r *PropagationReconciler) progress(resource, version string, pods []metav1.PartialObjectMetadata) []podAck {
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

// Reconcile computes one Topic's or Subscription's propagation status. The
// request names either kind: both are looked up (names are unique per kind
// only, so a Topic and a Subscription of one name are both reconciled).
func (r *PropagationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pods, err := listSidecarPods(ctx, r, req.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	counted := slices.DeleteFunc(pods, func(p metav1.PartialObjectMetadata) bool { return !countedPod(&p) })
	return eitherKind(ctx, r, req,
		func(sub *v1alpha1.Subscription) (time.Duration, error) { return r.subscription(ctx, sub, counted) },
		func(topic *v1alpha1.Topic) (time.Duration, error) { return r.topic(ctx, topic, counted) },
		func(kind string) { r.forget(keyOf(kind, req.Namespace, req.Name)) })
}

func (r *PropagationReconciler) subscription(ctx context.Context, sub *v1alpha1.Subscription, pods []metav1.PartialObjectMetadata) (time.Duration, error) {
	selector, err := metav1.LabelSelectorAsSelector(&sub.Spec.Selector)
	if err != nil {
		// It selects no pod (Valid says why), so no pod holds it.
		next := *sub.Status.DeepCopy()
		next.Config = &v1alpha1.ConfigStatus{Version: xds.Version(xdsresource.SubscriptionResource(desired.SubscriptionPolicyOf(*sub)))}
		setInvalid(&next.Conditions, sub.Generation, "spec.selector is invalid (see Valid): the Subscription selects no pod")
		return r.write(ctx, sub, v1alpha1.GroupVersion.WithKind("Subscription"), keyOf("subscription", sub.Namespace, sub.Name), &sub.Status, &next)
	}
	selected := slices.DeleteFunc(slices.Clone(pods), func(p metav1.PartialObjectMetadata) bool { return !selector.Matches(labels.Set(p.Labels)) })
	resource := xdsresource.SubscriptionName(sub.Namespace, sub.Name)
	version := xds.Version(xdsresource.SubscriptionResource(desired.SubscriptionPolicyOf(*sub)))
	engaged := sub.Spec.KillSwitch != nil && sub.Spec.KillSwitch.Engaged
	next := *sub.Status.DeepCopy()
	key := keyOf("subscription", sub.Namespace, sub.Name)
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

func (r *PropagationReconciler) topic(ctx context.Context, topic *v1alpha1.Topic, pods []metav1.PartialObjectMetadata) (time.Duration, error) {
	resource := xdsresource.TopicName(topic.Namespace, topic.Name)
	version := xds.Version(xdsresource.TopicResource(desired.TopicPolicyOf(*topic)))
	next := *topic.Status.DeepCopy()
	key := keyOf("topic", topic.Namespace, topic.Name)
	counts := topic.Spec.Publishers != nil
	all := pods
	inForce, err := r.inForce(ctx, topic)
	if err != nil {
		return 0, err
	}
	if !inForce {
		// Shadowed by a Topic with the same pattern: no pod holds it.
		next.Config = &v1alpha1.ConfigStatus{Version: version}
		setCondition(&next.Conditions, topic.Generation, v1alpha1.ConditionReady, metav1.ConditionFalse, ReasonNotInForce,
			"another Topic with the same subject pattern is in force (see Valid)")
		setCondition(&next.Conditions, topic.Generation, v1alpha1.ConditionConfigRejected, metav1.ConditionFalse, ReasonNotRejected, "no pod holds this Topic")
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
	setCondition(conds, gen, v1alpha1.ConditionReady, metav1.ConditionFalse, ReasonInvalid, msg)
	setCondition(conds, gen, v1alpha1.ConditionConfigRejected, metav1.ConditionFalse, ReasonNotRejected, "no pod holds this policy")
}

// inForce reports whether topic is the one in force for its pattern:
// only the Topics with the same pattern compete (desired.ResolveConflicts).
func (r *PropagationReconciler) inForce(ctx context.Context, topic *v1alpha1.Topic) (bool, error) {
	same, err := topicsWithSubject(ctx, r, topic.Namespace, topic.Spec.Subject)
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
func (r *PropagationReconciler) resume(key types.NamespacedName, version string, written *v1alpha1.ConfigStatus) {
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
// settled at version (see propagationSeen.settled).
func (r *PropagationReconciler) settle(key types.NamespacedName, settled bool, version string) {
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
func (r *PropagationReconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.seen, key)
	delete(r.settledTopics, resourceOf(key))
}

func keyOf(kind, namespace, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: namespace, Name: kind + "/" + name}
}

// resourceOf is the xDS resource of a key of keyOf.
func resourceOf(key types.NamespacedName) string {
	kind, name, _ := strings.Cut(key.Name, "/")
	switch kind {
	case "topic":
		return xdsresource.TopicName(key.Namespace, name)
	case "subscription":
		return xdsresource.SubscriptionName(key.Namespace, name)
	}
	return ""
}

// configStatus computes status.config and whether every counted pod
// applied version.
func (r *PropagationReconciler) configStatus(key types.NamespacedName, version string, acks []podAck, counts bool) (*v1alpha1.ConfigStatus, bool, string) {
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

func (r *PropagationReconciler) seenLocked(key types.NamespacedName) *propagationSeen {
	if r.seen == nil {
		r.seen = map[types.NamespacedName]*propagationSeen{}
	}
	s, ok := r.seen[key]
	if !ok {
		s = &propagationSeen{nacked: map[string]bool{}}
		r.seen[key] = s
	}
	return s
}

func (r *PropagationReconciler) setConditions(conds *[]metav1.Condition, gen int64, ready bool, msg string, acks []podAck) {
	if ready {
		setCondition(conds, gen, v1alpha1.ConditionReady, metav1.ConditionTrue, ReasonApplied, msg)
	} else {
		setCondition(conds, gen, v1alpha1.ConditionReady, metav1.ConditionFalse, ReasonPropagating, msg)
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
		setCondition(conds, gen, v1alpha1.ConditionConfigRejected, metav1.ConditionTrue, ReasonRejected,
			fmt.Sprintf("%d pod(s) refused the current version: %s", len(reasons), strings.Join(reasons, "; ")))
	} else {
		setCondition(conds, gen, v1alpha1.ConditionConfigRejected, metav1.ConditionFalse, ReasonNotRejected, "no pod refused the current version")
	}
}

// events records a Warning for each new refusal and, for a Subscription,
// one when a change of its kill switch has reached every counted pod.
func (r *PropagationReconciler) events(obj client.Object, key types.NamespacedName, version string, ready, engaged bool, acks []podAck) {
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
func (r *PropagationReconciler) write(ctx context.Context, obj client.Object, gvk schemaGVK, key types.NamespacedName, current, next any) (time.Duration, error) {
	before, err := propagationStatus.project(current)
	if err != nil {
		return 0, err
	}
	after, err := propagationStatus.project(next)
	if err != nil {
		return 0, err
	}
	if semanticEqual(before, after) {
		return 0, nil
	}
	interval := r.WriteInterval
	if interval == 0 {
		interval = DefaultPropagationWriteInterval
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
	if err := propagationStatus.apply(ctx, r.Client, obj, gvk, current, next); err != nil {
		return 0, err
	}
	logf.FromContext(ctx).V(1).Info("propagation status written", "object", key)
	return 0, nil
}

// SetupWithManager registers the reconciler, fed by Topic, Subscription
// and sidecar pod changes and by the sidecars' acknowledgements.
func (r *PropagationReconciler) SetupWithManager(mgr ctrl.Manager) error {
	// The tracker is told from stream goroutines, which must never wait
	// on propagation: changes gather in a set, and one goroutine feeds
	// them to the controller.
	acks := make(chan event.GenericEvent)
	changes := &changeSet{wake: make(chan struct{}, 1), names: map[types.NamespacedName]bool{}, resources: map[string]bool{}, settled: r}
	r.Tracker.OnChange(changes.add)
	if err := mgr.Add(changes.feeder(acks)); err != nil {
		return fmt.Errorf("adding the acknowledgement feed: %w", err)
	}
	batch := r.Batch
	if batch == 0 {
		batch = DefaultPropagationBatch
	}
	self := func(_ context.Context, obj client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}}}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("propagation").
		// Status writes (its own and the others') change no version.
		WatchesRawSource(source.Kind(mgr.GetCache(), client.Object(&v1alpha1.Subscription{}), enqueueAfter(batch, self), predicate.GenerationChangedPredicate{})).
		// A Topic's subject decides which Topic is in force.
		WatchesRawSource(source.Kind(mgr.GetCache(), client.Object(&v1alpha1.Topic{}), enqueueAfter(batch, r.topicsOfNamespaceOnSubject), predicate.GenerationChangedPredicate{})).
		// On an update the map function sees the old pod and the new one, so
		// a pod leaving a selection updates that count too.
		WatchesRawSource(source.Kind(mgr.GetCache(), client.Object(podMeta()), enqueueAfter(batch, r.selectedBy))).
		WatchesRawSource(source.Channel(acks, enqueueAfter(batch, self))).
		Complete(r)
}

// changeSet gathers the objects whose acknowledgements changed.
type changeSet struct {
	mu sync.Mutex
	// names are objects; resources the xDS resource names of objects,
	// as acknowledgements name them (a pod's own resource and a
	// collection among them, which feed leaves out).
	names     map[types.NamespacedName]bool
	resources map[string]bool
	wake      chan struct{}
	// settled, if set, leaves out the changes that cannot change a
	// status: one more pod applying the settled version of a Topic for
	// every pod (PropagationReconciler.settledTopics). Without it, a new
	// pod, which applies every such Topic, would requeue each of them (the
	// whole namespace) for no write.
	settled *PropagationReconciler
}

// add gathers the objects of changes. It runs for every pod's every
// acknowledgement, and a new pod's names each Topic of its namespace, so
// it takes each lock once and allocates only for what it queues. Lock
// order: changeSet.mu, then PropagationReconciler.mu; never the other way.
func (c *changeSet) add(changes []xds.Change) {
	added := false
	c.mu.Lock()
	var settledTopics map[string]string
	if c.settled != nil {
		c.settled.mu.Lock()
		settledTopics = c.settled.settledTopics
	}
	consider := func(resource, version string, refused bool) {
		if c.resources[resource] || !isObjectResource(resource) {
			return // queued already, or no object's
		}
		if v, ok := settledTopics[resource]; ok && !refused && version != "" && v == version {
			return
		}
		c.resources[resource] = true
		added = true
	}
	for _, change := range changes {
		if change.Members != nil {
			for name, version := range change.Members {
				consider(name, version, false)
			}
			continue
		}
		consider(change.Resource, change.Version, change.Refused)
	}
	if c.settled != nil {
		c.settled.mu.Unlock()
	}
	c.mu.Unlock()
	if !added {
		return
	}
	select {
	case c.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// addName gathers one object.
func (c *changeSet) addName(nn types.NamespacedName) {
	c.mu.Lock()
	c.names[nn] = true
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// isObjectResource reports whether an xDS resource name is a Topic's or a
// Subscription's: add asks it of every name a new pod acknowledges, and
// ParseName allocates nothing for a valid name.
func isObjectResource(name string) bool {
	parsed, err := xdsresource.ParseName(name)
	return err == nil && (parsed.Kind == xdsresource.KindTopic || parsed.Kind == xdsresource.KindSubscription)
}

// take returns the objects gathered so far, and forgets them.
func (c *changeSet) take() map[types.NamespacedName]bool {
	c.mu.Lock()
	batch, resources := c.names, c.resources
	c.names, c.resources = map[types.NamespacedName]bool{}, map[string]bool{}
	c.mu.Unlock()
	for resource := range resources {
		parsed, err := xdsresource.ParseName(resource)
		if err != nil || parsed.Kind == xdsresource.KindPod || parsed.Kind == xdsresource.KindTopicCollection {
			continue
		}
		batch[types.NamespacedName{Namespace: parsed.Namespace, Name: parsed.Name}] = true
	}
	return batch
}

// feeder is a manager's runnable that feeds the gathered objects to out.
func (c *changeSet) feeder(out chan<- event.GenericEvent) manager.Runnable {
	return manager.RunnableFunc(func(ctx context.Context) error {
		c.feed(ctx, out)
		return nil
	})
}

// feed sends the gathered objects to the controller until ctx ends. The
// request names the object; Reconcile looks up both kinds.
func (c *changeSet) feed(ctx context.Context, out chan<- event.GenericEvent) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		}
		for nn := range c.take() {
			obj := &v1alpha1.Subscription{ObjectMeta: metav1.ObjectMeta{Namespace: nn.Namespace, Name: nn.Name}}
			select {
			case out <- event.GenericEvent{Object: obj}:
			case <-ctx.Done():
				return
			}
		}
	}
}

// topicsOfNamespaceOnSubject maps a Topic to itself and the other Topics
// of its namespace with the same subject: which of them is in force
// depends on all of them.
func (r *PropagationReconciler) topicsOfNamespaceOnSubject(ctx context.Context, obj client.Object) []reconcile.Request {
	reqs := []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}}}
	same, err := topicsWithSubject(ctx, r, obj.GetNamespace(), subjectOf(obj))
	if err != nil {
		logf.FromContext(ctx).Error(err, "listing topics to requeue")
		return reqs
	}
	for _, t := range same {
		if t.Name != obj.GetName() {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: t.Namespace, Name: t.Name}})
		}
	}
	return reqs
}

// selectedBy maps a pod to the Subscriptions and the selecting Topics of
// its namespace whose selector matches it (counts change with it).
func (r *PropagationReconciler) selectedBy(ctx context.Context, obj client.Object) []reconcile.Request {
	set := labels.Set(obj.GetLabels())
	var reqs []reconcile.Request
	var subs v1alpha1.SubscriptionList
	if err := r.List(ctx, &subs, client.InNamespace(obj.GetNamespace())); err == nil {
		for _, s := range subs.Items {
			if sel, err := metav1.LabelSelectorAsSelector(&s.Spec.Selector); err == nil && sel.Matches(set) {
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}})
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
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: t.Namespace, Name: t.Name}})
			}
		}
	}
	return reqs
}
