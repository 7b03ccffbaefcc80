package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/pki"
)

// injectedPods selects the pods that carry the sidecar.
var injectedPods = labels.SelectorFromSet(labels.Set{v1alpha1.InjectLabel: v1alpha1.InjectEnabled})

// CacheOptions limits the manager's pod cache to sidecar pods: the operator
// never needs the others, and a cluster has many. A pod whose label is
// removed leaves the cache, which reads as its deletion. Of ConfigMaps it
// holds only the CA bundles it publishes (its RBAC allows no others).
func CacheOptions() cache.Options {
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}:       {Label: injectedPods},
		&corev1.ConfigMap{}: pki.BundleConfigMap{}.CacheByObject(),
	}}
}

// listInjectedPods lists the sidecar pods of a namespace.
func listInjectedPods(ctx context.Context, c client.Reader, namespace string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: injectedPods}); err != nil {
		return nil, fmt.Errorf("listing sidecar pods in %s: %w", namespace, err)
	}
	return pods.Items, nil
}

func isInjected(pod *corev1.Pod) bool { return injectedPods.Matches(labels.Set(pod.Labels)) }

// requeueNamespace returns a map function that requeues every object of
// the kind newList lists in the namespace of the object that changed.
func requeueNamespace(c client.Reader, newList func() client.ObjectList, opts ...client.ListOption) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		list := newList()
		// Only names are read: no deep copy of every object.
		if err := c.List(ctx, list, append([]client.ListOption{client.InNamespace(obj.GetNamespace()), client.UnsafeDisableDeepCopy}, opts...)...); err != nil {
			logf.FromContext(ctx).Error(err, "listing objects to requeue", "namespace", obj.GetNamespace())
			return nil
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			logf.FromContext(ctx).Error(err, "reading the list to requeue")
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(items))
		for _, item := range items {
			if o, ok := item.(client.Object); ok {
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}})
			}
		}
		return reqs
	}
}
