package e2e

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

// PodNotReady says why a pod is not Ready, with every container counted
// (the native sidecar's status is among the init containers'), or ""
// when it is: what `kubectl get pods` shows as READY 2/2.
func PodNotReady(p *corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return "terminating"
	}
	if p.Status.Phase != corev1.PodRunning {
		return fmt.Sprintf("phase %s%s", p.Status.Phase, waitingReasons(p))
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue {
			return fmt.Sprintf("not Ready (%s: %s)%s", c.Reason, c.Message, waitingReasons(p))
		}
	}
	ready, total := readyCount(p)
	if ready != total {
		return fmt.Sprintf("%d/%d containers ready%s", ready, total, waitingReasons(p))
	}
	return ""
}

// readyCount counts the running containers and the native sidecars (init
// containers with restartPolicy Always) that are ready, as kubectl does.
func readyCount(p *corev1.Pod) (ready, total int) {
	sidecars := map[string]bool{}
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars[c.Name] = true
		}
	}
	for _, s := range p.Status.InitContainerStatuses {
		if sidecars[s.Name] {
			total++
			if s.Ready {
				ready++
			}
		}
	}
	total += len(p.Spec.Containers)
	for _, s := range p.Status.ContainerStatuses {
		if s.Ready {
			ready++
		}
	}
	return ready, total
}

func waitingReasons(p *corev1.Pod) string {
	var out []string
	for _, s := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		switch {
		case s.State.Waiting != nil:
			out = append(out, fmt.Sprintf("%s waiting: %s %s", s.Name, s.State.Waiting.Reason, s.State.Waiting.Message))
		case s.State.Terminated != nil && s.State.Terminated.ExitCode != 0:
			out = append(out, fmt.Sprintf("%s exited %d: %s", s.Name, s.State.Terminated.ExitCode, s.State.Terminated.Reason))
		}
		if s.RestartCount > 0 {
			out = append(out, fmt.Sprintf("%s restarted %d times", s.Name, s.RestartCount))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "; " + strings.Join(out, "; ")
}

// InjectionProblems checks a pod the webhook should have given the
// sidecar: the weighstation-sidecar container is an init container with
// restartPolicy Always (a native sidecar) and no ordinary container, the
// pod carries the injected annotation, and, once it runs, the sidecar
// started no later than the application (startedAt has one-second
// resolution: equal is "no later").
func InjectionProblems(p *corev1.Pod) []string {
	var problems []string
	if _, ok := p.Annotations[v1alpha1.InjectedAnnotation]; !ok {
		problems = append(problems, "no "+v1alpha1.InjectedAnnotation+" annotation")
	}
	var sidecar *corev1.Container
	for i := range p.Spec.InitContainers {
		if p.Spec.InitContainers[i].Name == SidecarContainer {
			sidecar = &p.Spec.InitContainers[i]
		}
	}
	for _, c := range p.Spec.Containers {
		if c.Name == SidecarContainer {
			problems = append(problems, SidecarContainer+" is an ordinary container, not an init container")
		}
	}
	switch {
	case sidecar == nil:
		return append(problems, "no "+SidecarContainer+" init container")
	case sidecar.RestartPolicy == nil || *sidecar.RestartPolicy != corev1.ContainerRestartPolicyAlways:
		problems = append(problems, SidecarContainer+" has no restartPolicy Always: not a native sidecar")
	}
	if p.Status.Phase != corev1.PodRunning {
		return problems
	}
	var sidecarStarted *corev1.ContainerStatus
	for i := range p.Status.InitContainerStatuses {
		if p.Status.InitContainerStatuses[i].Name == SidecarContainer {
			sidecarStarted = &p.Status.InitContainerStatuses[i]
		}
	}
	if sidecarStarted == nil || sidecarStarted.State.Running == nil {
		return append(problems, SidecarContainer+" is not running")
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Running == nil {
			continue
		}
		// A restarted sidecar's startedAt is its latest start: compare
		// only a first run.
		if sidecarStarted.RestartCount == 0 && s.State.Running.StartedAt.Before(&sidecarStarted.State.Running.StartedAt) {
			problems = append(problems, fmt.Sprintf("container %s started at %s, before the sidecar (%s)", s.Name,
				s.State.Running.StartedAt.UTC().Format("15:04:05"), sidecarStarted.State.Running.StartedAt.UTC().Format("15:04:05")))
		}
	}
	return problems
}

// Injected reports whether the webhook gave the pod the sidecar at all.
func Injected(p *corev1.Pod) bool {
	for _, c := range p.Spec.InitContainers {
		if c.Name == SidecarContainer {
			return true
		}
	}
	_, annotated := p.Annotations[v1alpha1.InjectedAnnotation]
	return annotated
}

// DeploymentNotReady says why a Deployment is not fully rolled out and
// Ready, or "".
func DeploymentNotReady(d *appsv1.Deployment) string {
	want := desiredReplicas(d.Spec.Replicas)
	s := d.Status
	switch {
	case s.ObservedGeneration < d.Generation:
		return fmt.Sprintf("generation %d not observed yet (%d)", d.Generation, s.ObservedGeneration)
	case s.UpdatedReplicas != want || s.ReadyReplicas != want || s.AvailableReplicas != want || s.Replicas != want:
		return fmt.Sprintf("%d/%d updated, %d ready, %d available, %d in all", s.UpdatedReplicas, want, s.ReadyReplicas, s.AvailableReplicas, s.Replicas)
	}
	return ""
}

// StatefulSetNotReady says why a StatefulSet is not fully rolled out and
// Ready, or "".
func StatefulSetNotReady(st *appsv1.StatefulSet) string {
	want := desiredReplicas(st.Spec.Replicas)
	s := st.Status
	switch {
	case s.ObservedGeneration < st.Generation:
		return fmt.Sprintf("generation %d not observed yet (%d)", st.Generation, s.ObservedGeneration)
	case s.ReadyReplicas != want || s.Replicas != want || (s.UpdateRevision != "" && s.CurrentRevision != s.UpdateRevision) || s.UpdatedReplicas != want:
		return fmt.Sprintf("%d/%d ready, %d updated, revision %s → %s", s.ReadyReplicas, want, s.UpdatedReplicas, s.CurrentRevision, s.UpdateRevision)
	}
	return ""
}

// desiredReplicas is a workload's spec.replicas, 1 when unset (the
// apiserver's default).
func desiredReplicas(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}
