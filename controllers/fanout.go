package controllers

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

// What a change affects, so that it requeues that and nothing else.

// subjectChanged passes creations, deletions, and updates that change a
// Topic's or Subscription's subject: which Topic governs what, and which
// Topics conflict, depend on subjects alone.
var subjectChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool { return subjectOf(e.ObjectOld) != subjectOf(e.ObjectNew) },
}

// topicSubjectIndex indexes Topics by subject pattern: which Topic is in
// force for a pattern depends only on the Topics with that pattern.
const topicSubjectIndex = "spec.subject"

// indexTopicsBySubject registers topicSubjectIndex with the manager's cache.
func indexTopicsBySubject(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &v1alpha1.Topic{}, topicSubjectIndex, func(obj client.Object) []string {
		return []string{string(subjectOf(obj))}
	})
}

// topicsWithSubject lists, without copying, the Topics of namespace with
// the given subject pattern.
func topicsWithSubject(ctx context.Context, c client.Reader, namespace string, subject v1alpha1.SubjectPattern) ([]v1alpha1.Topic, error) {
	var topics v1alpha1.TopicList
	if err := c.List(ctx, &topics, client.InNamespace(namespace), client.MatchingFields{topicSubjectIndex: string(subject)}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the topics of %s on %q: %w", namespace, subject, err)
	}
	return topics.Items, nil
}

func subjectOf(obj client.Object) v1alpha1.SubjectPattern {
	switch o := obj.(type) {
	case *v1alpha1.Topic:
		return o.Spec.Subject
	case *v1alpha1.Subscription:
		return o.Spec.Subject
	}
	return ""
}

// podsOfSubscription requeues the sidecar pods a Subscription selects, and
// on an update those it selected before: a pod's configuration changes
// only when a Subscription that selects or selected it does.
func podsOfSubscription(c client.Reader) handler.EventHandler {
	enqueue := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], objs ...client.Object) {
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
			pods, err := listSidecarPods(ctx, c, sub.Namespace, reqs...)
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
	return objectsHandler(enqueue)
}

// enqueueFunc queues the requests for the objects of one event.
type enqueueFunc func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], objs ...client.Object)

// objectsHandler is an event handler that gives enqueue the object of
// each event, and on an update both the old and the new one (a change can
// affect what the old one selected as well as what the new one does).
func objectsHandler(enqueue enqueueFunc) handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object)
		},
	}
}

// enqueueAfter is handler.EnqueueRequestsFromMapFunc that queues each
// request after delay: the workqueue keeps one pending entry per request,
// at its earliest time, so what changes within delay of the first change
// is read by one reconcile.
func enqueueAfter(delay time.Duration, mapFn handler.MapFunc) handler.EventHandler {
	return objectsHandler(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], objs ...client.Object) {
		for _, obj := range objs {
			for _, req := range mapFn(ctx, obj) {
				q.AddAfter(req, delay)
			}
		}
	})
}

// eitherKind reconciles the Subscription and the Topic that a request may
// name (names are unique per kind only, so both are looked up), calling
// forget for a kind that is gone, and returns the sooner of their
// requeues.
func eitherKind(ctx context.Context, c client.Reader, req reconcile.Request,
	onSubscription func(*v1alpha1.Subscription) (time.Duration, error),
	onTopic func(*v1alpha1.Topic) (time.Duration, error),
	forget func(kind string),
) (reconcile.Result, error) {
	var after time.Duration
	var sub v1alpha1.Subscription
	switch err := c.Get(ctx, req.NamespacedName, &sub); {
	case err == nil:
		d, err := onSubscription(&sub)
		if err != nil {
			return reconcile.Result{}, err
		}
		after = d
	case client.IgnoreNotFound(err) != nil:
		return reconcile.Result{}, err
	default:
		forget("subscription")
	}
	var topic v1alpha1.Topic
	switch err := c.Get(ctx, req.NamespacedName, &topic); {
	case err == nil:
		d, err := onTopic(&topic)
		if err != nil {
			return reconcile.Result{}, err
		}
		if d > 0 && (after == 0 || d < after) {
			after = d
		}
	case client.IgnoreNotFound(err) != nil:
		return reconcile.Result{}, err
	default:
		forget("topic")
	}
	return reconcile.Result{RequeueAfter: after}, nil
}
