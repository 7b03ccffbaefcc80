// Package podconfig keeps the desired configuration of every sidecar pod
// (meshconfig.PodConfig) in a desired.Sink, which the xDS server publishes.
package podconfig

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/desired"
	"github.com/weighstation/weighstation/controllers/enqueue"
	"github.com/weighstation/weighstation/controllers/sidecarpods"
	"github.com/weighstation/weighstation/meshconfig"
)

// Reconciler keeps the desired configuration of every sidecar pod
// in Store. It runs on Pod changes and on every Topic or Subscription change
// of the pod's namespace.
type Reconciler struct {
	client.Client
	Store    desired.Sink
	Defaults meshconfig.Defaults
	// AccessMode is the operator's -access-mode, for the pods of
	// namespaces without the v1alpha1.AccessModeLabel label.
	AccessMode string
	// MaxTopics caps the Topics in force per namespace (<= 0: none; see
	// desired.WithinLimit).
	MaxTopics int

	// mu makes each reconcile's read of the cache and write to Store one
	// step, so writes land in the order of the reads: a shared Topic or
	// Subscription resource is written by every pod that names it, and the
	// initial sync runs beside the controller's worker.
	mu sync.Mutex
	// views holds, per namespace, the last desired.View and the
	// fingerprint of the specs it was prepared from: a change of one
	// Topic's spec requeues every pod of the namespace, and they all share
	// one View (guarded by mu). One View is kept per namespace that had
	// sidecar pods; it holds the namespace's policies, as the cache does.
	views map[string]preparedView
	seed  maphash.Seed
	// topicsPublished holds the namespaces whose Topics this replica
	// published (guarded by mu).
	topicsPublished map[string]bool
	// exclusionKeys is, per pod, the View.ExclusionKey of the View its
	// part was last computed under (guarded by mu): reconcileTopics
	// computes again only the pods computed under another.
	exclusionKeys map[types.NamespacedName]uint64

	// staleMu guards stale alone: the event handlers mark a namespace
	// there, on the informers' goroutines, and must never wait for a
	// reconcile (which holds mu).
	staleMu sync.Mutex
	// stale holds the namespaces whose Topics or Subscriptions changed
	// since their View was prepared: a pod of any other namespace is
	// configured from its View as it is, without listing the namespace's
	// Topics and Subscriptions (thousands, in a large namespace).
	stale map[string]bool
}

// markStale records that a namespace's Topics or Subscriptions changed.
func (r *Reconciler) markStale(namespace string) {
	r.staleMu.Lock()
	if r.stale == nil {
		r.stale = map[string]bool{}
	}
	r.stale[namespace] = true
	r.staleMu.Unlock()
}

// currentView returns the namespace's View, listing its Topics and
// Subscriptions only if one changed since it was prepared (or it never
// was). The mark is cleared before the lists are read, so a change that
// the lists miss marks it again. r.mu must be held.
func (r *Reconciler) currentView(ctx context.Context, namespace string) (*desired.View, error) {
	r.staleMu.Lock()
	stale := r.stale[namespace]
	delete(r.stale, namespace)
	r.staleMu.Unlock()
	if p, ok := r.views[namespace]; ok && !stale {
		return p.view, nil
	}
	var topics v1alpha1.TopicList
	if err := r.List(ctx, &topics, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		r.markStale(namespace)
		return nil, fmt.Errorf("listing topics in %s: %w", namespace, err)
	}
	var subscriptions v1alpha1.SubscriptionList
	if err := r.List(ctx, &subscriptions, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		r.markStale(namespace)
		return nil, fmt.Errorf("listing subscriptions in %s: %w", namespace, err)
	}
	return r.viewOf(namespace, topics.Items, subscriptions.Items), nil
}

// staleOnChange marks the namespace of each event's object stale before
// the watch's handler queues anything: a pod it requeues is then configured
// from a View that has the change. A watch runs its predicates in order,
// then its handler, so this goes last: only events that pass the others
// mark.
func (r *Reconciler) staleOnChange() predicate.Predicate {
	return predicate.NewPredicateFuncs(func(obj client.Object) bool {
		r.markStale(obj.GetNamespace())
		return true
	})
}

type preparedView struct {
	fingerprint uint64
	view        *desired.View
}

// viewOf returns the namespace's View of these Topics and Subscriptions,
// prepared again only when one of their specs changed: a spec's change
// changes its generation, and a re-created object has another UID.
// Compute reads nothing else of them (status and metadata do not count).
func (r *Reconciler) viewOf(namespace string, topics []v1alpha1.Topic, subscriptions []v1alpha1.Subscription) *desired.View {
	if r.views == nil {
		r.views = map[string]preparedView{}
		r.topicsPublished = map[string]bool{}
		r.exclusionKeys = map[types.NamespacedName]uint64{}
		r.seed = maphash.MakeSeed()
	}
	// The cache lists in no fixed order: the fingerprint is a sum over
	// the objects.
	var fingerprint uint64
	var buf [8]byte
	mix := func(kind string, m *metav1.ObjectMeta) {
		var h maphash.Hash
		h.SetSeed(r.seed)
		h.WriteString(kind)
		h.WriteString(m.Name)
		h.WriteString(string(m.UID))
		binary.LittleEndian.PutUint64(buf[:], uint64(m.Generation))
		h.Write(buf[:])
		fingerprint += h.Sum64()
	}
	for i := range topics {
		mix("T", &topics[i].ObjectMeta)
	}
	for i := range subscriptions {
		mix("S", &subscriptions[i].ObjectMeta)
	}
	if p, ok := r.views[namespace]; ok && p.fingerprint == fingerprint {
		return p.view
	}
	within, _ := desired.WithinLimit(topics, r.MaxTopics)
	view := desired.NewView(namespace, within, subscriptions)
	r.views[namespace] = preparedView{fingerprint: fingerprint, view: view}
	return view
}

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=weighstation.io,resources=topics;subscriptions,verbs=get;list;watch

// Reconcile computes the pod's configuration and stores it; a pod that is
// gone or no longer carries the sidecar loses its configuration.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if req.Name == "" {
		return r.reconcileTopics(ctx, req.Namespace)
	}
	log := logf.FromContext(ctx)
	pod := sidecarpods.Meta()
	if err := r.Get(ctx, req.NamespacedName, pod); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("getting pod: %w", err)
		}
		delete(r.exclusionKeys, req.NamespacedName)
		if r.Store.Delete(req.NamespacedName) {
			log.Info("forgot pod configuration: the pod is gone or no longer carries the sidecar")
		}
		return ctrl.Result{}, nil
	}
	if !sidecarpods.IsInjected(pod) {
		delete(r.exclusionKeys, req.NamespacedName)
		r.Store.Delete(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	mode, err := r.accessModeOf(ctx, pod.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	view, err := r.currentView(ctx, pod.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !r.topicsPublished[pod.Namespace] {
		// The namespace's first pod since this replica started: its
		// Topics go first, so that no sidecar is served a configuration
		// without them. After that, the namespace's own request
		// (reconcileTopics) publishes them, once per batch of changes
		// instead of once per pod.
		r.Store.SetTopics(pod.Namespace, view.Topics())
		r.topicsPublished[pod.Namespace] = true
	}
	part, problems, err := view.ComputePart(desired.Pod{Namespace: pod.Namespace, Name: pod.Name, Labels: pod.Labels, Annotations: pod.Annotations, AccessMode: mode}, r.Defaults)
	if err != nil {
		// The pod's own annotations are invalid: this pod keeps its last
		// good configuration. Retrying cannot help until the pod changes,
		// which requeues it anyway.
		log.Error(err, "keeping the last good configuration")
		return ctrl.Result{}, nil
	}
	if len(problems) > 0 {
		// An invalid Topic or Subscription selects nothing and the rest is
		// configured; its own reconciler reports it in its status and an
		// Event.
		log.V(1).Info("resources left out", "problems", fmt.Sprint(problems))
	}
	r.exclusionKeys[req.NamespacedName] = view.ExclusionKey()
	if r.Store.SetPod(part, pod.UID) {
		log.Info("pod configuration changed", "excludedTopics", len(part.Excluded), "subscriptions", len(part.Subscriptions))
	}
	return ctrl.Result{}, nil
}

// reconcileTopics publishes a namespace's Topics: a Topic whose change
// leaves every pod's exclusions as they were (its limits; a Topic without
// publishers) costs one View and no pod. When the Topics with publishers in
// force changed (View.ExclusionKey), it computes every sidecar pod of the
// namespace again, here, instead of requeueing them.
func (r *Reconciler) reconcileTopics(ctx context.Context, namespace string) (ctrl.Result, error) {
	view, err := r.currentView(ctx, namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	r.topicsPublished[namespace] = true
	log := logf.FromContext(ctx)
	if r.Store.SetTopics(namespace, view.Topics()) {
		log.Info("namespace topics changed", "topics", len(view.Topics()))
	}
	key := view.ExclusionKey()
	pods, err := sidecarpods.List(ctx, r, namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	if view.Empty() && len(pods) == 0 {
		// Nothing of the namespace is left (it is being deleted, or was
		// emptied): neither is anything of it here, so namespaces that
		// come and go leave no entries behind.
		delete(r.views, namespace)
		delete(r.topicsPublished, namespace)
		return ctrl.Result{}, nil
	}
	mode, err := r.accessModeOf(ctx, namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	computed := 0
	for i := range pods {
		pod := &pods[i]
		name := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
		if k, ok := r.exclusionKeys[name]; !ok || k == key || !sidecarpods.IsInjected(pod) {
			// Not computed yet (its own reconcile will), or under the same
			// exclusions.
			continue
		}
		part, _, err := view.ComputePart(desired.Pod{Namespace: pod.Namespace, Name: pod.Name, Labels: pod.Labels, Annotations: pod.Annotations, AccessMode: mode}, r.Defaults)
		if err != nil {
			continue // its own reconcile reports it, and keeps its last good part
		}
		r.Store.SetPod(part, pod.UID)
		r.exclusionKeys[name] = key
		computed++
	}
	if computed > 0 {
		log.Info("computed pods again: the Topics with publishers changed", "pods", computed)
	}
	return ctrl.Result{}, nil
}

// accessModeOf is the access mode of namespace's pods: its label, else
// the operator's flag.
func (r *Reconciler) accessModeOf(ctx context.Context, namespace string) (string, error) {
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := r.Get(ctx, types.NamespacedName{Name: namespace}, ns); err != nil {
		if apierrors.IsNotFound(err) {
			return r.AccessMode, nil // being deleted with its pods
		}
		return "", fmt.Errorf("reading namespace %s: %w", namespace, err)
	}
	if mode, ok := ns.Labels[v1alpha1.AccessModeLabel]; ok {
		return mode, nil
	}
	return r.AccessMode, nil
}

// podsOfNamespace requeues the sidecar pods of a Namespace whose labels
// changed (its access mode).
func podsOfNamespace(c client.Reader) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		pods, err := sidecarpods.List(ctx, c, obj.GetName())
		if err != nil {
			logf.FromContext(ctx).Error(err, "listing the pods of a namespace whose labels changed", "namespace", obj.GetName())
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(pods))
		for _, p := range pods {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
		}
		return reqs
	})
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&corev1.Pod{}, builder.OnlyMetadata).
		// A pod's configuration reads only the spec of Topics and
		// Subscriptions: their status writes (several per change) must not
		// recompute every pod of the namespace.
		Watches(&v1alpha1.Topic{}, topicChanges(), builder.WithPredicates(predicate.GenerationChangedPredicate{}, r.staleOnChange())).
		Watches(&v1alpha1.Subscription{}, podsOfSubscription(r), builder.WithPredicates(predicate.GenerationChangedPredicate{}, r.staleOnChange())).
		// The namespace's label sets its pods' access mode.
		WatchesMetadata(&corev1.Namespace{}, podsOfNamespace(r), builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Named("podconfig").
		Complete(r)
}

// topicShapeBatch is how long a change of which Topics are in force waits
// for the next ones before the namespace's Topics are published again.
const topicShapeBatch = 250 * time.Millisecond

// topicChanges enqueues, for a Topic's change, its namespace's Topics (a
// request without a name: reconcileTopics, which computes the pods again
// only if the change changed their exclusions): at once for a change of
// limits or publishers, after topicShapeBatch for a change of which Topics
// are in force (created, deleted, or a new subject), which changes every
// pod's own resource (it lists them), so that Topics created together are
// published together. No Topic change requeues the pods one by one.
func topicChanges() handler.EventHandler {
	namespaceOf := func(obj client.Object) reconcile.Request {
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace()}}
	}
	shapeChanged := func(obj client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		q.AddAfter(namespaceOf(obj), topicShapeBatch)
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			shapeChanged(e.Object, q)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			shapeChanged(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			before, okBefore := e.ObjectOld.(*v1alpha1.Topic)
			after, okAfter := e.ObjectNew.(*v1alpha1.Topic)
			if !okBefore || !okAfter || before.Spec.Subject != after.Spec.Subject {
				shapeChanged(e.ObjectNew, q)
				return
			}
			q.Add(namespaceOf(e.ObjectNew))
		},
	}
}

// podsOfSubscription requeues the sidecar pods a Subscription selects, and
// on an update those it selected before: a pod's configuration changes
// only when a Subscription that selects or selected it does.
func podsOfSubscription(c client.Reader) handler.EventHandler {
	add := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], objs ...client.Object) {
		seen := map[types.NamespacedName]bool{}
		for _, obj := range objs {
			sub, ok := obj.(*v1alpha1.Subscription)
			if !ok {
				continue
			}
			selector, err := metav1.LabelSelectorAsSelector(&sub.Spec.Selector)
			if err != nil {
				continue // an invalid selector selects nothing
			}
			reqs, _ := selector.Requirements()
			pods, err := sidecarpods.List(ctx, c, sub.Namespace, reqs...)
			if err != nil {
				logf.FromContext(ctx).Error(err, "finding the pods a Subscription selects", "subscription", sub.Name)
				continue
			}
			for _, p := range pods {
				nn := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
				if !seen[nn] {
					seen[nn] = true
					q.Add(reconcile.Request{NamespacedName: nn})
				}
			}
		}
	}
	return enqueue.Objects(add)
}
