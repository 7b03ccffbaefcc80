package webhook

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestInjectResourceOverrides: the injected sidecar's resources for each
// combination of annotations, and the pods refused, with a message that
// names the annotation and the bound.
func TestInjectResourceOverrides(t *testing.T) {
	type res struct{ cpuReq, cpuLim, memReq, memLim string }
	defaults := res{"50m", "500m", "96Mi", "128Mi"}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        res
		// wantErr are substrings of the refusal; none: injected.
		wantErr []string
	}{
		{name: "no annotations: the defaults", want: defaults},
		{name: "every value overridden", annotations: map[string]string{
			CPURequestAnnotation: "100m", CPULimitAnnotation: "1", MemoryRequestAnnotation: "128Mi", MemoryLimitAnnotation: "256Mi",
		}, want: res{"100m", "1", "128Mi", "256Mi"}},
		{name: "one value overridden, the others default", annotations: map[string]string{MemoryLimitAnnotation: "512Mi"},
			want: res{"50m", "500m", "96Mi", "512Mi"}},
		{name: "at the bounds exactly", annotations: map[string]string{
			CPURequestAnnotation: "10m", CPULimitAnnotation: "2", MemoryRequestAnnotation: "32Mi", MemoryLimitAnnotation: "1Gi",
		}, want: res{"10m", "2", "32Mi", "1Gi"}},
		{name: "memory limit at budget plus margin exactly", annotations: map[string]string{MemoryRequestAnnotation: "64Mi", MemoryLimitAnnotation: "112Mi"},
			want: res{"50m", "500m", "64Mi", "112Mi"}},
		{name: "cpu request below min", annotations: map[string]string{CPURequestAnnotation: "5m"},
			wantErr: []string{CPURequestAnnotation, "below the operator's minimum 10m", "-sidecar-cpu-min"}},
		{name: "cpu limit above max", annotations: map[string]string{CPULimitAnnotation: "3"},
			wantErr: []string{CPULimitAnnotation, "above the operator's maximum 2", "-sidecar-cpu-max"}},
		{name: "memory request below min", annotations: map[string]string{MemoryRequestAnnotation: "16Mi"},
			wantErr: []string{MemoryRequestAnnotation, "below the operator's minimum 32Mi"}},
		{name: "memory limit above max", annotations: map[string]string{MemoryLimitAnnotation: "2Gi"},
			wantErr: []string{MemoryLimitAnnotation, "above the operator's maximum 1Gi", "-sidecar-memory-max"}},
		{name: "memory limit below budget plus margin", annotations: map[string]string{MemoryRequestAnnotation: "64Mi", MemoryLimitAnnotation: "80Mi"},
			wantErr: []string{MemoryLimitAnnotation, "80Mi is below 112Mi", "memory budget (64Mi)", "margin of 48Mi"}},
		{name: "unparsable quantity", annotations: map[string]string{CPULimitAnnotation: "lots"},
			wantErr: []string{CPULimitAnnotation, `"lots" is not a quantity`}},
		{name: "cpu request above cpu limit", annotations: map[string]string{CPURequestAnnotation: "1", CPULimitAnnotation: "500m"},
			wantErr: []string{CPURequestAnnotation + " (1) must not exceed " + CPULimitAnnotation + " (500m)"}},
		{name: "memory request above the default memory limit", annotations: map[string]string{MemoryRequestAnnotation: "256Mi"},
			wantErr: []string{MemoryRequestAnnotation + " (256Mi) must not exceed " + MemoryLimitAnnotation + " (128Mi)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "app", Annotations: tc.annotations},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
			}
			changed, err := Inject(pod, testConfig())
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("injected; want a refusal naming %q", tc.wantErr)
				}
				for _, s := range tc.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("refusal %q does not say %q", err, s)
					}
				}
				if changed || len(pod.Spec.InitContainers) != 0 {
					t.Errorf("a refused pod was changed: %+v", pod.Spec.InitContainers)
				}
				return
			}
			if err != nil || !changed {
				t.Fatalf("Inject = %v, %v; want injected", changed, err)
			}
			got := pod.Spec.InitContainers[0].Resources
			for _, v := range []struct {
				name string
				list corev1.ResourceList
				key  corev1.ResourceName
				want string
			}{
				{"cpu request", got.Requests, corev1.ResourceCPU, tc.want.cpuReq},
				{"cpu limit", got.Limits, corev1.ResourceCPU, tc.want.cpuLim},
				{"memory request", got.Requests, corev1.ResourceMemory, tc.want.memReq},
				{"memory limit", got.Limits, corev1.ResourceMemory, tc.want.memLim},
			} {
				q := v.list[v.key]
				if q.Cmp(resource.MustParse(v.want)) != 0 {
					t.Errorf("%s = %s, want %s", v.name, q.String(), v.want)
				}
			}
		})
	}
}

// TestResourcesValidate: defaults out of their own bounds stop the
// operator, naming the flag.
func TestResourcesValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		change  func(*Resources)
		wantErr string
	}{
		{name: "the defaults", change: func(*Resources) {}},
		{name: "memory limit flag under budget plus margin", change: func(r *Resources) {
			r.MemoryLimit = resource.MustParse("90Mi")
			r.MemoryRequest = resource.MustParse("64Mi")
		},
			wantErr: "-sidecar-memory-limit: 90Mi is below 112Mi"},
		{name: "min above max", change: func(r *Resources) { r.CPUMin = resource.MustParse("3") },
			wantErr: "-sidecar-cpu-min (3) must not exceed -sidecar-cpu-max (2)"},
		{name: "request above limit", change: func(r *Resources) { r.CPURequest = resource.MustParse("1") },
			wantErr: "-sidecar-cpu-request (1) must not exceed -sidecar-cpu-limit (500m)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := testConfig().Resources
			tc.change(&r)
			err := r.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Validate = %v, want an error saying %q", err, tc.wantErr)
			}
		})
	}
}
