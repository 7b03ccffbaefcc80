package injectionstatus

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/enqueue"
	"github.com/weighstation/weighstation/controllers/sidecarpods"
)

// batch gathers the pod changes of one namespace (a rollout
// creates many pods at once) into one pass; it is far below the 10 s
// within which a missed pod is reported.
const batch = 200 * time.Millisecond

// injectionChanged passes the pod and namespace updates that can change
// what is reported: a metadata watch sees every status update of a pod,
// and these are most of them.
var injectionChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld, e.ObjectNew
		// Labels decide opting in and which objects select a pod.
		return !equality.Semantic.DeepEqual(o.GetLabels(), n.GetLabels()) ||
			o.GetAnnotations()[v1alpha1.InjectedAnnotation] != n.GetAnnotations()[v1alpha1.InjectedAnnotation] ||
			(o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil)
	},
}

// selectorChanged passes the creations and deletions of Subscriptions and
// Topics, and the updates that change which pods they select (a
// Subscription's selector, a Topic's publishers).
var selectorChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		return !equality.Semantic.DeepEqual(podSelectorOf(e.ObjectOld), podSelectorOf(e.ObjectNew))
	},
}

// podSelectorOf is the selector of the pods a Subscription or Topic
// concerns (nil for a Topic without publishers: every pod).
func podSelectorOf(obj client.Object) *metav1.LabelSelector {
	switch o := obj.(type) {
	case *v1alpha1.Subscription:
		return &o.Spec.Selector
	case *v1alpha1.Topic:
		return o.Spec.Publishers
	}
	return nil
}

// SetupWithManager registers the reconciler and its cache with mgr.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if _, err := parseMinSidecarVersion(r.MinVersion); err != nil {
		return err
	}
	injection, err := newCache(mgr)
	if err != nil {
		return fmt.Errorf("creating the injection cache: %w", err)
	}
	if err := mgr.Add(injection); err != nil {
		return fmt.Errorf("adding the injection cache: %w", err)
	}
	r.Pods = injection
	return ctrl.NewControllerManagedBy(mgr).
		Named("injection-status").
		WatchesRawSource(source.Kind(injection, client.Object(sidecarpods.Meta()), enqueue.After(batch, r.namespaceOfPod), injectionChanged)).
		WatchesRawSource(source.Kind(injection, client.Object(namespaceMeta()), enqueue.After(batch, namespaceItself), injectionChanged)).
		// Only which pods an object selects matters: not a kill switch,
		// not a limit, not a status write.
		WatchesRawSource(source.Kind(mgr.GetCache(), client.Object(&v1alpha1.Subscription{}), enqueue.After(batch, namespaceOf), selectorChanged)).
		WatchesRawSource(source.Kind(mgr.GetCache(), client.Object(&v1alpha1.Topic{}), enqueue.After(batch, namespaceOf), selectorChanged)).
		Complete(r)
}

// namespaceOfPod requeues a pod's namespace when the pod may be reported
// or may have been: it is opted in by its label or its namespace's, or
// the namespace has reported pods (a pod leaving them).
func (r *Reconciler) namespaceOfPod(ctx context.Context, pod client.Object) []reconcile.Request {
	req := []reconcile.Request{{NamespacedName: types.NamespacedName{Name: pod.GetNamespace()}}}
	if sidecarpods.IsInjected(pod) {
		return req
	}
	r.mu.Lock()
	_, warned := r.warned[pod.GetNamespace()]
	r.mu.Unlock()
	if warned {
		return req
	}
	optedIn, _, err := r.namespaceOptedIn(ctx, pod.GetNamespace())
	if err != nil {
		logf.FromContext(ctx).Error(err, "reading a pod's namespace", "pod", pod.GetName())
		return req
	}
	if optedIn {
		return req
	}
	return nil
}

func namespaceItself(_ context.Context, ns client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: ns.GetName()}}}
}

func namespaceOf(_ context.Context, obj client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: obj.GetNamespace()}}}
}
