package controllers

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
	"github.com/weighstation/weighstation/controllers/pki"
)

// injectedPods selects the pods that carry the sidecar.
var injectedPods = labels.SelectorFromSet(labels.Set{v1alpha1.InjectLabel: v1alpha1.InjectEnabled})

// countedPods are the pods that should run a sidecar now: scheduled, and
// neither Succeeded nor Failed. (Terminating is in the metadata.) The
// apiserver filters on these fields, since the cache holds only metadata.
var countedPods = fields.AndSelectors(
	fields.OneTermNotEqualSelector("spec.nodeName", ""),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
)

// podMeta returns an empty pod of the operator's pod cache: metadata only.
func podMeta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	return m
}

// podMetaList returns an empty list of the operator's pod cache.
func podMetaList() *metav1.PartialObjectMetadataList {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	return l
}

// CacheOptions limits the manager's pod cache to the metadata of sidecar
// pods that count: the operator needs only their labels, annotations and
// UID, never the others, and a cluster has many large pods. A pod whose
// label is removed, or that finishes, leaves the cache, which reads as its
// deletion. Of ConfigMaps it holds only the CA bundles it publishes (its
// RBAC allows no others).
func CacheOptions() cache.Options {
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		podMeta():           {Label: injectedPods, Field: countedPods},
		&corev1.ConfigMap{}: pki.BundleConfigMap{}.CacheByObject(),
	}}
}

// listSidecarPods lists the sidecar pods that count (in namespace, or in
// every namespace for ""), that also meet the label requirements also,
// from the cache, without copying them: callers only read them.
func listSidecarPods(ctx context.Context, c client.Reader, namespace string, also ...labels.Requirement) ([]metav1.PartialObjectMetadata, error) {
	pods := podMetaList()
	opts := []client.ListOption{client.MatchingLabelsSelector{Selector: injectedPods.Add(also...)}, client.UnsafeDisableDeepCopy}
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	if err := c.List(ctx, pods, opts...); err != nil {
		return nil, fmt.Errorf("listing sidecar pods in %q: %w", namespace, err)
	}
	return pods.Items, nil
}

func isInjected(pod metav1.Object) bool { return injectedPods.Matches(labels.Set(pod.GetLabels())) }
