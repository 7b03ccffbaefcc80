package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/pki"
	"github.com/weighstation/weighstation/internal/envtestsuite"
)

// TestAPIServerCallsWebhook: the real apiserver calls the operator's
// webhook over TLS (a serving certificate from the operator's CA, the
// caBundle written by CABundle) on every Pod CREATE, and stores what it
// answers.
func TestAPIServerCallsWebhook(t *testing.T) {
	ctx := t.Context()
	operatorNS := envtestsuite.NewNamespace(t, k8sClient, "weighstation-system-")
	injector := startWebhook(t, operatorNS)
	cfg := injector.Config

	labelledNS := newNamespace(t, map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled})
	plainNS := newNamespace(t, nil)

	// The apiserver picks a new webhook configuration up in the
	// background: wait until a pod comes back injected.
	envtestsuite.Eventually(t, eventuallyTimeout, poll, "the apiserver calling the webhook", func() error {
		pod := createPod(t, labelledNS, nil, nil)
		if _, ok := pod.Annotations[InjectedAnnotation]; !ok {
			return errors.New("a pod in a labelled namespace was stored without the sidecar")
		}
		return nil
	})

	t.Run("opted in by the namespace label", func(t *testing.T) {
		pod := createPod(t, labelledNS, nil, nil)
		checkInjected(t, pod, cfg)
		t.Run("re-invocation leaves it unchanged", func(t *testing.T) { checkReinvocation(t, injector, pod) })
	})
	t.Run("opted in by the pod label", func(t *testing.T) {
		pod := createPod(t, plainNS, map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled}, nil)
		checkInjected(t, pod, cfg)
		t.Run("re-invocation leaves it unchanged", func(t *testing.T) { checkReinvocation(t, injector, pod) })
	})
	t.Run("the application's own prometheus.io annotations are kept, and none added", func(t *testing.T) {
		own := map[string]string{PrometheusScrapeAnnotation: "true", PrometheusPortAnnotation: "8080"}
		pod := createPod(t, labelledNS, nil, own)
		if _, ok := pod.Annotations[InjectedAnnotation]; !ok || !hasContainer(pod, ContainerName) {
			t.Fatalf("stored without the sidecar: annotations %v", pod.Annotations)
		}
		if got := prometheusAnnotations(pod); !maps.Equal(own, got) {
			t.Errorf("stored prometheus.io annotations %v, want the pod's own %v alone", got, own)
		}
	})
	t.Run("not opted in: untouched", func(t *testing.T) {
		checkUntouched(t, createPod(t, plainNS, nil, nil))
	})
	for _, ns := range []string{"kube-system", operatorNS} {
		t.Run("excluded namespace "+ns+": untouched even with the pod label", func(t *testing.T) {
			checkUntouched(t, createPod(t, ns, map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled}, nil))
		})
	}
	t.Run("a pod that claims a sidecar it was not given is refused", func(t *testing.T) {
		pod := appPod()
		pod.Name, pod.Namespace = "", labelledNS
		pod.GenerateName = "claims-"
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{Name: ContainerName, Image: "impostor"})
		err := k8sClient.Create(ctx, pod)
		if err == nil {
			t.Fatal("the apiserver stored a pod that claims the sidecar")
		}
		for _, want := range []string{Name, "did not add"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("refusal %q does not say %q", err, want)
			}
		}
	})
	t.Run("an application container that mounts the sidecar's token is refused", func(t *testing.T) {
		pod := appPod()
		pod.Name, pod.Namespace, pod.GenerateName = "", labelledNS, "steals-"
		pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: tokenVolume, MountPath: "/stolen"})
		err := k8sClient.Create(ctx, pod)
		if err == nil {
			t.Fatal("the apiserver stored a pod whose application mounts the sidecar's token")
		}
		for _, want := range []string{Name, "only the sidecar may hold a token", tokenVolume} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("refusal %q does not say %q", err, want)
			}
		}
	})
	t.Run("an ephemeral container that mounts the sidecar's token is refused", func(t *testing.T) {
		pod := createPod(t, labelledNS, nil, nil)
		debug := func(name string, mounts ...corev1.VolumeMount) error {
			p := pod.DeepCopy()
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
				EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: name, Image: "busybox", VolumeMounts: mounts}})
			return k8sClient.SubResource("ephemeralcontainers").Update(ctx, p)
		}
		err := debug("steal", corev1.VolumeMount{Name: tokenVolume, MountPath: "/stolen"})
		if err == nil || !strings.Contains(err.Error(), Name) || !strings.Contains(err.Error(), "ephemeral container steal mounts volume "+tokenVolume) {
			t.Fatalf("adding an ephemeral container that mounts the sidecar's token: %v; want a refusal from %s naming it", err, Name)
		}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			t.Fatal(err)
		}
		if err := debug("look", corev1.VolumeMount{Name: caVolume, MountPath: "/ca"}); err != nil {
			t.Fatalf("an ephemeral container that mounts only the CA bundle: %v", err)
		}
	})
	t.Run("refused resource annotations name the annotation", func(t *testing.T) {
		pod := appPod()
		pod.Name, pod.Namespace, pod.GenerateName = "", labelledNS, "big-"
		pod.Annotations = map[string]string{MemoryLimitAnnotation: "64Gi"}
		err := k8sClient.Create(ctx, pod)
		if err == nil || !strings.Contains(err.Error(), Name) || !strings.Contains(err.Error(), MemoryLimitAnnotation+": 64Gi is above the operator's maximum 1Gi") {
			t.Fatalf("creating a pod over the memory bound: %v; want a refusal from %s naming %s and the bound", err, Name, MemoryLimitAnnotation)
		}
	})
}

// startWebhook runs the webhook on 127.0.0.1 with a certificate from an
// operator CA in operatorNS, registers it with the apiserver by URL (the
// apiserver cannot reach a Service in envtest), and has CABundle write
// the caBundle.
func startWebhook(t *testing.T, operatorNS string) *Injector {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	authority, err := pki.New(k8sClient, k8sClient, pki.Options{Namespace: operatorNS, DNSNames: []string{"weighstation-xds"}, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := authority.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	injector := &Injector{Config: testConfig(), Namespaces: k8sClient, Excluded: []string{operatorNS, "kube-system"}}
	srv := &Server{
		GetCertificate: authority.NewServingCertificate([]string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)}).GetCertificate,
		Injector:       injector,
		Log:            testr.New(t),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()

	name := "sidecar-injector-" + operatorNS
	cfg := webhookConfiguration(name, fmt.Sprintf("https://%s%s", ln.Addr(), Path), operatorNS)
	if err := k8sClient.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Delete the configuration first, so no later test's pod meets a
		// webhook that is gone.
		if err := k8sClient.Delete(context.Background(), cfg); err != nil {
			t.Errorf("deleting the webhook configuration: %v", err)
		}
		cancel()
		if err := <-served; err != nil {
			t.Errorf("webhook server: %v", err)
		}
	})
	sync := &CABundle{Reader: k8sClient, Writer: k8sClient, Name: name, Bundle: authority.Bundle, Log: testr.New(t)}
	if wrote, err := sync.Sync(ctx); err != nil || !wrote {
		t.Fatalf("CABundle.Sync = %v, %v; want the bundle written", wrote, err)
	}
	if wrote, err := sync.Sync(ctx); err != nil || wrote {
		t.Fatalf("a second CABundle.Sync = %v, %v; want nothing to write", wrote, err)
	}
	return injector
}

// webhookConfiguration is what the chart installs, with a URL instead of
// the Service.
func webhookConfiguration(name, url, operatorNS string) *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    Name,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url},
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
			TimeoutSeconds:          ptr.To[int32](5),
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{operatorNS, "kube-system"},
			}}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}, {
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/ephemeralcontainers"}},
			}},
		}},
	}
}

func newNamespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "inject-", Labels: labels}}
	if err := k8sClient.Create(t.Context(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

// createPod creates appPod in namespace, with labels added, and returns
// what the apiserver stored.
func createPod(t *testing.T, namespace string, labels, annotations map[string]string) *corev1.Pod {
	t.Helper()
	pod := appPod()
	pod.Name, pod.Namespace, pod.GenerateName = "", namespace, "app-"
	for k, v := range labels {
		pod.Labels[k] = v
	}
	pod.Annotations = annotations
	if err := k8sClient.Create(t.Context(), pod); err != nil {
		t.Fatalf("creating a pod in %s: %v", namespace, err)
	}
	var stored corev1.Pod
	if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(pod), &stored); err != nil {
		t.Fatal(err)
	}
	return &stored
}

func checkUntouched(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if _, ok := pod.Annotations[InjectedAnnotation]; ok || hasContainer(pod, ContainerName) || len(pod.Spec.InitContainers) != 1 || len(pod.Spec.Volumes) != 1 || len(prometheusAnnotations(pod)) > 0 {
		t.Errorf("pod %s/%s was changed: annotations %v, init containers %d, volumes %d", pod.Namespace, pod.Name, pod.Annotations, len(pod.Spec.InitContainers), len(pod.Spec.Volumes))
	}
}

// checkReinvocation sends the stored, injected pod through the mutation
// and the handler again, as a reinvocation would: nothing changes.
func checkReinvocation(t *testing.T, injector *Injector, pod *corev1.Pod) {
	t.Helper()
	again := pod.DeepCopy()
	if changed, err := Inject(again, injector.Config); err != nil || changed || !equality.Semantic.DeepEqual(pod, again) {
		t.Errorf("Inject on the injected pod = %v, %v (equal: %v); want it unchanged", changed, err, equality.Semantic.DeepEqual(pod, again))
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	resp := injector.Handle(t.Context(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "re", Operation: admissionv1.Create, Namespace: pod.Namespace, Object: runtime.RawExtension{Raw: raw},
	}})
	if !resp.Allowed || len(resp.Patches) != 0 {
		t.Errorf("the handler on the injected pod: allowed %v, %d patches (%v); want allowed and no patch", resp.Allowed, len(resp.Patches), resp.Result)
	}
}
