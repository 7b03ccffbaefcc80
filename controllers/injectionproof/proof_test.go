package injectionproof_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/injectionproof"
	"github.com/weighstation/weighstation/controllers/webhook"
)

const audience = "weighstation.io/xds"

var key = bytes.Repeat([]byte{7}, 32)

// injectedPod is a pod as the webhook leaves it: injected by webhook.Inject
// and signed.
func injectedPod(t *testing.T) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "shop", Labels: map[string]string{"app": "shop"}},
		Spec: corev1.PodSpec{
			ServiceAccountName: "app",
			Containers:         []corev1.Container{{Name: "app", Image: "app"}},
		},
	}
	cfg := webhook.Config{
		Image: "ghcr.io/weighstation/weighstation:v1.2.3", Operator: "weighstation-xds.mesh.svc:9443",
		Broker: "nats://weighstation-broker.mesh.svc:4222", Audience: audience, TokenExpirationSeconds: 3600,
		Version: "v1.2.3", Resources: webhook.DefaultResources(), HealthPort: webhook.DefaultHealthPort,
		MetricsPort: webhook.DefaultMetricsPort, RunAsUser: webhook.DefaultRunAsUser,
	}
	if changed, err := webhook.Inject(pod, cfg); err != nil || !changed {
		t.Fatalf("Inject = %v, %v", changed, err)
	}
	proof, err := injectionproof.Sign(pod, audience, key)
	if err != nil {
		t.Fatal(err)
	}
	pod.Annotations[injectionproof.Annotation] = proof
	return pod
}

func sidecar(pod *corev1.Pod) *corev1.Container { return &pod.Spec.InitContainers[0] }

// Verify accepts the pod the webhook signed, also after what the apiserver
// defaults and what may change without touching the sidecar's trust, and
// refuses every other pod naming what differs.
func TestVerify(t *testing.T) {
	if err := injectionproof.Verify(injectedPod(t), key); err != nil {
		t.Fatalf("Verify on the signed pod: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*corev1.Pod)
	}{
		{"labels and other annotations", func(p *corev1.Pod) {
			p.Labels["team"] = "shop"
			p.Annotations["note"] = "x"
		}},
		{"the apiserver's defaults", func(p *corev1.Pod) {
			s := sidecar(p)
			s.TerminationMessagePath, s.ImagePullPolicy = "/dev/termination-log", corev1.PullIfNotPresent
			for i := range s.Env {
				s.Env[i].ValueFrom.FieldRef.APIVersion = "v1"
			}
			s.StartupProbe.TimeoutSeconds = 1
		}},
		{"an in-place resize of the sidecar", func(p *corev1.Pod) {
			sidecar(p).Resources = corev1.ResourceRequirements{}
		}},
		{"the ServiceAccount admission plugin's mount", func(p *corev1.Pod) {
			s := sidecar(p)
			s.VolumeMounts = append(s.VolumeMounts, corev1.VolumeMount{Name: "kube-api-access-x1", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true})
		}},
		{"the application's image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "app:v2" }},
		{"an ephemeral container that targets the application", func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}, TargetContainerName: "app"}}
		}},
	} {
		t.Run("accepts "+tc.name, func(t *testing.T) {
			pod := injectedPod(t)
			tc.edit(pod)
			if err := injectionproof.Verify(pod, key); err != nil {
				t.Errorf("Verify: %v, want nil", err)
			}
		})
	}

	otherKey := bytes.Repeat([]byte{8}, 32)
	for _, tc := range []struct {
		name string
		edit func(*corev1.Pod)
		key  []byte
		want string
	}{
		{"no proof (a pod labelled after creation)", func(p *corev1.Pod) { delete(p.Annotations, injectionproof.Annotation) }, nil,
			"the pod has no weighstation.io/injection-proof annotation"},
		{"a proof that is not one", func(p *corev1.Pod) { p.Annotations[injectionproof.Annotation] = "trust me" }, nil,
			"annotation weighstation.io/injection-proof is not a proof"},
		{"another key", func(*corev1.Pod) {}, otherKey,
			"was not written by this operator's sidecar injector for a pod in namespace shop"},
		{"another namespace (a copied proof)", func(p *corev1.Pod) { p.Namespace = "billing" }, nil,
			"for a pod in namespace billing"},
		{"a forged MAC", func(p *corev1.Pod) {
			p.Annotations[injectionproof.Annotation] = strings.Replace(p.Annotations[injectionproof.Annotation], `"sa":"app"`, `"sa":"admin"`, 1)
		}, nil, "was not written by this operator's sidecar injector"},
		{"another service account", func(p *corev1.Pod) { p.Spec.ServiceAccountName = "admin" }, nil,
			`spec.serviceAccountName is "admin", the injector signed "app"`},
		{"a changed injected annotation", func(p *corev1.Pod) { p.Annotations[v1alpha1.InjectedAnnotation] = "v9" }, nil,
			`annotation weighstation.io/injected is "v9", the injector signed "v1.2.3"`},
		{"no sidecar", func(p *corev1.Pod) { p.Spec.InitContainers = nil }, nil,
			"the pod has no weighstation-sidecar init container"},
		{"the sidecar's image changed", func(p *corev1.Pod) { sidecar(p).Image = "evil" }, nil,
			"the weighstation-sidecar container (its image, command, args, env, volume mounts or securityContext) is not the one the injector signed"},
		{"the sidecar runs as another user", func(p *corev1.Pod) { sidecar(p).SecurityContext.RunAsUser = ptr.To[int64](1000) }, nil,
			"the weighstation-sidecar container"},
		{"the application mounts the token", func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: injectionproof.TokenVolume, MountPath: "/t"}}
		}, nil, "the volumes that hold a token for audience weighstation.io/xds, or the containers that mount them, are not those the injector signed: the pod has volume weighstation-xds-token (audience weighstation.io/xds, path token, 3600s) mounted by weighstation-sidecar, app"},
		{"a projected token of the sidecar's audience in the application", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "steal", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: audience, Path: "t"}}}}}})
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "steal", MountPath: "/t"}}
		}, nil, "volume steal (audience weighstation.io/xds, path t, 0s) mounted by app"},
		{"a targeted ephemeral container", func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}, TargetContainerName: injectionproof.SidecarContainer}}
		}, nil, "spec.ephemeralContainers[0].targetContainerName: weighstation-sidecar (ephemeral container debug) is not allowed"},
	} {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			pod := injectedPod(t)
			tc.edit(pod)
			k := key
			if tc.key != nil {
				k = tc.key
			}
			err := injectionproof.Verify(pod, k)
			if !errors.Is(err, injectionproof.ErrNotProven) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Verify: %v\nwant an ErrNotProven saying %q", err, tc.want)
			}
		})
	}
	t.Run("no key", func(t *testing.T) {
		if err := injectionproof.Verify(injectedPod(t), nil); err == nil || errors.Is(err, injectionproof.ErrNotProven) {
			t.Errorf("Verify without a key: %v, want an error of the operator's, not the pod's", err)
		}
	})
}

// The proof survives a round trip through JSON, as the apiserver stores
// it, and Sign refuses a pod it cannot describe.
func TestSign(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Annotations: map[string]string{v1alpha1.InjectedAnnotation: "v1"}}}
	if _, err := injectionproof.Sign(pod, audience, key); err == nil || !strings.Contains(err.Error(), "no weighstation-sidecar init container") {
		t.Errorf("Sign without a sidecar: %v", err)
	}
	pod = injectedPod(t)
	delete(pod.Annotations, v1alpha1.InjectedAnnotation)
	if _, err := injectionproof.Sign(pod, audience, key); err == nil || !strings.Contains(err.Error(), "no weighstation.io/injected annotation") {
		t.Errorf("Sign without the injected annotation: %v", err)
	}
	if _, err := injectionproof.Sign(injectedPod(t), audience, nil); err == nil {
		t.Error("Sign without a key succeeded")
	}
	a, b := injectedPod(t), injectedPod(t)
	if a.Annotations[injectionproof.Annotation] != b.Annotations[injectionproof.Annotation] {
		t.Error("two signatures of the same pod differ: a reinvocation would patch every pod")
	}
	if n := len(a.Annotations[injectionproof.Annotation]); n > 512 {
		t.Errorf("the proof is %d bytes, want it small", n)
	}
}
