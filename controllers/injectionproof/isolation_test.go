package injectionproof_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/weighstation/weighstation/controllers/injectionproof"
)

// Each way out of the sidecar's isolation is refused, naming the pod's
// field; the rest passes.
func TestIsolation(t *testing.T) {
	const uid = 65533
	base := func() *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{
				{Name: injectionproof.SidecarContainer, SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](uid)}},
				{Name: "migrate"},
			},
			Containers: []corev1.Container{{Name: "app"}},
		}}
	}
	for _, tc := range []struct {
		name string
		edit func(*corev1.Pod)
		uid  int64
		want []string // empty: allowed
	}{
		{"a plain pod", func(*corev1.Pod) {}, uid, nil},
		{"the application as another user", func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000)}
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To[int64](1001)}
		}, uid, nil},
		{"the pod's UID is the sidecar's but every container sets its own", func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](uid)}
			p.Spec.InitContainers[1].SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To[int64](1)}
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To[int64](2)}
		}, uid, nil},
		{"shareProcessNamespace false", func(p *corev1.Pod) { p.Spec.ShareProcessNamespace = ptr.To(false) }, uid, nil},
		{"shareProcessNamespace", func(p *corev1.Pod) { p.Spec.ShareProcessNamespace = ptr.To(true) }, uid,
			[]string{"spec.shareProcessNamespace: true is not allowed on a pod with the weighstation sidecar: the application could read the sidecar's credentials through /proc"}},
		{"hostPID", func(p *corev1.Pod) { p.Spec.HostPID = true }, uid, []string{"spec.hostPID: true is not allowed on a pod with the weighstation sidecar"}},
		{"hostNetwork", func(p *corev1.Pod) { p.Spec.HostNetwork = true }, uid, []string{"spec.hostNetwork: true is not allowed on a pod with the weighstation sidecar"}},
		{"an application container as the sidecar's UID", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To[int64](uid)}
		}, uid, []string{"spec.containers[0].securityContext.runAsUser: 65533 (container app) is the weighstation sidecar's UID"}},
		{"an init container as the sidecar's UID", func(p *corev1.Pod) {
			p.Spec.InitContainers[1].SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To[int64](uid)}
		}, uid, []string{"spec.initContainers[1].securityContext.runAsUser: 65533 (container migrate)"}},
		{"the pod's UID, inherited", func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](uid)}
		}, uid, []string{"spec.securityContext.runAsUser: 65533, which containers app, migrate inherit, is the weighstation sidecar's UID"}},
		{"no sidecar UID to compare", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To[int64](uid)}
		}, -1, nil},
		{"an ephemeral container that targets the sidecar", func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug"}, TargetContainerName: injectionproof.SidecarContainer}}
		}, uid, []string{"spec.ephemeralContainers[0].targetContainerName: weighstation-sidecar (ephemeral container debug) is not allowed"}},
		{"an ephemeral container that mounts the token", func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug",
				VolumeMounts: []corev1.VolumeMount{{Name: injectionproof.TokenVolume, MountPath: "/t"}}}}}
		}, uid, []string{"spec.ephemeralContainers[0].volumeMounts[0]: ephemeral container debug mounts volume weighstation-xds-token"}},
		{"all at once, each named", func(p *corev1.Pod) {
			p.Spec.HostPID, p.Spec.HostNetwork, p.Spec.ShareProcessNamespace = true, true, ptr.To(true)
		}, uid, []string{"spec.shareProcessNamespace", "spec.hostPID", "spec.hostNetwork"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := base()
			tc.edit(pod)
			err := injectionproof.Isolation(pod, tc.uid)
			if len(tc.want) == 0 {
				if err != nil {
					t.Errorf("Isolation: %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Isolation: nil, want a refusal saying %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Isolation: %v\nwant it to say %q", err, w)
				}
			}
		})
	}
}
