package webhook

import (
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
