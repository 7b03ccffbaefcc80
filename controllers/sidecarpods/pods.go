// Package sidecarpods is the operator's view of the pods that carry the
// sidecar: the manager's pod cache holds their metadata alone, and every
// reconciler lists them from it.
package sidecarpods

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

// injected selects the pods that carry the sidecar.
var injected = labels.SelectorFromSet(labels.Set{v1alpha1.InjectLabel: v1alpha1.InjectEnabled})

// counted are the pods that should run a sidecar now: scheduled, and
// neither Succeeded nor Failed. (Terminating is in the metadata.) The
// apiserver filters on these fields, since the cache holds only metadata.
var counted = fields.AndSelectors(
	fields.OneTermNotEqualSelector("spec.nodeName", ""),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
)

// CacheByObject limits the manager's pod cache (of Meta) to the sidecar
// pods that count. A pod whose label is removed, or that finishes, leaves
// the cache, which reads as its deletion.
func CacheByObject() cache.ByObject {
	return cache.ByObject{Label: injected, Field: counted}
}

// Meta returns an empty pod of the operator's pod cache: metadata only.
func Meta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	return m
}

// MetaList returns an empty list of the operator's pod cache.
func MetaList() *metav1.PartialObjectMetadataList {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	return l
}

// List lists the sidecar pods that count (in namespace, or in every
// namespace for ""), that also meet the label requirements also, from the
// cache, without copying them: callers only read them.
func List(ctx context.Context, c client.Reader, namespace string, also ...labels.Requirement) ([]metav1.PartialObjectMetadata, error) {
	pods := MetaList()
	opts := []client.ListOption{client.MatchingLabelsSelector{Selector: injected.Add(also...)}, client.UnsafeDisableDeepCopy}
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	if err := c.List(ctx, pods, opts...); err != nil {
		return nil, fmt.Errorf("listing sidecar pods in %q: %w", namespace, err)
	}
	return pods.Items, nil
}

// IsInjected reports whether pod carries the sidecar label.
func IsInjected(pod metav1.Object) bool { return injected.Matches(labels.Set(pod.GetLabels())) }
