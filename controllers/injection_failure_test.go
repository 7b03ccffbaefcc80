package controllers_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/injectionstatus"
	"github.com/weighstation/weighstation/controllers/webhook"
	"github.com/weighstation/weighstation/internal/envtestsuite"
)

// TestBothFailureModesOfADownWebhook: with the injection webhook down
// (nothing listens at its address), failurePolicy Fail refuses an
// opted-in pod, and the apiserver's message names the webhook; switched to
// Ignore, the pod is created without the sidecar, and the operator
// reports it within 10 s of its creation: an Event on the pod and
// PodsWithoutSidecar on the Subscription and the Topic that select it.
func TestBothFailureModesOfADownWebhook(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	optIn(t, ns)
	// The webhook below selects this namespace alone.
	const testLabel = "weighstation.io/test-webhook-down"
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, testLabel, ns)
	if err := k8sClient.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		t.Fatal(err)
	}
	topic := newTopic(ns, "x-topic", "x.>")
	topic.Spec.Publishers = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}
	for _, obj := range []client.Object{newSubscription(ns, "x-sub", "x.>", map[string]string{"app": "x"}), topic} {
		if err := k8sClient.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}

	// An address where nothing listens.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + lis.Addr().String() + webhook.Path
	_ = lis.Close()
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "down-" + ns},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    webhook.Name,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](2),
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{testLabel: ns}},
		}},
	}
	if err := k8sClient.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), cfg) })

	// Fail. The apiserver loads webhook configurations asynchronously:
	// a pod created before it did is admitted; try again until refused.
	attempt := 0
	envtestsuite.Eventually(t, 30*time.Second, poll, "Fail refuses the pod", func() error {
		attempt++
		pod := injectionTestPod(ns, injectionPod{name: fmt.Sprintf("before-%d", attempt)})
		err := k8sClient.Create(ctx, pod)
		if err == nil {
			_ = k8sClient.Delete(ctx, pod)
			return fmt.Errorf("admitted: the apiserver does not call the webhook yet")
		}
		if want := fmt.Sprintf("failed calling webhook %q", webhook.Name); !strings.Contains(err.Error(), want) {
			t.Fatalf("refused with %q, want a message with %q", err, want)
		}
		return nil
	})

	// Ignore: the refused pod is admitted, without the sidecar.
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(cfg), cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	if err := k8sClient.Update(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	missed := injectionPod{name: "missed", reason: injectionstatus.ReasonSidecarNotInjected}
	var created time.Time
	envtestsuite.Eventually(t, 30*time.Second, poll, "Ignore admits the pod", func() error {
		created = time.Now()
		return k8sClient.Create(ctx, injectionTestPod(ns, missed))
	})
	envtestsuite.Eventually(t, reportedWithin, poll, "the pod that missed its sidecar is reported", func() error {
		events, err := eventsAbout(ns, "Pod", missed.name, missed.reason)
		if err == nil && len(events) != 1 {
			err = fmt.Errorf("%d %s Events", len(events), missed.reason)
		}
		if err != nil {
			return err
		}
		return podsWithoutSidecarIs(ctx, ns, metav1.ConditionTrue, injectionstatus.ReasonSidecarNotInjected, []injectionPod{missed}, nil)
	})
	if took := time.Since(created); took > reportedWithin {
		t.Errorf("reported %s after the pod's creation, want within %s", took, reportedWithin)
	}
	var pod corev1.Pod
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: missed.name}, &pod); err != nil {
		t.Fatal(err)
	}
	if _, ok := pod.Annotations[v1alpha1.InjectedAnnotation]; ok || len(pod.Spec.InitContainers) > 0 {
		t.Errorf("the pod admitted by Ignore has %v and init containers %v, want neither", pod.Annotations, pod.Spec.InitContainers)
	}
}
