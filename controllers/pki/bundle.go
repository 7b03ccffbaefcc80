package pki

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The operator writes the bundle ConfigMap in every namespace that has
// sidecars, so the rule is cluster-wide. It is limited to the
// ConfigMap's name, for every verb:
//   - create: PublishBundle creates with server-side apply, a PATCH to
//     the named object. The API server checks create against that name.
//     A plain POST would not be allowed.
//   - list and watch: a request with the field selector metadata.name=<name>
//     is checked against resourceNames. That covers a cache set up with
//     CacheByObject, and ListPublished.
//
// A chart that changes the name must change this rule too.
//
// +kubebuilder:rbac:groups="",resources=configmaps,resourceNames=weighstation-ca-bundle,verbs=get;list;watch;create;update;patch

const (
	// DefaultBundleConfigMapName is the bundle ConfigMap's name. The RBAC
	// marker names it.
	DefaultBundleConfigMapName = "weighstation-ca-bundle"
	// BundleKey is the ConfigMap key that holds the PEM bundle. A sidecar
	// mounts it as a file of that name.
	BundleKey = "ca.crt"
	// BundleLabel marks the ConfigMaps this package writes. ListPublished
	// returns only those.
	BundleLabel = "weighstation.io/ca-bundle"
	// FieldManager is the server-side apply field manager. It is the same
	// as controllers.FieldManager, which cannot be imported from here
	// without an import cycle once controllers uses this package.
	FieldManager = "weighstation-operator"
)

// BundleConfigMap publishes the CA bundle to the ConfigMap Name
// (DefaultBundleConfigMapName when empty). PublishBundle is the default
// one's Publish.
type BundleConfigMap struct {
	Name string
}

func (b BundleConfigMap) name() string {
	if b.Name == "" {
		return DefaultBundleConfigMapName
	}
	return b.Name
}

// PublishBundle writes bundle to the ConfigMap DefaultBundleConfigMapName
// in namespace, unless that ConfigMap already holds it. See
// BundleConfigMap.Publish.
func PublishBundle(ctx context.Context, c client.Client, namespace string, bundle []byte) error {
	return BundleConfigMap{}.Publish(ctx, c, namespace, bundle)
}

// Publish writes bundle (key BundleKey) to the ConfigMap in namespace. It
// creates the ConfigMap if needed, and does nothing when the ConfigMap
// already holds the bundle. The write is a server-side apply under
// FieldManager that sends only the bundle and the label, so labels and
// annotations that others add survive.
//
// c's reads must be able to get this ConfigMap. A manager's client can, if
// its cache was set up with CacheByObject. Without that, a Get would start
// an informer on every ConfigMap in the cluster, and the RBAC rule above
// forbids it. When the cache is stale, the worst case is one apply that
// changes nothing.
func (b BundleConfigMap) Publish(ctx context.Context, c client.Client, namespace string, bundle []byte) error {
	key := types.NamespacedName{Namespace: namespace, Name: b.name()}
	if err := checkBundle(bundle); err != nil {
		return fmt.Errorf("publishing the CA bundle to %s: %w", key, err)
	}
	var cm corev1.ConfigMap
	err := c.Get(ctx, key, &cm)
	switch {
	case err == nil && cm.Data[BundleKey] == string(bundle) && cm.Labels[BundleLabel] == "true":
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("reading the CA bundle ConfigMap %s: %w", key, err)
	}
	apply := corev1ac.ConfigMap(key.Name, key.Namespace).
		WithLabels(map[string]string{BundleLabel: "true"}).
		WithData(map[string]string{BundleKey: string(bundle)})
	if err := c.Apply(ctx, apply, client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("applying the CA bundle ConfigMap %s: %w", key, err)
	}
	return nil
}

// checkBundle refuses anything but a PEM bundle of CA certificates.
func checkBundle(bundle []byte) error {
	certs, err := parseCerts(bundle)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidBundle, err)
	}
	for _, c := range certs {
		if !c.IsCA {
			return fmt.Errorf("%w: certificate %q is not a CA", ErrInvalidBundle, c.Subject.CommonName)
		}
	}
	return nil
}

// Read returns the bundle that the ConfigMap in namespace holds, or nil if
// there is no ConfigMap.
func (b BundleConfigMap) Read(ctx context.Context, r client.Reader, namespace string) ([]byte, error) {
	key := types.NamespacedName{Namespace: namespace, Name: b.name()}
	var cm corev1.ConfigMap
	if err := r.Get(ctx, key, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the CA bundle ConfigMap %s: %w", key, err)
	}
	return []byte(cm.Data[BundleKey]), nil
}

// ListPublished returns, by namespace, the bundle of every ConfigMap this
// package wrote. A caller can compare that with the namespaces that have
// sidecars, and with Authority.Bundle. The list uses a metadata.name field
// selector, which the RBAC rule allows across namespaces. r must be able to
// serve it: the manager's APIReader can, but a cache cannot, because it has
// no index on metadata.name.
func (b BundleConfigMap) ListPublished(ctx context.Context, r client.Reader) (map[string][]byte, error) {
	var list corev1.ConfigMapList
	if err := r.List(ctx, &list, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", b.name())}); err != nil {
		return nil, fmt.Errorf("listing the CA bundle ConfigMaps %s: %w", b.name(), err)
	}
	out := make(map[string][]byte, len(list.Items))
	for _, cm := range list.Items {
		if cm.Labels[BundleLabel] == "true" {
			out[cm.Namespace] = []byte(cm.Data[BundleKey])
		}
	}
	return out, nil
}

// CacheByObject restricts a manager's ConfigMap cache to the bundle
// ConfigMaps, in every namespace. Put it in cache.Options.ByObject under
// &corev1.ConfigMap{}. The cache then holds only those ConfigMaps, and
// lists and watches with a field selector that the name-limited RBAC rule
// allows.
func (b BundleConfigMap) CacheByObject() cache.ByObject {
	return cache.ByObject{Field: fields.OneTermEqualSelector("metadata.name", b.name())}
}
