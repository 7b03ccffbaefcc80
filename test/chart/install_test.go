package chart_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/internal/envtestsuite"
)

// waitTimeout bounds every wait on the apiserver.
const waitTimeout = 30 * time.Second

// The chart's life in a real apiserver, with the built helm: an older
// chart installs, `helm upgrade` to this one changes a CRD and keeps the
// broker token, `helm uninstall` removes the release but keeps the CRDs
// and so the Topics. Helm checks kubeVersion against the apiserver's own
// version, which hack/setup-envtest.sh stamps.
func TestInstallUpgradeUninstall(t *testing.T) {
	c, kubeconfig := startAPIServer(t)
	ctx := context.Background()
	kc := []string{"--kubeconfig", kubeconfig}

	t.Run("the apiserver says its version", func(t *testing.T) {
		checkServerVersion(t, kubeconfig)
	})

	t.Run("kubeVersion is checked against the apiserver", func(t *testing.T) {
		future := copyChart(t, func(name, text string) string {
			if name == "Chart.yaml" {
				return replaceOnce(t, text, `kubeVersion: ">=1.30.0-0"`, `kubeVersion: ">=1.38.0-0"`)
			}
			return text
		})
		_, err := helm(t, nil, append([]string{"install", "future", future, "--namespace", "future", "--create-namespace"}, kc...)...)
		if err == nil || !strings.Contains(err.Error(), "v1.37.0") {
			t.Fatalf("installing a chart for >=1.38 into v1.37.0: %v, want a kubeVersion refusal naming v1.37.0", err)
		}
	})

	// The older chart: its Topic CRD lacks the short name.
	older := copyChart(t, func(name, text string) string {
		switch name {
		case "Chart.yaml":
			return replaceOnce(t, text, "version: 0.1.0", "version: 0.0.1")
		case filepath.Join("templates", "generated", "crd-topics.yaml"):
			return replaceOnce(t, text, "    shortNames:\n    - wtopic\n", "")
		}
		return text
	})
	const ns = "weighstation-system"
	if out, err := helm(t, nil, append([]string{"install", "weighstation", older, "--namespace", ns, "--create-namespace"}, kc...)...); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}

	t.Run("installed objects", func(t *testing.T) {
		checkInstalled(t, c, ns)
		if names := topicShortNames(t, c); len(names) != 0 {
			t.Errorf("the older chart's Topic CRD has short names %v, want none", names)
		}
	})

	// A Topic, which uninstalling must keep.
	appNS := envtestsuite.NewNamespace(t, c, "apps-")
	t.Run("the sidecar-injection webhook", func(t *testing.T) {
		checkWebhookInstalled(t, c, ns, appNS)
	})
	t.Run("the sidecar-integrity policy", func(t *testing.T) {
		checkIntegrityPolicy(t, c, ns, appNS)
	})
	topic := &v1alpha1.Topic{ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: "orders"}, Spec: v1alpha1.TopicSpec{Subject: "orders.created"}}
	envtestsuite.Eventually(t, waitTimeout, 50*time.Millisecond, "creating a Topic", func() error { return c.Create(ctx, topic) })

	t.Run("helm upgrade changes a CRD", func(t *testing.T) {
		if out, err := helm(t, nil, append([]string{"upgrade", "weighstation", chartDir, "--namespace", ns}, kc...)...); err != nil {
			t.Fatalf("helm upgrade: %v\n%s", err, out)
		}
		if names := topicShortNames(t, c); !slices.Equal(names, []string{"wtopic"}) {
			t.Errorf("after the upgrade the Topic CRD's short names are %v, want [wtopic]", names)
		}
	})

	t.Run("helm uninstall removes the webhook first and keeps the CRDs", func(t *testing.T) {
		out, log, err := helmWithLog(t, append([]string{"uninstall", "weighstation", "--namespace", ns, "--debug"}, kc...)...)
		if err != nil {
			t.Fatalf("helm uninstall: %v\n%s\n%s", err, out, log)
		}
		checkWebhookDeletedFirst(t, log)
		gone := []client.Object{
			&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "weighstation-operator"}},
			&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "weighstation-broker"}},
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "weighstation-operator"}},
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "weighstation-operator"}},
			&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "weighstation-sidecar-injector"}},
		}
		for _, o := range gone {
			envtestsuite.Eventually(t, waitTimeout, 50*time.Millisecond, "uninstalling removes "+o.GetName(), func() error {
				err := c.Get(ctx, client.ObjectKeyFromObject(o), o)
				if apierrors.IsNotFound(err) {
					return nil
				}
				return fmtErr("%T %s is still there (%v)", o, o.GetName(), err)
			})
		}
		for _, name := range []string{"topics.weighstation.io", "subscriptions.weighstation.io"} {
			if err := c.Get(ctx, client.ObjectKey{Name: name}, &apiextensionsv1.CustomResourceDefinition{}); err != nil {
				t.Errorf("CRD %s after uninstall: %v, want it kept", name, err)
			}
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(topic), &v1alpha1.Topic{}); err != nil {
			t.Errorf("Topic after uninstall: %v, want it kept", err)
		}
	})

	t.Run("token mode keeps its token across upgrades", func(t *testing.T) { checkTokenMode(t, c, kc) })
}

// checkWebhookDeletedFirst checks, in helm's --debug log of an uninstall,
// that the webhook configuration was deleted before anything else: helm
// deletes kind by kind, each kind once the one before is gone, so a Fail
// webhook never outlives its operator and blocks pod creation.
func checkWebhookDeletedFirst(t *testing.T, log string) {
	t.Helper()
	var kinds []string
	for line := range strings.Lines(log) {
		if !strings.Contains(line, "starting delete resource") {
			continue
		}
		_, kind, ok := strings.Cut(line, "kind=")
		if !ok {
			t.Fatalf("a delete without a kind in helm's log: %q", line)
		}
		kinds = append(kinds, strings.Fields(kind)[0])
	}
	if len(kinds) < 2 || kinds[0] != "MutatingWebhookConfiguration" || slices.Index(kinds[1:], "MutatingWebhookConfiguration") >= 0 {
		t.Fatalf("helm deleted kinds in the order %v, want the MutatingWebhookConfiguration first, alone, then the rest (the operator's Deployment among them)", kinds)
	}
	if !slices.Contains(kinds, "Deployment") {
		t.Errorf("helm deleted %v, without the operator's Deployment", kinds)
	}
}

// checkTokenMode installs the chart in token mode (the broker admits one
// shared token; no webhook), as a second release beside the CRDs the first
// left, and checks that an upgrade keeps the token every sidecar holds.
func checkTokenMode(t *testing.T, c client.Client, kc []string) {
	t.Helper()
	ctx := context.Background()
	ns := envtestsuite.NewNamespace(t, c, "token-")
	set := []string{"--set", "broker.auth.mode=token", "--set", "webhook.enabled=false", "--set", "crds.enabled=false"}
	var tokens []string
	for _, verb := range []string{"install", "upgrade"} {
		if out, err := helm(t, nil, append(append([]string{verb, "tokened", chartDir, "--namespace", ns}, set...), kc...)...); err != nil {
			t.Fatalf("helm %s in token mode: %v\n%s", verb, err, out)
		}
		if verb == "install" {
			t.Cleanup(func() { _, _ = helm(t, nil, append([]string{"uninstall", "tokened", "--namespace", ns}, kc...)...) })
		}
		secret := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "tokened-weighstation-broker-token"}, secret); err != nil {
			t.Fatal(err)
		}
		if len(secret.Data["token"]) < 32 {
			t.Fatalf("broker token of %d bytes, want a random one of 48", len(secret.Data["token"]))
		}
		tokens = append(tokens, string(secret.Data["token"]))
	}
	if tokens[0] != tokens[1] {
		t.Error("the upgrade changed the broker token, which every sidecar holds")
	}
}

// checkInstalled checks what the chart created.
func checkInstalled(t *testing.T, c client.Client, ns string) {
	t.Helper()
	ctx := context.Background()
	get := func(o client.Object) bool {
		t.Helper()
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Errorf("%T %s: %v", o, o.GetName(), err)
			return false
		}
		return true
	}
	deploy := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "weighstation-operator"}}
	if get(deploy) && (*deploy.Spec.Replicas != 2 || deploy.Spec.Template.Spec.ServiceAccountName != "weighstation-operator") {
		t.Errorf("operator Deployment: %d replicas as %q, want 2 as weighstation-operator", *deploy.Spec.Replicas, deploy.Spec.Template.Spec.ServiceAccountName)
	}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "weighstation-broker"}}
	if get(sts) && sts.Spec.ServiceName != "weighstation-broker-routes" {
		t.Errorf("broker StatefulSet's service %q, want the headless weighstation-broker-routes", sts.Spec.ServiceName)
	}
	xds := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "weighstation-xds"}}
	if get(xds) && xds.Spec.Selector["weighstation.io/xds-leader"] != "true" {
		t.Errorf("xDS Service selector %v, want the leader label", xds.Spec.Selector)
	}
	headless := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "weighstation-broker-routes"}}
	if get(headless) && headless.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("routes Service clusterIP %q, want None", headless.Spec.ClusterIP)
	}
	for _, o := range []client.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "weighstation-broker"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "weighstation-operator-metrics"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "weighstation-sidecar-injector"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "weighstation-operator"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "weighstation-broker"}},
		&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "weighstation-broker"}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "weighstation-operator"}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "weighstation-operator"}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "weighstation-operator"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "weighstation-operator"}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "weighstation-operator"}},
	} {
		get(o)
	}
	for _, name := range []string{"topics.weighstation.io", "subscriptions.weighstation.io"} {
		envtestsuite.Eventually(t, waitTimeout, 50*time.Millisecond, "CRD "+name+" established", func() error {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
				return err
			}
			if crd.Annotations["helm.sh/resource-policy"] != "keep" {
				t.Fatalf("CRD %s annotations %v, want helm.sh/resource-policy: keep", name, crd.Annotations)
			}
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
			}
			return fmtErr("not established: %+v", crd.Status.Conditions)
		})
	}
	// The broker admits the credentials the operator issues: no shared
	// token, and it waits for the trust ConfigMap the operator writes.
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "weighstation-broker-token"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("broker token Secret: %v, want none (broker.auth.mode operator)", err)
	}
	if !slices.ContainsFunc(sts.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
		return v.ConfigMap != nil && v.ConfigMap.Name == "weighstation-broker-trust"
	}) {
		t.Errorf("broker volumes %+v, want the trust ConfigMap weighstation-broker-trust", sts.Spec.Template.Spec.Volumes)
	}
}

func topicShortNames(t *testing.T, c client.Client) []string {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "topics.weighstation.io"}, crd); err != nil {
		t.Fatal(err)
	}
	return crd.Spec.Names.ShortNames
}

// checkServerVersion asks the apiserver its version with the real kubectl,
// which fails on an unstamped build's v0.0.0-master+$Format:%H$.
func checkServerVersion(t *testing.T, kubeconfig string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	kubectl := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	out, err := exec.CommandContext(ctx, kubectl, "version", "-o", "json", "--kubeconfig", kubeconfig).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl version: %v\n%s", err, out)
	}
	var v struct {
		Client struct{ GitVersion string } `json:"clientVersion"`
		Server struct{ GitVersion string } `json:"serverVersion"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("kubectl version: %v\n%s", err, out)
	}
	if v.Client.GitVersion != "v1.37.0" || v.Server.GitVersion != "v1.37.0" {
		t.Errorf("kubectl %q, apiserver %q, want both v1.37.0 (hack/setup-envtest.sh stamps them)", v.Client.GitVersion, v.Server.GitVersion)
	}
}

// copyChart copies the chart into a temporary directory, passing each
// file's text (by its path in the chart) through edit.
func copyChart(t *testing.T, edit func(name, text string) string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "weighstation")
	err := filepath.WalkDir(chartDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(chartDir, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), []byte(edit(rel, string(data))), 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func replaceOnce(t *testing.T, text, old, new string) string {
	t.Helper()
	if strings.Count(text, old) != 1 {
		t.Fatalf("%q is not in the chart exactly once", old)
	}
	return strings.Replace(text, old, new, 1)
}

// startAPIServer starts a real apiserver with no CRDs (the chart installs
// them) and returns an admin client and a kubeconfig file for helm.
func startAPIServer(t *testing.T) (client.Client, string) {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run `make test-chart`, which builds the apiserver and helm (hack/setup-envtest.sh)")
	}
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return c, kubeconfig
}
