package chart_test

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/internal/envtestsuite"
)

// Names the sidecar-integrity policy guards (controllers/webhook and
// controllers/injectionproof).
const (
	injectedAnnotation = "weighstation.io/injected"
	proofAnnotation    = "weighstation.io/injection-proof"
	sidecarName        = "weighstation-sidecar"
	tokenVolumeName    = "weighstation-xds-token"
	integrityPolicy    = "weighstation-sidecar-integrity"
)

// The chart renders the sidecar-integrity ValidatingAdmissionPolicy and
// its Deny binding with the webhook, and neither without it.
func TestSidecarIntegrityPolicy(t *testing.T) {
	objs := render(t)
	policy := typed[admissionregistrationv1.ValidatingAdmissionPolicy](t, one(t, objs, "ValidatingAdmissionPolicy", integrityPolicy))
	binding := typed[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, one(t, objs, "ValidatingAdmissionPolicyBinding", integrityPolicy))
	if binding.Spec.PolicyName != policy.Name || len(binding.Spec.ValidationActions) != 1 || binding.Spec.ValidationActions[0] != admissionregistrationv1.Deny {
		t.Errorf("binding %+v, want policy %s with validationActions [Deny]", binding.Spec, policy.Name)
	}
	if binding.Spec.ParamRef != nil || binding.Spec.MatchResources != nil {
		t.Errorf("binding %+v narrows the policy: want it everywhere", binding.Spec)
	}
	if fp := policy.Spec.FailurePolicy; fp == nil || *fp != admissionregistrationv1.Fail {
		t.Errorf("failurePolicy %v, want Fail", fp)
	}
	var resources []string
	for _, r := range policy.Spec.MatchConstraints.ResourceRules {
		resources = append(resources, r.Resources...)
	}
	if strings.Join(resources, ",") != "pods,pods/ephemeralcontainers" {
		t.Errorf("the policy matches %v, want pods and pods/ephemeralcontainers", resources)
	}
}

// checkIntegrityPolicy: in the real apiserver, with the chart installed
// and no operator running, the sidecar-integrity policy refuses what would
// forge or undo an injection (issue 30's label-after-create path and the
// ephemeral container that targets the sidecar), naming the field, and
// lets label edits through: the point of a policy over a webhook.
func checkIntegrityPolicy(t *testing.T, c client.Client, ns, appNS string) {
	t.Helper()
	ctx := context.Background()
	create := func(p *corev1.Pod) error { return c.Create(ctx, p) }
	plain := func(namespace string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: "app-", Labels: map[string]string{"app": "shop"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}
	}
	refused := func(t *testing.T, err error, want string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), integrityPolicy) || !strings.Contains(err.Error(), want) {
			t.Errorf("%v\nwant a refusal by %s saying %q", err, integrityPolicy, want)
		}
	}

	// The apiserver loads a new policy in the background.
	forged := func(annotation string) *corev1.Pod {
		p := plain(appNS)
		p.Annotations = map[string]string{annotation: "v0.1.0"}
		return p
	}
	envtestsuite.Eventually(t, waitTimeout, 50*time.Millisecond, "the policy in force", func() error {
		err := create(forged(injectedAnnotation))
		if err == nil || !strings.Contains(err.Error(), integrityPolicy) {
			return fmtErr("a pod that did not opt in, created with %s: %v; want a refusal by %s", injectedAnnotation, err, integrityPolicy)
		}
		return nil
	})

	t.Run("attack: a pod created with the injector's annotations without opting in", func(t *testing.T) {
		for _, a := range []string{injectedAnnotation, proofAnnotation} {
			refused(t, create(forged(a)), "metadata.annotations: weighstation.io/injected and weighstation.io/injection-proof are written by the sidecar injector: a pod created with them must be opted in")
		}
	})

	t.Run("attack: labelled after its creation, then given the annotations", func(t *testing.T) {
		pod := plain(appNS)
		if err := create(pod); err != nil {
			t.Fatal(err)
		}
		// The label edit goes through with no operator running.
		pod.Labels["weighstation.io/inject"] = "enabled"
		if err := c.Update(ctx, pod); err != nil {
			t.Fatalf("labelling a pod while the operator is down: %v, want it allowed", err)
		}
		for _, a := range []string{injectedAnnotation, proofAnnotation} {
			p := pod.DeepCopy()
			p.Annotations = map[string]string{a: "forged"}
			refused(t, c.Update(ctx, p), "metadata.annotations["+a+"]: adding it is not allowed: the sidecar injector writes it")
		}
	})

	// An injected pod as the webhook leaves it. In the release's
	// namespace no webhook is called, so it can be created by hand here.
	injected := plain(ns)
	injected.Labels["weighstation.io/inject"] = "enabled"
	injected.Annotations = map[string]string{injectedAnnotation: "v0.1.0", proofAnnotation: "{}"}
	injected.Spec.InitContainers = []corev1.Container{{Name: sidecarName, Image: "sidecar", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		VolumeMounts: []corev1.VolumeMount{{Name: tokenVolumeName, MountPath: "/xds"}}}}
	injected.Spec.Volumes = []corev1.Volume{{Name: tokenVolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	if err := create(injected); err != nil {
		t.Fatalf("creating an opted-in pod with the annotations: %v, want it allowed", err)
	}
	latest := func(t *testing.T) *corev1.Pod {
		t.Helper()
		p := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(injected), p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Run("an injected pod's annotations cannot change", func(t *testing.T) {
		for _, a := range []string{injectedAnnotation, proofAnnotation} {
			p := latest(t)
			p.Annotations[a] = "forged"
			refused(t, c.Update(ctx, p), "metadata.annotations["+a+"]: changing it is not allowed")
		}
	})
	t.Run("nor its sidecar's image", func(t *testing.T) {
		p := latest(t)
		p.Spec.InitContainers[0].Image = "evil"
		refused(t, c.Update(ctx, p), "spec.initContainers[weighstation-sidecar].image: changing it is not allowed")
	})
	t.Run("its labels and other annotations can", func(t *testing.T) {
		p := latest(t)
		p.Annotations["note"] = "x"
		delete(p.Labels, "weighstation.io/inject")
		p.Spec.Containers[0].Image = "app:v2"
		if err := c.Update(ctx, p); err != nil {
			t.Errorf("editing a label, another annotation and the application's image: %v, want it allowed", err)
		}
	})
	debug := func(t *testing.T, ec corev1.EphemeralContainer) error {
		t.Helper()
		p := latest(t)
		p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, ec)
		return c.SubResource("ephemeralcontainers").Update(ctx, p)
	}
	t.Run("attack: an ephemeral container that targets the sidecar", func(t *testing.T) {
		refused(t, debug(t, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "peek", Image: "busybox"}, TargetContainerName: sidecarName}),
			"spec.ephemeralContainers[].targetContainerName: weighstation-sidecar (ephemeral container peek) is not allowed")
	})
	t.Run("an ephemeral container that mounts the sidecar's token", func(t *testing.T) {
		refused(t, debug(t, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "steal", Image: "busybox",
			VolumeMounts: []corev1.VolumeMount{{Name: tokenVolumeName, MountPath: "/stolen"}}}}),
			"spec.ephemeralContainers[].volumeMounts: ephemeral container steal mounts volume weighstation-xds-token")
	})
	t.Run("an ephemeral container beside the application", func(t *testing.T) {
		if err := debug(t, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}, TargetContainerName: "app"}); err != nil {
			t.Errorf("kubectl debug of the application: %v, want it allowed", err)
		}
	})
}
