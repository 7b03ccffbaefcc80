package pki_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/go-logr/logr/testr"
	"github.com/weighstation/weighstation/controllers/pki"
)

// markerNamespace is the placeholder namespace of the package's namespaced
// RBAC markers. The chart puts that Role in the release namespace, and the
// test puts it in the test's namespace.
const markerNamespace = "weighstation-system"

// rbacMarkers reads the package's +kubebuilder:rbac markers, the source of
// config/rbac, into the rules of a ClusterRole and of a Role.
func rbacMarkers(t *testing.T) (cluster, namespaced []rbacv1.PolicyRule) {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			args, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "// +kubebuilder:rbac:")
			if !ok {
				continue
			}
			var rule rbacv1.PolicyRule
			namespace := ""
			for _, arg := range strings.Split(args, ",") {
				key, value, _ := strings.Cut(arg, "=")
				values := strings.Split(strings.Trim(value, `"`), ";")
				switch key {
				case "groups":
					rule.APIGroups = values
				case "resources":
					rule.Resources = values
				case "verbs":
					rule.Verbs = values
				case "resourceNames":
					rule.ResourceNames = values
				case "namespace":
					namespace = value
				default:
					t.Fatalf("%s: marker key %q is not understood by this test", name, key)
				}
			}
			switch namespace {
			case "":
				cluster = append(cluster, rule)
			case markerNamespace:
				namespaced = append(namespaced, rule)
			default:
				t.Fatalf("%s: a marker for namespace %q, not the placeholder %q", name, namespace, markerNamespace)
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if len(cluster) == 0 || len(namespaced) == 0 {
		t.Fatalf("found %d cluster-wide and %d namespaced RBAC markers", len(cluster), len(namespaced))
	}
	return cluster, namespaced
}

// grant binds the package's RBAC markers to a user of its own, with the
// Role in opNs, and returns a config that acts as that user.
func grant(t *testing.T, opNs string) *rest.Config {
	t.Helper()
	ctx := context.Background()
	cluster, namespaced := rbacMarkers(t)
	user := "weighstation-operator-" + opNs
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	objs := []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: cluster},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
			Subjects:   subjects,
		},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: opNs, Name: user}, Rules: namespaced},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: opNs, Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
			Subjects:   subjects,
		},
	}
	for _, o := range objs {
		if err := k8sClient.Create(ctx, o); err != nil {
			t.Fatalf("creating %T: %v", o, err)
		}
	}
	t.Cleanup(func() {
		for _, o := range objs[:2] { // the namespaced ones go with the namespace
			_ = k8sClient.Delete(context.Background(), o)
		}
	})
	as := rest.CopyConfig(cfg)
	as.Impersonate = rest.ImpersonationConfig{UserName: user}
	return as
}

func forbidden(what string, err error) error {
	if !apierrors.IsForbidden(err) {
		return fmt.Errorf("%s: %v, want Forbidden", what, err)
	}
	return nil
}

// The RBAC markers grant what the operator does and little else: create
// the CA Secret, read and update it but no other Secret, and publish the
// bundle ConfigMap in any namespace, creating it by server-side apply,
// and through a cache limited to its name. It may not create, read or list
// any other ConfigMap.
func TestRBACMarkersSuffice(t *testing.T) {
	ctx := context.Background()
	opNs, appNs, otherNs := newNamespace(t), newNamespace(t), newNamespace(t)
	asOperator := grant(t, opNs)
	op, err := client.New(asOperator, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	c := newClock()
	a := newAuthority(t, testOptions(t, opNs, c), op)
	// The RBAC authorizer learns of new bindings from its informers.
	eventually(t, "the operator's Ensure allowed", func() error { return a.Ensure(ctx) })
	routes, err := pki.NewRouteCertificate(a, "weighstation-broker-headless", testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := routes.Ensure(ctx); err != nil { // creates the route Secret
		t.Fatal(err)
	}
	c.Add(60 * day) // a rotation updates the Secrets
	if err := a.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := routes.Ensure(ctx); err != nil {
		t.Fatal(err)
	}

	// Publishing through a manager-like client: a cache limited to the
	// bundle ConfigMaps, and writes to the API server.
	bundles := pki.BundleConfigMap{}
	cmCache, err := cache.New(asOperator, cache.Options{
		Scheme:   scheme,
		ByObject: map[client.Object]cache.ByObject{&corev1.ConfigMap{}: bundles.CacheByObject()},
	})
	if err != nil {
		t.Fatal(err)
	}
	cacheCtx, stopCache := context.WithCancel(ctx)
	defer stopCache()
	go func() { _ = cmCache.Start(cacheCtx) }()
	// Getting the informer starts it. An informer the RBAC rules forbid
	// would never sync, so the wait is bounded.
	syncCtx, cancel := context.WithTimeout(ctx, eventuallyTimeout)
	defer cancel()
	if _, err := cmCache.GetInformer(syncCtx, &corev1.ConfigMap{}); err != nil {
		t.Fatalf("the ConfigMap cache: %v", err)
	}
	if !cmCache.WaitForCacheSync(syncCtx) {
		t.Fatal("the ConfigMap cache did not sync: its list or watch is forbidden")
	}
	cached, err := client.New(asOperator, client.Options{Scheme: scheme, Cache: &client.CacheOptions{Reader: cmCache}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{appNs, otherNs} {
		if err := pki.PublishBundle(ctx, cached, ns, a.Bundle()); err != nil {
			t.Fatalf("publishing to %s: %v", ns, err)
		}
	}
	published, err := bundles.ListPublished(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{appNs, otherNs} {
		if _, ok := published[ns]; !ok {
			t.Fatalf("ListPublished misses %s", ns)
		}
	}
	c.Add(day)
	if err := a.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	// The update goes through the same rules, once the cache has seen the
	// ConfigMap (a stale cache costs one apply that changes nothing).
	eventually(t, "the cache sees the published ConfigMap", func() error {
		var cm corev1.ConfigMap
		return cmCache.Get(ctx, types.NamespacedName{Namespace: appNs, Name: pki.DefaultBundleConfigMapName}, &cm)
	})
	if err := pki.PublishBundle(ctx, cached, appNs, a.Bundle()); err != nil {
		t.Fatal(err)
	}

	// And nothing else.
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: opNs, Name: "sh.helm.release.v1.weighstation.v1"}}
	if err := k8sClient.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	denied := []struct {
		what string
		do   func() error
	}{
		{"reading another Secret of its namespace", func() error {
			return op.Get(ctx, client.ObjectKeyFromObject(other), &corev1.Secret{})
		}},
		{"listing the Secrets of its namespace", func() error { return op.List(ctx, &corev1.SecretList{}, client.InNamespace(opNs)) }},
		{"reading a CA Secret in another namespace", func() error {
			return op.Get(ctx, types.NamespacedName{Namespace: appNs, Name: pki.DefaultSecretName}, &corev1.Secret{})
		}},
		{"creating a Secret in another namespace", func() error {
			return op.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: appNs, Name: pki.DefaultSecretName}})
		}},
		{"creating another ConfigMap by apply", func() error {
			return op.Apply(ctx, corev1ac.ConfigMap("app-config", appNs).WithData(map[string]string{"k": "v"}), client.FieldOwner(pki.FieldManager))
		}},
		{"creating the bundle ConfigMap by POST", func() error {
			return op.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: opNs, Name: pki.DefaultBundleConfigMapName}})
		}},
		{"listing every ConfigMap", func() error { return op.List(ctx, &corev1.ConfigMapList{}) }},
		{"reading another ConfigMap", func() error {
			return op.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: "extension-apiserver-authentication"}, &corev1.ConfigMap{})
		}},
	}
	var errs []error
	for _, d := range denied {
		if err := forbidden(d.what, d.do()); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}
