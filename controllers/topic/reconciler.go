// Package topic keeps what the reconcilers own of each Topic's status:
// whether it is valid and in force, whether another Topic conflicts with it,
// and how many Subscriptions it governs.
package topic

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/announce"
	"github.com/weighstation/weighstation/controllers/imports"
	"github.com/weighstation/weighstation/controllers/index"
	"github.com/weighstation/weighstation/controllers/status"
	"github.com/weighstation/weighstation/matcher"
)

// Reconciler keeps what the reconcilers own of each Topic's status:
// whether it is valid and in force, whether another Topic of the namespace
// conflicts with it, and how many Subscriptions it governs.
//
// It records a Warning Event when a Topic's publishers selector is invalid
// (once per generation) and when the Topics it conflicts with change.
type Reconciler struct {
	client.Client
	// Recorder, if set, records the Events.
	Recorder recorder.EventRecorder
	// MaxTopics caps the Topics in force per namespace (<= 0: none; see
	// desired.WithinLimit).
	MaxTopics int

	announced announce.Memory
	governed  governedCounts
}

// +kubebuilder:rbac:groups=weighstation.io,resources=topics,verbs=get;list;watch
// +kubebuilder:rbac:groups=weighstation.io,resources=topics/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=weighstation.io,resources=subscriptions,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// Reconcile computes the Topic's status from the Topics and Subscriptions
// of its namespace, and writes it if it changed.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	var topic v1alpha1.Topic
	if err := r.Get(ctx, req.NamespacedName, &topic); err != nil {
		return ctrl.Result{}, r.announced.GetFailed(req.NamespacedName, err)
	}
	// Read only: the lists are not copied.
	var topics v1alpha1.TopicList
	if err := r.List(ctx, &topics, client.InNamespace(req.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing topics in %s: %w", req.Namespace, err)
	}
	var subscriptions v1alpha1.SubscriptionList
	if err := r.List(ctx, &subscriptions, client.InNamespace(req.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing subscriptions in %s: %w", req.Namespace, err)
	}
	importIssue, err := imports.TopicProblem(ctx, r.Client, &topic)
	if err != nil {
		return ctrl.Result{}, err
	}
	next := topicStatus(&topic, topics.Items, r.MaxTopics, subscriptions.Items, &r.governed, importIssue)
	if err := status.TopicReconciler.Apply(ctx, r.Client, &topic, v1alpha1.GroupVersion.WithKind("Topic"), &topic.Status, &next); err != nil {
		return ctrl.Result{}, err
	}
	r.announce(&topic, &next)
	log.V(1).Info("reconciled topic", "subject", topic.Spec.Subject, "subscriptions", next.Subscriptions)
	return ctrl.Result{}, nil
}

// announce records the Events of what is news in the Topic's new status:
// an invalid publishers selector, or a change of the conflict.
func (r *Reconciler) announce(topic *v1alpha1.Topic, next *v1alpha1.TopicStatus) {
	if r.Recorder == nil {
		return
	}
	if state := announce.InvalidState(next.Conditions, ReasonInvalidPublishers); r.announced.News(topic, announce.Invalid, state, announce.InvalidState(topic.Status.Conditions, ReasonInvalidPublishers)) {
		r.Recorder.Eventf(topic, nil, corev1.EventTypeWarning, announce.EventReasonInvalidSelector, announce.EventActionConfigure, "%s", state)
	}
	if state := announce.ConflictState(next.Conditions); r.announced.News(topic, announce.Conflict, state, announce.ConflictState(topic.Status.Conditions)) {
		r.Recorder.Eventf(topic, nil, corev1.EventTypeWarning, announce.EventReasonConflicting, announce.EventActionConfigure, "%s", state)
	}
}

// topicsOverlapping maps a Topic or Subscription to the Topics of its
// namespace whose status it may change: those whose subjects overlap its
// own (the same pattern conflicts; a Subscription is governed by the most
// specific Topic covering it, which a Topic's coming or going can change
// only among Topics that overlap it), or every Topic of the namespace
// while it has -max-topics-per-namespace or more (which of them are in
// force follows their order). It reads the informer's objects in place:
// a List would copy each Topic of the namespace for each event, so that
// creating a namespace's Topics would copy them a number of times that
// grows with the square of their number.
func (r *Reconciler) topicsOverlapping(topics toolscache.Indexer) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		items, err := topics.ByIndex(toolscache.NamespaceIndex, obj.GetNamespace())
		if err != nil {
			logf.FromContext(ctx).Error(err, "listing the Topics to requeue", "namespace", obj.GetNamespace())
			return nil
		}
		subject := string(index.SubjectOf(obj))
		// At the cap after a deletion, a Topic past it is admitted now.
		all := r.MaxTopics > 0 && len(items) >= r.MaxTopics
		var reqs []reconcile.Request
		for _, item := range items {
			t, ok := item.(*v1alpha1.Topic)
			if !ok || !(all || matcher.Overlaps(string(t.Spec.Subject), subject)) {
				continue
			}
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: t.Namespace, Name: t.Name}})
		}
		return reqs
	}
}

// SetupWithManager registers the reconciler. What it owns of a Topic's
// status depends on its own spec, and on the subjects of the other Topics
// (conflicts) and of the Subscriptions of its namespace, so a new,
// deleted or re-subjected one requeues the Topics whose subjects overlap
// its own (topicsOverlapping). (Pods are propagation's business.)
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	informer, err := mgr.GetCache().GetInformer(context.Background(), &v1alpha1.Topic{})
	if err != nil {
		return fmt.Errorf("the Topic informer: %w", err)
	}
	indexed, ok := informer.(interface{ GetIndexer() toolscache.Indexer })
	if !ok {
		return fmt.Errorf("the Topic informer (%T) has no indexer", informer)
	}
	topicsInNamespace := handler.EnqueueRequestsFromMapFunc(r.topicsOverlapping(indexed.GetIndexer()))
	return ctrl.NewControllerManagedBy(mgr).
		// Its own status writes do not requeue it; other Topics and the
		// Subscriptions matter only by their subjects.
		For(&v1alpha1.Topic{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.Topic{}, topicsInNamespace, builder.WithPredicates(subjectChanged)).
		Watches(&v1alpha1.Subscription{}, topicsInNamespace, builder.WithPredicates(subjectChanged)).
		// An exporter's Subscription decides whether a service import is
		// valid.
		Watches(&v1alpha1.Subscription{}, imports.ImportersOfSubscription(r.Client), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Named("topic").
		Complete(r)
}

// subjectChanged passes creations, deletions, and updates that change a
// Topic's or Subscription's subject: which Topic governs what, and which
// Topics conflict, depend on subjects alone.
var subjectChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool { return index.SubjectOf(e.ObjectOld) != index.SubjectOf(e.ObjectNew) },
}
