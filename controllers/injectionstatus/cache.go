package injectionstatus

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/sidecarpods"
)

// The manager's pod cache holds only pods with the inject label, but a pod
// that missed injection in an opted-in namespace has no label at all (the
// webhook adds it). The injection status therefore reads a cache of its
// own: the metadata of every pod that has not finished, cluster-wide, and
// of every namespace, so that its handlers can tell which pods are opted
// in by their namespace's label. Labels cannot filter it, so it keeps as
// little of each pod as it can (keepInjectionMetadata).

// unfinishedPods are the pods that may still run: a pod that missed
// injection is reported from its creation, before it is scheduled.
var unfinishedPods = fields.AndSelectors(
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
)

// mirrorPodAnnotation marks a static pod's mirror, which the kubelet
// creates: it never passes through the webhook, so it is never reported.
const mirrorPodAnnotation = "kubernetes.io/config.mirror"

// namespaceMeta returns an empty namespace of the injection cache.
func namespaceMeta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	return m
}

// newCache returns the injection status's cache; the caller adds
// it to the manager, which starts it.
func newCache(mgr ctrl.Manager) (cache.Cache, error) {
	return cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient: mgr.GetHTTPClient(),
		Scheme:     mgr.GetScheme(),
		Mapper:     mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{
			sidecarpods.Meta(): {Field: unfinishedPods, Transform: keepInjectionMetadata},
			namespaceMeta():    {Transform: keepInjectionMetadata},
		},
	})
}

// keepInjectionMetadata drops what the injection status never reads from
// the cached metadata: managed fields, owner references, finalizers, and
// every annotation but the injected version and the mirror marker
// (applications keep large ones). Labels stay: selectors match them.
var keepInjectionMetadata toolscache.TransformFunc = func(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	m.ManagedFields, m.OwnerReferences, m.Finalizers = nil, nil, nil
	var kept map[string]string
	for _, k := range []string{v1alpha1.InjectedAnnotation, mirrorPodAnnotation} {
		if v, ok := m.Annotations[k]; ok {
			if kept == nil {
				kept = map[string]string{}
			}
			kept[k] = v
		}
	}
	m.Annotations = kept
	return m, nil
}
