package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os/exec"
	"path/filepath"
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
	"sigs.k8s.io/yaml"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/injectionproof"
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
	t.Run("injected pods carry a proof that verifies as stored", func(t *testing.T) {
		key, _ := testKey.Key()
		for _, pod := range []*corev1.Pod{
			createPod(t, labelledNS, nil, nil),
			createPod(t, plainNS, map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled}, nil),
		} {
			// What the apiserver stored, defaults and all.
			if err := injectionproof.Verify(pod, key); err != nil {
				t.Errorf("pod %s/%s: %v", pod.Namespace, pod.Name, err)
			}
		}
	})
	t.Run("opted out in a labelled namespace: untouched", func(t *testing.T) {
		checkUntouched(t, createPod(t, labelledNS, map[string]string{v1alpha1.InjectLabel: InjectDisabled}, nil))
	})

	// The attacks on the sidecar's isolation (issue 30): each is refused,
	// and the refusal names the pod's field.
	for _, tc := range []struct {
		name string
		edit func(*corev1.Pod)
		want string
	}{
		{"spec.shareProcessNamespace", func(p *corev1.Pod) { p.Spec.ShareProcessNamespace = ptr.To(true) },
			"spec.shareProcessNamespace: true is not allowed on a pod with the weighstation sidecar: the application could read the sidecar's credentials through /proc"},
		{"spec.hostPID", func(p *corev1.Pod) { p.Spec.HostPID = true }, "spec.hostPID: true is not allowed on a pod with the weighstation sidecar"},
		{"spec.hostNetwork", func(p *corev1.Pod) { p.Spec.HostNetwork = true }, "spec.hostNetwork: true is not allowed on a pod with the weighstation sidecar"},
		{"an application container running as the sidecar's UID", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To[int64](DefaultRunAsUser)}
		}, "spec.containers[0].securityContext.runAsUser: 65533 (container app) is the weighstation sidecar's UID"},
		{"a pod running as the sidecar's UID", func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](DefaultRunAsUser)}
		}, "spec.securityContext.runAsUser: 65533, which containers app, migrate inherit, is the weighstation sidecar's UID"},
	} {
		t.Run("attack: "+tc.name+" is refused", func(t *testing.T) {
			for _, opted := range []struct{ ns, label string }{{labelledNS, ""}, {plainNS, v1alpha1.InjectEnabled}} {
				pod := appPod()
				pod.Name, pod.Namespace, pod.GenerateName = "", opted.ns, "isolation-"
				if opted.label != "" {
					pod.Labels[v1alpha1.InjectLabel] = opted.label
				}
				tc.edit(pod)
				err := k8sClient.Create(ctx, pod)
				if err == nil || !strings.Contains(err.Error(), Name) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("creating the pod in %s: %v\nwant a refusal from %s saying %q", opted.ns, err, Name, tc.want)
				}
			}
		})
	}
	t.Run("attack: an ephemeral container that targets the sidecar is refused", func(t *testing.T) {
		pod := createPod(t, labelledNS, nil, nil)
		debug := func(target string) error {
			p := pod.DeepCopy()
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
				EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "peek-" + target, Image: "busybox"}, TargetContainerName: target})
			return k8sClient.SubResource("ephemeralcontainers").Update(ctx, p)
		}
		err := debug(ContainerName)
		if want := "spec.ephemeralContainers[0].targetContainerName: weighstation-sidecar (ephemeral container peek-weighstation-sidecar) is not allowed"; err == nil || !strings.Contains(err.Error(), Name) || !strings.Contains(err.Error(), want) {
			t.Fatalf("an ephemeral container targeting the sidecar: %v; want a refusal from %s saying %q", err, Name, want)
		}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			t.Fatal(err)
		}
		if err := debug("app"); err != nil {
			t.Fatalf("an ephemeral container targeting the application: %v", err)
		}
	})
	t.Run("attack: a pod labelled after its creation carries no proof", func(t *testing.T) {
		key, _ := testKey.Key()
		// Outside the opted-in namespaces, not opted in by its label: the
		// apiserver does not send it to the webhook. It writes the
		// injector's annotation itself and mounts a token for the
		// sidecar's audience into its application.
		stealer := func(annotations map[string]string) *corev1.Pod {
			pod := appPod()
			pod.Name, pod.Namespace, pod.GenerateName = "", plainNS, "late-"
			pod.Annotations = annotations
			pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "xds", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: cfg.Audience, Path: "token"}}}}}})
			pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "xds", MountPath: "/xds"}}
			if err := k8sClient.Create(ctx, pod); err != nil {
				t.Fatalf("creating a pod that did not opt in: %v", err)
			}
			pod.Labels[v1alpha1.InjectLabel] = v1alpha1.InjectEnabled
			if err := k8sClient.Update(ctx, pod); err != nil {
				t.Fatalf("labelling it: %v", err)
			}
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
				t.Fatal(err)
			}
			return pod
		}
		pod := stealer(map[string]string{InjectedAnnotation: cfg.Version})
		if err := injectionproof.Verify(pod, key); !errors.Is(err, injectionproof.ErrNotProven) || !strings.Contains(err.Error(), "no "+injectionproof.Annotation+" annotation") {
			t.Errorf("Verify: %v, want it refused for want of a proof", err)
		}
		// A proof copied from an injected pod of the same namespace and
		// service account does not fit it.
		injected := createPod(t, plainNS, map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled}, nil)
		pod = stealer(map[string]string{InjectedAnnotation: cfg.Version, injectionproof.Annotation: injected.Annotations[injectionproof.Annotation]})
		if err := injectionproof.Verify(pod, key); !errors.Is(err, injectionproof.ErrNotProven) {
			t.Errorf("Verify with a copied proof: %v, want it refused", err)
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
	injector := &Injector{Config: testConfig(), Keys: testKey, Namespaces: k8sClient, Excluded: []string{operatorNS, "kube-system"}}
	srv := &Server{
		GetCertificate: authority.NewServingCertificate([]string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)}).GetCertificate,
		Injector:       injector,
		Log:            testr.New(t),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()

	name := "sidecar-injector-" + operatorNS
	cfg := webhookConfiguration(t, name, fmt.Sprintf("https://%s%s", ln.Addr(), Path), operatorNS)
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

// webhookConfiguration is what the chart renders for a release in
// operatorNS (bin/helm template), named name, with a URL instead of the
// Service: the apiserver in envtest cannot reach a Service.
func webhookConfiguration(t *testing.T, name, url, operatorNS string) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
	renderedObject(t, operatorNS, "MutatingWebhookConfiguration", cfg)
	cfg.Name, cfg.Labels = name, nil
	for i := range cfg.Webhooks {
		cfg.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url}
	}
	return cfg
}

// renderedObject decodes into obj the one object of kind that the chart
// renders for a release in namespace (bin/helm template, which
// hack/setup-envtest.sh builds).
func renderedObject(t *testing.T, namespace, kind string, obj any) {
	t.Helper()
	helm, err := filepath.Abs(filepath.Join("..", "..", "bin", "helm"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(helm, "template", "weighstation", filepath.Join("..", "..", "charts", "weighstation"), "--namespace", namespace).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			err = fmt.Errorf("%w: %s", err, exit.Stderr)
		}
		t.Fatalf("helm template (run `make envtest` to build bin/helm): %v", err)
	}
	found := 0
	for doc := range strings.SplitSeq(string(out), "\n---") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("a rendered document: %v", err)
		}
		if meta.Kind != kind {
			continue
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("the rendered %s: %v", kind, err)
		}
		found++
	}
	if found != 1 {
		t.Fatalf("the chart renders %d objects of kind %s, want 1", found, kind)
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
