package injectionproof

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// IsolationError lists why a pod cannot keep its sidecar's token and
// credential from its other containers, each naming the pod field.
type IsolationError struct{ Problems []string }

func (e *IsolationError) Error() string { return strings.Join(e.Problems, "; ") }

// withSidecar ends every refusal: the fields are refused because of the
// sidecar, not in general.
const withSidecar = "is not allowed on a pod with the weighstation sidecar"

// Isolation checks that pod keeps its sidecar apart from its other
// containers: the sidecar holds the pod's token for the operator and, in
// memory, its broker credential, and a container that could read them
// would reach the broker without the sidecar's policy. It refuses
//
//   - spec.shareProcessNamespace, spec.hostPID: another process could read
//     /proc/<sidecar>/root/... (the token) and /proc/<sidecar>/mem;
//   - spec.hostNetwork: the sidecar's 127.0.0.1 listener would be the
//     node's, open to every process on it;
//   - an init or application container that runs as sidecarUID (its
//     securityContext.runAsUser, or the pod's when it sets none): one user
//     may read another process of its own under /proc, and should the pod
//     see the sidecar's processes, nothing would stand between them. An
//     image's USER is not in the pod, so only an explicit runAsUser is
//     refused. A negative sidecarUID skips this check;
//   - an ephemeral container that targets the sidecar (it joins the
//     sidecar's process namespace) or mounts its token volume.
//
// The webhook refuses such pods at creation and such ephemeral containers
// when they are added; Verify checks again, so that a pod admitted while
// the webhook was bypassed gets nothing.
func Isolation(pod *corev1.Pod, sidecarUID int64) error {
	var problems []string
	spec := &pod.Spec
	if spec.ShareProcessNamespace != nil && *spec.ShareProcessNamespace {
		problems = append(problems, "spec.shareProcessNamespace: true "+withSidecar+": the application could read the sidecar's credentials through /proc")
	}
	if spec.HostPID {
		problems = append(problems, "spec.hostPID: true "+withSidecar+": the application, and every process on the node, could read the sidecar's credentials through /proc")
	}
	if spec.HostNetwork {
		problems = append(problems, "spec.hostNetwork: true "+withSidecar+": the sidecar's listener on 127.0.0.1 would be the node's, open to every process on it")
	}
	if sidecarUID >= 0 {
		problems = append(problems, sameUID(spec, sidecarUID)...)
	}
	for i, c := range spec.EphemeralContainers {
		if c.TargetContainerName == SidecarContainer {
			problems = append(problems, fmt.Sprintf("spec.ephemeralContainers[%d].targetContainerName: %s (ephemeral container %s) %s: it would share the sidecar's process namespace and could read its credentials through /proc", i, SidecarContainer, c.Name, withSidecar))
		}
		for j, m := range c.VolumeMounts {
			if m.Name == TokenVolume {
				problems = append(problems, fmt.Sprintf("spec.ephemeralContainers[%d].volumeMounts[%d]: ephemeral container %s mounts volume %s, the sidecar's token, which only the sidecar may hold", i, j, c.Name, TokenVolume))
			}
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return &IsolationError{Problems: problems}
}

// sameUID names the init and application containers other than the
// sidecar that run as uid, by their own runAsUser, or by the pod's.
func sameUID(spec *corev1.PodSpec, uid int64) []string {
	var problems, inherit []string
	for _, list := range []struct {
		field      string
		containers []corev1.Container
	}{{"spec.initContainers", spec.InitContainers}, {"spec.containers", spec.Containers}} {
		for i, c := range list.containers {
			if c.Name == SidecarContainer {
				continue
			}
			if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
				if *c.SecurityContext.RunAsUser == uid {
					problems = append(problems, fmt.Sprintf("%s[%d].securityContext.runAsUser: %d (container %s) is the weighstation sidecar's UID, which no other container of its pod may run as: it could read the sidecar's credentials; run it as another user", list.field, i, uid, c.Name))
				}
				continue
			}
			inherit = append(inherit, c.Name)
		}
	}
	if pod := spec.SecurityContext; pod != nil && pod.RunAsUser != nil && *pod.RunAsUser == uid && len(inherit) > 0 {
		slices.Sort(inherit)
		problems = append(problems, fmt.Sprintf("spec.securityContext.runAsUser: %d, which containers %s inherit, is the weighstation sidecar's UID, which no other container of its pod may run as: they could read the sidecar's credentials; run them as another user", uid, strings.Join(inherit, ", ")))
	}
	return problems
}
