package webhook

import (
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

// TestInjectorExcludesNamespaces: the handler itself leaves the excluded
// namespaces alone, should a webhook configuration's selector let their
// pods through (a chart value, a hand edit). It reads no namespace.
func TestInjectorExcludesNamespaces(t *testing.T) {
	injector := &Injector{Config: testConfig(), Excluded: []string{"weighstation-system", "kube-system"}}
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
