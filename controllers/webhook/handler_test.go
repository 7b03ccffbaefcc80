package webhook

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/injectionproof"
)

// TestInjectorExcludesNamespaces: the handler itself leaves the excluded
// namespaces alone, should a webhook configuration's selector let their
// pods through (a chart value, a hand edit). It reads no namespace.
func TestInjectorExcludesNamespaces(t *testing.T) {
	injector := &Injector{Config: testConfig(), Keys: testKey, Excluded: []string{"weighstation-system", "kube-system"}}
	for _, ns := range injector.Excluded {
		pod := appPod()
		pod.Namespace = ns
		pod.Labels[v1alpha1.InjectLabel] = v1alpha1.InjectEnabled
		raw, err := json.Marshal(pod)
		if err != nil {
			t.Fatal(err)
		}
		resp := injector.Handle(t.Context(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			UID: "x", Operation: admissionv1.Create, Namespace: ns, Object: runtime.RawExtension{Raw: raw},
		}})
		if !resp.Allowed || len(resp.Patches) != 0 {
			t.Errorf("%s: allowed %v, %d patches; want allowed untouched", ns, resp.Allowed, len(resp.Patches))
		}
	}
}

// TestInjectorReadsANewNamespaceThroughTheAPI: a namespace created just
// before its first pod may not be in the cache yet; the handler asks the
// apiserver rather than refuse the pod.
func TestInjectorReadsANewNamespaceThroughTheAPI(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled}}}
	injector := &Injector{
		Config:     testConfig(),
		Keys:       testKey,
		Namespaces: fake.NewClientBuilder().WithScheme(scheme).Build(),
		APIReader:  fake.NewClientBuilder().WithScheme(scheme).WithObjects(ns).Build(),
	}
	raw, err := json.Marshal(appPod())
	if err != nil {
		t.Fatal(err)
	}
	resp := injector.Handle(t.Context(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "x", Operation: admissionv1.Create, Namespace: "shop", Object: runtime.RawExtension{Raw: raw},
	}})
	if !resp.Allowed || len(resp.Patches) == 0 {
		t.Fatalf("allowed %v, %d patches (%v); want the sidecar injected", resp.Allowed, len(resp.Patches), resp.Result)
	}
}

// handle sends pod to injector as a Pod CREATE (or the subresource's
// UPDATE), and returns the response and the pod it makes.
func handle(t *testing.T, injector *Injector, pod *corev1.Pod, subresource string) (admission.Response, *corev1.Pod) {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	op := admissionv1.Create
	if subresource != "" {
		op = admissionv1.Update
	}
	resp := injector.Handle(t.Context(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "x", Operation: op, SubResource: subresource, Namespace: pod.Namespace, Object: runtime.RawExtension{Raw: raw},
	}})
	if len(resp.Patches) == 0 {
		return resp, pod
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for _, op := range resp.Patches {
		doc = applyOp(t, doc, op.Operation, strings.Split(op.Path, "/")[1:], op.Value)
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var patched corev1.Pod
	if err := json.Unmarshal(out, &patched); err != nil {
		t.Fatal(err)
	}
	return resp, &patched
}

// The handler signs every pod it injects; on a reinvocation it signs
// again what another webhook changed since, and patches nothing when
// nothing changed. Without its key it refuses rather than inject a pod
// that would never get a configuration.
func TestInjectorSignsTheProof(t *testing.T) {
	injector := &Injector{Config: testConfig(), Keys: testKey}
	pod := appPod()
	pod.Labels[v1alpha1.InjectLabel] = v1alpha1.InjectEnabled
	resp, injected := handle(t, injector, pod, "")
	if !resp.Allowed || len(resp.Patches) == 0 {
		t.Fatalf("allowed %v, %d patches (%v); want the sidecar injected", resp.Allowed, len(resp.Patches), resp.Result)
	}
	key, _ := testKey.Key()
	if err := injectionproof.Verify(injected, key); err != nil {
		t.Fatalf("the injected pod's proof: %v", err)
	}

	resp, again := handle(t, injector, injected, "")
	if !resp.Allowed || len(resp.Patches) != 0 {
		t.Errorf("a reinvocation with nothing changed: allowed %v, %d patches (%v); want no patch", resp.Allowed, len(resp.Patches), resp.Result)
	}
	// Another webhook (after this one) added a mount to the sidecar.
	s := &again.Spec.InitContainers[0]
	s.VolumeMounts = append(s.VolumeMounts, corev1.VolumeMount{Name: "data", MountPath: "/data", ReadOnly: true})
	if err := injectionproof.Verify(again, key); err == nil {
		t.Fatal("the proof still verifies after the sidecar changed")
	}
	resp, resigned := handle(t, injector, again, "")
	if !resp.Allowed || len(resp.Patches) == 0 {
		t.Fatalf("a reinvocation after a change: allowed %v, %d patches (%v); want the proof signed again", resp.Allowed, len(resp.Patches), resp.Result)
	}
	if err := injectionproof.Verify(resigned, key); err != nil {
		t.Errorf("the proof signed again: %v", err)
	}

	noKey := &Injector{Config: testConfig(), Keys: injectionproof.StaticKey(nil)}
	if resp, _ := handle(t, noKey, pod, ""); resp.Allowed || resp.Result.Code != 503 || !strings.Contains(resp.Result.Message, "not loaded yet") {
		t.Errorf("without a key: allowed %v, %+v; want a 503 saying the key is not loaded", resp.Allowed, resp.Result)
	}
}

// A pod labelled weighstation.io/inject: disabled in an opted-in
// namespace is not injected (the configuration's namespace entry does not
// send it either).
func TestInjectorOptOut(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled}}}
	injector := &Injector{Config: testConfig(), Keys: testKey, Namespaces: fake.NewClientBuilder().WithScheme(scheme).WithObjects(ns).Build()}
	for _, tc := range []struct {
		label  string
		inject bool
	}{{"", true}, {v1alpha1.InjectEnabled, true}, {InjectDisabled, false}} {
		pod := appPod()
		if tc.label != "" {
			pod.Labels[v1alpha1.InjectLabel] = tc.label
		}
		resp, _ := handle(t, injector, pod, "")
		if !resp.Allowed || (len(resp.Patches) > 0) != tc.inject {
			t.Errorf("pod label %q: allowed %v, %d patches (%v); want injected %v", tc.label, resp.Allowed, len(resp.Patches), resp.Result, tc.inject)
		}
	}
}

// kubectl debug may add an ephemeral container beside the application,
// not one that targets the sidecar or mounts its token.
func TestInjectorEphemeralContainers(t *testing.T) {
	injector := &Injector{Config: testConfig(), Keys: testKey}
	pod := appPod()
	if _, err := Inject(pod, testConfig()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ec   corev1.EphemeralContainer
		want string // empty: allowed
	}{
		{"beside the application", corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}, TargetContainerName: "app"}, ""},
		{"targeting the sidecar", corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}, TargetContainerName: ContainerName},
			"spec.ephemeralContainers[0].targetContainerName: weighstation-sidecar (ephemeral container debug) is not allowed"},
		{"mounting the token", corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox",
			VolumeMounts: []corev1.VolumeMount{{Name: tokenVolume, MountPath: "/t"}}}}, "ephemeral container debug mounts volume weighstation-xds-token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pod.DeepCopy()
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{tc.ec}
			resp, _ := handle(t, injector, p, "ephemeralcontainers")
			if tc.want == "" {
				if !resp.Allowed {
					t.Errorf("refused: %v", resp.Result)
				}
				return
			}
			if resp.Allowed || !strings.Contains(resp.Result.Message, tc.want) {
				t.Errorf("allowed %v, %v; want a refusal saying %q", resp.Allowed, resp.Result, tc.want)
			}
		})
	}
}

// applyOp applies one JSON patch operation (add, replace, remove; RFC
// 6902) at the pointer path to doc, and returns the new document.
func applyOp(t *testing.T, doc any, op string, path []string, value any) any {
	t.Helper()
	if len(path) == 0 {
		if op == "remove" {
			return nil
		}
		// Through JSON, so that the value is of the decoded kinds.
		raw, err := json.Marshal(value)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	key := strings.NewReplacer("~1", "/", "~0", "~").Replace(path[0])
	switch d := doc.(type) {
	case map[string]any:
		if len(path) == 1 && op == "remove" {
			delete(d, key)
			return d
		}
		d[key] = applyOp(t, d[key], op, path[1:], value)
		return d
	case []any:
		i := len(d)
		if key != "-" {
			var err error
			if i, err = strconv.Atoi(key); err != nil {
				t.Fatalf("patch index %q: %v", key, err)
			}
		}
		switch {
		case len(path) == 1 && op == "add":
			return append(d[:i], append([]any{applyOp(t, nil, op, nil, value)}, d[i:]...)...)
		case len(path) == 1 && op == "remove":
			return append(d[:i], d[i+1:]...)
		}
		d[i] = applyOp(t, d[i], op, path[1:], value)
		return d
	}
	t.Fatalf("patch %s /%s: the document has %T there", op, strings.Join(path, "/"), doc)
	return nil
}
