package e2e

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

func injectedPod(sidecarStart, appStart time.Time, sidecarReady, appReady bool) *corev1.Pod {
	running := func(at time.Time) corev1.ContainerState {
		return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(at)}}
	}
	podReady := corev1.ConditionFalse
	if sidecarReady && appReady {
		podReady = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "billing", Annotations: map[string]string{v1alpha1.InjectedAnnotation: "0.1.0"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: SidecarContainer, RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}},
			Containers:     []corev1.Container{{Name: "app"}},
		},
		Status: corev1.PodStatus{
			Phase:                 corev1.PodRunning,
			Conditions:            []corev1.PodCondition{{Type: corev1.PodReady, Status: podReady}},
			InitContainerStatuses: []corev1.ContainerStatus{{Name: SidecarContainer, Ready: sidecarReady, State: running(sidecarStart)}},
			ContainerStatuses:     []corev1.ContainerStatus{{Name: "app", Ready: appReady, State: running(appStart)}},
		},
	}
}

func TestPodNotReadyAndInjection(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	p := injectedPod(t0, t0.Add(time.Second), true, true)
	if why := PodNotReady(p); why != "" {
		t.Fatalf("a ready pod: %s", why)
	}
	if problems := InjectionProblems(p); len(problems) != 0 {
		t.Fatalf("a well injected pod: %v", problems)
	}
	if why := PodNotReady(injectedPod(t0, t0, false, true)); !strings.Contains(why, "not Ready") {
		t.Fatalf("a pod whose sidecar is not ready: %q", why)
	}
	p = injectedPod(t0, t0, false, true)
	p.Status.Conditions[0].Status = corev1.ConditionTrue
	if why := PodNotReady(p); why != "1/2 containers ready" {
		t.Fatalf("counting the sidecar: %q", why)
	}
	early := injectedPod(t0.Add(2*time.Second), t0, true, true)
	if problems := InjectionProblems(early); len(problems) != 1 || !strings.Contains(problems[0], "before the sidecar") {
		t.Fatalf("an application that started first: %v", problems)
	}
	plain := injectedPod(t0, t0, true, true)
	plain.Spec.InitContainers[0].RestartPolicy = nil
	plain.Annotations = nil
	if problems := InjectionProblems(plain); len(problems) != 2 {
		t.Fatalf("a plain init container without the annotation: %v", problems)
	}
	bare := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull"}}}}}}
	if why := PodNotReady(bare); !strings.Contains(why, "ErrImageNeverPull") {
		t.Fatalf("a pending pod: %q", why)
	}
	if Injected(bare) {
		t.Fatal("a bare pod is injected")
	}
}

func TestWorkloadsNotReady(t *testing.T) {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: 2}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}}
	if why := DeploymentNotReady(d); why != "" {
		t.Fatalf("a ready Deployment: %s", why)
	}
	d.Status.Replicas, d.Status.ReadyReplicas = 3, 1 // mid-rollout
	if DeploymentNotReady(d) == "" {
		t.Fatal("a Deployment mid-rollout is ready")
	}
	s := &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3)},
		Status: appsv1.StatefulSetStatus{Replicas: 3, ReadyReplicas: 3, UpdatedReplicas: 3, CurrentRevision: "a", UpdateRevision: "a"}}
	if why := StatefulSetNotReady(s); why != "" {
		t.Fatalf("a ready StatefulSet: %s", why)
	}
	s.Status.ReadyReplicas = 2
	if StatefulSetNotReady(s) == "" {
		t.Fatal("a StatefulSet with a broker down is ready")
	}
}
