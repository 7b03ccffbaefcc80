// Package injectionstatus reports the pods that should carry a supported
// sidecar and do not: Events on the pods, and the condition
// PodsWithoutSidecar on the Subscriptions and Topics that select them.
package injectionstatus

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/sidecarpods"
	"github.com/weighstation/weighstation/controllers/status"
)

// Reasons of the PodsWithoutSidecar condition and of the Events on pods.
const (
	// ReasonSidecarNotInjected: an opted-in pod has no sidecar.
	ReasonSidecarNotInjected = "SidecarNotInjected"
	// ReasonSidecarOutdated: a pod's sidecar is older than the operator
	// supports.
	ReasonSidecarOutdated = "SidecarOutdated"
	// ReasonAllInjected: every selected pod has a supported sidecar.
	ReasonAllInjected = "AllInjected"
	eventActionInject = "Inject"
	// conditionPods is how many pods the condition's message names.
	conditionPods = 3
)

// injectDisabled is webhook.InjectDisabled: the pod label value of
// v1alpha1.InjectLabel that opts a pod of an opted-in namespace out.
const injectDisabled = "disabled"

// Reconciler reports, per namespace, the pods that are opted
// in for the sidecar (the inject label on them or on their namespace) but
// run without it, because the webhook was not called (down, with
// failurePolicy Ignore) or the pod predates the opt-in, and the pods
// whose sidecar is older than MinVersion. Each gets one Warning Event; the
// Subscriptions that select one and the Topics whose publishers do get
// PodsWithoutSidecar, applied under FieldManagerInjection alone.
//
// A request names a namespace (Name; Namespace is empty): whether a pod
// counts depends on its namespace, and so do the objects that select it.
type Reconciler struct {
	// Client reads Subscriptions and Topics and applies their status.
	client.Client
	// Pods reads the injection cache (newCache): pod and
	// namespace metadata.
	Pods     client.Reader
	Recorder recorder.EventRecorder
	// MinVersion is the oldest supported sidecar (MinSidecarVersion when
	// empty).
	MinVersion string
	// Excluded are namespaces whose pods are never reported: the webhook
	// never injects them (webhook.ExcludedNamespaces).
	Excluded []string

	mu sync.Mutex
	// warned holds, per namespace, the pods already given an Event, by
	// UID, with its reason: one Event per pod (per operator process).
	warned map[string]map[types.UID]string
}

// unsupported is a pod without a supported sidecar.
type unsupported struct {
	name, uid, reason, version string
	labels                     labels.Set
}

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=weighstation.io,resources=topics;subscriptions,verbs=get;list;watch
// +kubebuilder:rbac:groups=weighstation.io,resources=topics/status;subscriptions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	namespace := req.Name
	optedIn, exists, err := r.namespaceOptedIn(ctx, namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !exists {
		r.mu.Lock()
		delete(r.warned, namespace)
		r.mu.Unlock()
		return ctrl.Result{}, nil
	}
	pods := sidecarpods.MetaList()
	if err := r.Pods.List(ctx, pods, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the pods of %s: %w", namespace, err)
	}
	if slices.Contains(r.Excluded, namespace) {
		pods.Items = nil // never injected, so never missing a sidecar
	}
	var found []unsupported
	for i := range pods.Items {
		if u, ok := r.judge(&pods.Items[i], optedIn); ok {
			found = append(found, u)
		}
	}
	slices.SortFunc(found, func(a, b unsupported) int { return strings.Compare(a.name, b.name) })
	r.warn(ctx, namespace, found)
	return ctrl.Result{}, r.writeConditions(ctx, namespace, found)
}

// namespaceOptedIn reports whether the namespace carries the inject label,
// and whether it exists.
func (r *Reconciler) namespaceOptedIn(ctx context.Context, namespace string) (optedIn, exists bool, err error) {
	ns := namespaceMeta()
	switch err := r.Pods.Get(ctx, client.ObjectKey{Name: namespace}, ns); {
	case apierrors.IsNotFound(err):
		return false, false, nil
	case err != nil:
		return false, false, fmt.Errorf("reading namespace %s: %w", namespace, err)
	}
	return ns.Labels[v1alpha1.InjectLabel] == v1alpha1.InjectEnabled, true, nil
}

// judge tells whether pod lacks a supported sidecar. A terminating pod is
// not reported: deleting it is the remedy, under way.
func (r *Reconciler) judge(pod *metav1.PartialObjectMetadata, namespaceOptedIn bool) (unsupported, bool) {
	if pod.DeletionTimestamp != nil || pod.Annotations[mirrorPodAnnotation] != "" {
		return unsupported{}, false
	}
	if !namespaceOptedIn && !sidecarpods.IsInjected(pod) {
		return unsupported{}, false
	}
	// Opted out in an opted-in namespace: the webhook configuration's
	// namespace entry never sends it.
	if pod.Labels[v1alpha1.InjectLabel] == injectDisabled {
		return unsupported{}, false
	}
	u := unsupported{name: pod.Name, uid: string(pod.UID), labels: labels.Set(pod.Labels)}
	version, injected := pod.Annotations[v1alpha1.InjectedAnnotation]
	switch {
	case !injected:
		u.reason = ReasonSidecarNotInjected
	case sidecarOutdated(version, r.MinVersion):
		u.reason, u.version = ReasonSidecarOutdated, version
	default:
		return unsupported{}, false
	}
	return u, true
}

// warn records one Warning Event on each pod found that has none yet, and
// forgets the pods of namespace that are no longer found.
func (r *Reconciler) warn(ctx context.Context, namespace string, found []unsupported) {
	r.mu.Lock()
	defer r.mu.Unlock()
	before := r.warned[namespace]
	now := make(map[types.UID]string, len(found))
	for _, u := range found {
		uid := types.UID(u.uid)
		now[uid] = u.reason
		if before[uid] == u.reason {
			continue
		}
		logf.FromContext(ctx).Info("a pod runs without a supported sidecar", "pod", u.name, "reason", u.reason, "version", u.version)
		if r.Recorder == nil {
			continue
		}
		pod := sidecarpods.Meta()
		pod.Namespace, pod.Name, pod.UID = namespace, u.name, uid
		r.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, u.reason, eventActionInject, "%s", r.eventNote(u))
	}
	if r.warned == nil {
		r.warned = map[string]map[types.UID]string{}
	}
	if len(now) == 0 {
		delete(r.warned, namespace)
	} else {
		r.warned[namespace] = now
	}
}

func (r *Reconciler) eventNote(u unsupported) string {
	if u.reason == ReasonSidecarOutdated {
		return fmt.Sprintf("the pod's weighstation sidecar is version %s, older than the oldest this operator supports (%s): "+
			"delete the pod so that its controller recreates it with the current sidecar", u.version, r.minVersion())
	}
	return "the pod is opted in for the weighstation sidecar (label " + v1alpha1.InjectLabel + "=" + v1alpha1.InjectEnabled +
		" on it or its namespace) but was created without it: the injection webhook was not called (it was down, with failurePolicy Ignore, " +
		"or the pod predates the opt-in). Delete the pod so that its controller recreates it; if it comes back without the sidecar, " +
		"check the webhook (kubectl get mutatingwebhookconfiguration, and the operator's logs)"
}

func (r *Reconciler) minVersion() string {
	if r.MinVersion == "" {
		return MinSidecarVersion
	}
	return r.MinVersion
}

// writeConditions sets PodsWithoutSidecar on the namespace's Subscriptions
// and Topics: True on those that select a pod found, False on those that
// had it and select none now. An object that never selected such a pod
// gets no condition, so that the reconciler writes nothing in a namespace
// where every pod is injected.
func (r *Reconciler) writeConditions(ctx context.Context, namespace string, found []unsupported) error {
	groups := groupByLabels(found)
	// Read only (the status written is a copy): lists of thousands of
	// objects are not copied for a reconcile that writes a few.
	var subs v1alpha1.SubscriptionList
	if err := r.List(ctx, &subs, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing the subscriptions of %s: %w", namespace, err)
	}
	for i := range subs.Items {
		sub := &subs.Items[i]
		next := *sub.Status.DeepCopy()
		if len(found) == 0 && meta.FindStatusCondition(next.Conditions, v1alpha1.ConditionPodsWithoutSidecar) == nil {
			continue // nothing to report, nothing to clear
		}
		if !r.condition(&next.Conditions, sub.Generation, &sub.Spec.Selector, groups) {
			continue
		}
		if err := status.Injection.Apply(ctx, r.Client, sub, v1alpha1.GroupVersion.WithKind("Subscription"), &sub.Status, &next); err != nil {
			return err
		}
	}
	var topics v1alpha1.TopicList
	if err := r.List(ctx, &topics, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing the topics of %s: %w", namespace, err)
	}
	for i := range topics.Items {
		topic := &topics.Items[i]
		next := *topic.Status.DeepCopy()
		// Without publishers every pod may publish: the Topic selects no
		// pod in particular, and the Subscriptions and the pods' Events
		// report the pods.
		if topic.Spec.Publishers == nil && meta.FindStatusCondition(next.Conditions, v1alpha1.ConditionPodsWithoutSidecar) == nil {
			continue
		}
		if !r.condition(&next.Conditions, topic.Generation, topic.Spec.Publishers, groups) {
			continue
		}
		if err := status.Injection.Apply(ctx, r.Client, topic, v1alpha1.GroupVersion.WithKind("Topic"), &topic.Status, &next); err != nil {
			return err
		}
	}
	return nil
}

// condition sets PodsWithoutSidecar in conds for the pods of found that
// selector selects (nil or invalid: none), and reports whether conds
// should be written.
func (r *Reconciler) condition(conds *[]metav1.Condition, generation int64, selector *metav1.LabelSelector, found []labelGroup) bool {
	var selected []unsupported
	if selector != nil && len(found) > 0 {
		if s, err := metav1.LabelSelectorAsSelector(selector); err == nil {
			for _, g := range found {
				if s.Matches(g.labels) {
					selected = append(selected, g.pods...)
				}
			}
		}
	}
	// Sorted by name, as found was: the message names the first ones.
	slices.SortFunc(selected, func(a, b unsupported) int { return strings.Compare(a.name, b.name) })
	if len(selected) == 0 {
		if meta.FindStatusCondition(*conds, v1alpha1.ConditionPodsWithoutSidecar) == nil {
			return false
		}
		status.SetCondition(conds, generation, v1alpha1.ConditionPodsWithoutSidecar, metav1.ConditionFalse, ReasonAllInjected,
			"every selected pod runs a supported weighstation sidecar")
		return true
	}
	reason, msg := r.conditionMessage(selected)
	status.SetCondition(conds, generation, v1alpha1.ConditionPodsWithoutSidecar, metav1.ConditionTrue, reason, msg)
	return true
}

// labelGroup is the pods found that carry one set of labels: a selector
// is matched once per set, not once per pod (thousands of pods, made from
// a few templates, against thousands of selectors).
type labelGroup struct {
	labels labels.Set
	pods   []unsupported
}

// groupByLabels groups found (sorted by name) by label set.
func groupByLabels(found []unsupported) []labelGroup {
	var groups []labelGroup
	index := map[string]int{}
	for _, u := range found {
		key := labels.FormatLabels(u.labels)
		i, ok := index[key]
		if !ok {
			i = len(groups)
			index[key] = i
			groups = append(groups, labelGroup{labels: u.labels})
		}
		groups[i].pods = append(groups[i].pods, u)
	}
	return groups
}

// conditionMessage names up to conditionPods pods (found is sorted by
// name) and counts the rest.
func (r *Reconciler) conditionMessage(selected []unsupported) (reason, msg string) {
	reason = ReasonSidecarOutdated
	var missed, outdated int
	names := make([]string, 0, conditionPods)
	for _, u := range selected {
		if u.reason == ReasonSidecarNotInjected {
			missed++
			reason = ReasonSidecarNotInjected
		} else {
			outdated++
		}
		if len(names) < conditionPods {
			what := "not injected"
			if u.reason == ReasonSidecarOutdated {
				what = "sidecar " + u.version
			}
			names = append(names, fmt.Sprintf("%s (%s)", u.name, what))
		}
	}
	more := ""
	if n := len(selected) - len(names); n > 0 {
		more = fmt.Sprintf(" and %d more", n)
	}
	msg = fmt.Sprintf("%d selected pod(s) without a supported sidecar (%d not injected, %d older than %s): %s%s; "+
		"delete them so that their controllers recreate them (see the pods' %s and %s Events)",
		len(selected), missed, outdated, r.minVersion(), strings.Join(names, ", "), more, ReasonSidecarNotInjected, ReasonSidecarOutdated)
	return reason, msg
}
