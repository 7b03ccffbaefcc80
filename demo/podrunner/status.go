package podrunner

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/test/bench/harness/kubeenv"
)

// markRunning patches the Pod's status as a kubelet does once its
// containers run: phase Running, its IP (loopback: every process of the
// demo shares this machine), Ready, and the sidecar's container status.
func markRunning(ctx context.Context, c *kubeenv.Cluster, pod *corev1.Pod) error {
	now := metav1.NewTime(time.Now())
	patch := pod.DeepCopy()
	patch.Status.Phase = corev1.PodRunning
	patch.Status.HostIP, patch.Status.PodIP = "127.0.0.1", "127.0.0.1"
	patch.Status.PodIPs = []corev1.PodIP{{IP: "127.0.0.1"}}
	patch.Status.StartTime = &now
	patch.Status.Conditions = nil
	for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		patch.Status.Conditions = append(patch.Status.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
	patch.Status.InitContainerStatuses = []corev1.ContainerStatus{{
		Name: SidecarContainer, Ready: true, Started: ptr.To(true), State: running, Image: imageOf(pod, SidecarContainer),
	}}
	if err := c.Client.Status().Patch(ctx, patch, ctrlclient.MergeFrom(pod)); err != nil {
		return fmt.Errorf("patching the status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

func imageOf(pod *corev1.Pod, name string) string {
	for _, c := range append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if c.Name == name {
			return c.Image
		}
	}
	return ""
}
