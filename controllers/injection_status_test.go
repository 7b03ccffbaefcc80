package controllers_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/injectionstatus"
	"github.com/weighstation/weighstation/controllers/webhook"
	"github.com/weighstation/weighstation/internal/envtestsuite"
)

// currentSidecar is the version an injected test pod runs: supported.
const currentSidecar = "v1.0.0"

// reportedWithin is how soon after a pod's creation it must be reported
// (the bound).
const reportedWithin = 10 * time.Second

// injectionPod is one pod of an injection test: its labels besides
// app=x, and its injected version ("" for none).
type injectionPod struct {
	name     string
	labelled bool // the inject label on the pod itself
	optedOut bool // the inject label, "disabled", on the pod itself
	injected string
	// reason it is reported with ("" for not reported).
	reason string
}

// TestPodsWithoutSidecarAreReported creates, per case, a namespace, a
// Subscription selecting app=x and a Topic whose publishers select app=x,
// then the pods that must not be reported, then those that must: the
// reported ones are the sentinels, so that when the condition names them
// every pod has been seen and the others must be absent from it.
func TestPodsWithoutSidecarAreReported(t *testing.T) {
	for _, c := range []struct {
		name             string
		namespaceOptedIn bool
		pods             []injectionPod
		// reason of the condition while reported.
		reason string
	}{
		{"opted-in namespace", true, []injectionPod{
			{name: "good", labelled: true, injected: currentSidecar},
			{name: "dev-build", labelled: true, injected: "v0.0.1-3-gabcdef"},
			{name: "unknown", labelled: true, injected: "unknown"},
			// The webhook's namespace entry never sends it.
			{name: "opted-out", optedOut: true},
			{name: "missed", reason: injectionstatus.ReasonSidecarNotInjected},
			{name: "old", labelled: true, injected: "v0.0.1", reason: injectionstatus.ReasonSidecarOutdated},
		}, injectionstatus.ReasonSidecarNotInjected},
		{"outdated only", true, []injectionPod{
			{name: "good", labelled: true, injected: currentSidecar},
			{name: "old", labelled: true, injected: "0.0.9", reason: injectionstatus.ReasonSidecarOutdated},
		}, injectionstatus.ReasonSidecarOutdated},
		{"namespace not opted in", false, []injectionPod{
			{name: "plain"},
			{name: "labelled-good", labelled: true, injected: currentSidecar},
			{name: "labelled-missed", labelled: true, reason: injectionstatus.ReasonSidecarNotInjected},
		}, injectionstatus.ReasonSidecarNotInjected},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			ns := newNamespace(t)
			if c.namespaceOptedIn {
				optIn(t, ns)
			}
			topic := newTopic(ns, "x-topic", "x.>")
			topic.Spec.Publishers = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}
			for _, obj := range []client.Object{newSubscription(ns, "x-sub", "x.>", map[string]string{"app": "x"}), topic} {
				if err := k8sClient.Create(ctx, obj); err != nil {
					t.Fatal(err)
				}
			}
			var reported, quiet []injectionPod
			for _, p := range c.pods {
				if p.reason == "" {
					quiet = append(quiet, p)
				} else {
					reported = append(reported, p)
				}
			}
			for _, p := range append(quiet, reported...) {
				if err := k8sClient.Create(ctx, injectionTestPod(ns, p)); err != nil {
					t.Fatal(err)
				}
			}
			// Created last, the reported pods bound the time.
			wantTrue := func() error {
				for _, p := range reported {
					events, err := eventsAbout(ns, "Pod", p.name, p.reason)
					if err != nil {
						return err
					}
					// Once: a repeated Event would be a series.
					if len(events) != 1 || events[0].Series != nil {
						return fmt.Errorf("pod %s has %s Events %q, want one", p.name, p.reason, notes(events))
					}
				}
				return podsWithoutSidecarIs(ctx, ns, metav1.ConditionTrue, c.reason, reported, quiet)
			}
			envtestsuite.Eventually(t, reportedWithin, poll, "the pods without a supported sidecar are reported", wantTrue)
			for _, p := range quiet {
				for _, reason := range []string{injectionstatus.ReasonSidecarNotInjected, injectionstatus.ReasonSidecarOutdated} {
					if events, err := eventsAbout(ns, "Pod", p.name, reason); err != nil || len(events) > 0 {
						t.Errorf("pod %s: %s Events %q (%v), want none", p.name, reason, notes(events), err)
					}
				}
			}
			// The remedy: the reported pods are deleted.
			for _, p := range reported {
				if err := k8sClient.Delete(ctx, injectionTestPod(ns, p)); err != nil {
					t.Fatal(err)
				}
			}
			eventually(t, "the condition clears", func() error {
				return podsWithoutSidecarIs(ctx, ns, metav1.ConditionFalse, injectionstatus.ReasonAllInjected, nil, nil)
			})
		})
	}
}

// neverInjectedNamespace is, for the suite's operator, a namespace the
// webhook never injects (as the operator's own and kube-system are).
const neverInjectedNamespace = "never-injected"

// TestANamespaceNeverInjectedIsNeverReported: a pod that missed injection
// in an excluded namespace, even one labelled for injection, gets no Event
// and no condition. A missed pod in another namespace, created after it,
// is the sentinel: once it is reported, the excluded one was judged.
func TestANamespaceNeverInjectedIsNeverReported(t *testing.T) {
	ctx := context.Background()
	if err := k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: neverInjectedNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	optIn(t, neverInjectedNamespace)
	sub := newSubscription(neverInjectedNamespace, "x-sub-"+strings.ToLower(rand.Text()[:6]), "x.>", map[string]string{"app": "x"})
	if err := k8sClient.Create(ctx, sub); err != nil {
		t.Fatal(err)
	}
	excluded := injectionPod{name: "missed-" + strings.ToLower(rand.Text()[:6]), labelled: true}
	if err := k8sClient.Create(ctx, injectionTestPod(neverInjectedNamespace, excluded)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(ctx, injectionTestPod(neverInjectedNamespace, excluded)) })

	sentinelNs := newNamespace(t)
	optIn(t, sentinelNs)
	sentinel := injectionPod{name: "sentinel", reason: injectionstatus.ReasonSidecarNotInjected}
	if err := k8sClient.Create(ctx, injectionTestPod(sentinelNs, sentinel)); err != nil {
		t.Fatal(err)
	}
	envtestsuite.Eventually(t, reportedWithin, poll, "the sentinel is reported", func() error {
		events, err := eventsAbout(sentinelNs, "Pod", sentinel.name, sentinel.reason)
		if err == nil && len(events) != 1 {
			err = fmt.Errorf("%d Events", len(events))
		}
		return err
	})
	for _, reason := range []string{injectionstatus.ReasonSidecarNotInjected, injectionstatus.ReasonSidecarOutdated} {
		if events, err := eventsAbout(neverInjectedNamespace, "Pod", excluded.name, reason); err != nil || len(events) > 0 {
			t.Errorf("the excluded namespace's pod: %s Events %q (%v), want none", reason, notes(events), err)
		}
	}
	var got v1alpha1.Subscription
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(sub), &got); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionPodsWithoutSidecar); c != nil {
		t.Errorf("the excluded namespace's Subscription has %s=%s: %s", c.Type, c.Status, c.Message)
	}
}

// optIn labels a namespace for injection.
func optIn(t *testing.T, ns string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, v1alpha1.InjectLabel, v1alpha1.InjectEnabled)
	if err := k8sClient.Patch(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

func injectionTestPod(ns string, p injectionPod) *corev1.Pod {
	labels := map[string]string{"app": "x"}
	if p.labelled {
		labels[v1alpha1.InjectLabel] = v1alpha1.InjectEnabled
	}
	if p.optedOut {
		labels[v1alpha1.InjectLabel] = webhook.InjectDisabled
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.name, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app:1"}}},
	}
	if p.injected != "" {
		pod.Annotations = map[string]string{v1alpha1.InjectedAnnotation: p.injected}
	}
	return pod
}

// podsWithoutSidecarIs checks PodsWithoutSidecar on x-sub and x-topic: its
// status and reason, that its message names every pod of named and none
// of absent.
func podsWithoutSidecarIs(ctx context.Context, ns string, status metav1.ConditionStatus, reason string, named, absent []injectionPod) error {
	var sub v1alpha1.Subscription
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "x-sub"}, &sub); err != nil {
		return err
	}
	topic, err := getTopic(ns, "x-topic")
	if err != nil {
		return err
	}
	for kind, conds := range map[string][]metav1.Condition{"Subscription": sub.Status.Conditions, "Topic": topic.Status.Conditions} {
		if err := conditionIs(conds, v1alpha1.ConditionPodsWithoutSidecar, status, 1, ""); err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
		cond := meta.FindStatusCondition(conds, v1alpha1.ConditionPodsWithoutSidecar)
		if cond.Reason != reason {
			return fmt.Errorf("%s: reason %s, want %s", kind, cond.Reason, reason)
		}
		if !strings.HasPrefix(cond.Message, fmt.Sprintf("%d selected pod", len(named))) && len(named) > 0 {
			return fmt.Errorf("%s: message %q does not count %d pods", kind, cond.Message, len(named))
		}
		for _, p := range named {
			if !strings.Contains(cond.Message, p.name+" (") {
				return fmt.Errorf("%s: message %q does not name %s", kind, cond.Message, p.name)
			}
		}
		for _, p := range absent {
			if strings.Contains(cond.Message, p.name+" (") {
				return fmt.Errorf("%s: message %q names %s", kind, cond.Message, p.name)
			}
		}
	}
	return nil
}

// TestPodsWithoutSidecarFollowsOptInAndSelectors checks the other changes
// that report or clear a pod: its namespace opting in and out, and a
// Subscription created after the pod.
func TestPodsWithoutSidecarFollowsOptInAndSelectors(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	late := injectionPod{name: "late"}
	if err := k8sClient.Create(ctx, injectionTestPod(ns, late)); err != nil {
		t.Fatal(err)
	}
	topic := newTopic(ns, "x-topic", "x.>")
	topic.Spec.Publishers = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}
	if err := k8sClient.Create(ctx, topic); err != nil {
		t.Fatal(err)
	}
	// The pod predates the opt-in: it runs without the sidecar as much as
	// a pod the webhook missed.
	optIn(t, ns)
	// Created after the opt-in, the Subscription is reported on by the
	// reconcile its own creation queues, or by the opt-in's.
	if err := k8sClient.Create(ctx, newSubscription(ns, "x-sub", "x.>", map[string]string{"app": "x"})); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pod is reported once the namespace opted in", func() error {
		return podsWithoutSidecarIs(ctx, ns, metav1.ConditionTrue, injectionstatus.ReasonSidecarNotInjected, []injectionPod{late}, nil)
	})
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, v1alpha1.InjectLabel)
	if err := k8sClient.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the condition clears once the namespace opted out", func() error {
		return podsWithoutSidecarIs(ctx, ns, metav1.ConditionFalse, injectionstatus.ReasonAllInjected, nil, nil)
	})
}
