package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/announce"
	"github.com/weighstation/weighstation/meshconfig"
)

// eventsAbout lists the Events of one reason recorded about an object, in
// the order they were created.
func eventsAbout(ns, kind, name, reason string) ([]eventsv1.Event, error) {
	var list eventsv1.EventList
	if err := k8sClient.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == kind && e.Regarding.Name == name && e.Reason == reason {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	return out, nil
}

// notes are the Events' notes, each with how many times it was recorded
// (an Event that repeats becomes a series).
func notes(events []eventsv1.Event) []string {
	var out []string
	for _, e := range events {
		n := e.Note
		if e.Series != nil {
			n += fmt.Sprintf(" [x%d]", e.Series.Count)
		}
		out = append(out, n)
	}
	return out
}

// eventsAre waits until the Events of one reason about an object are
// exactly those whose notes contain want, in order, each recorded once.
func eventsAre(t *testing.T, ns, kind, name, reason string, want ...string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s %s has %d %s Event(s)", kind, name, len(want), reason), func() error {
		events, err := eventsAbout(ns, kind, name, reason)
		if err != nil {
			return err
		}
		got := notes(events)
		if len(got) != len(want) {
			return fmt.Errorf("%d Events %q, want %d containing %q", len(got), got, len(want), want)
		}
		for i, e := range events {
			if e.Type != corev1.EventTypeWarning || e.Series != nil || !strings.Contains(e.Note, want[i]) {
				return fmt.Errorf("Events %q (%s), want one each containing %q", got, e.Type, want)
			}
		}
		return nil
	})
}

// TestABadResourceStopsOnlyItself: a Topic and a Subscription whose
// selectors the apiserver accepts but that are invalid are left out (they
// select nothing) and say so in their status and in an Event; every other
// resource of the namespace still configures its pods.
func TestABadResourceStopsOnlyItself(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	// Operator "In" needs values and "Near" is no operator: the CRD schema
	// constrains neither, as it cannot for Kubernetes' LabelSelector.
	badTopic := newTopic(ns, "payments", "payments.>")
	badTopic.Spec.Publishers = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn}}}
	badSub := newSubscription(ns, "broken", "orders.>", nil)
	badSub.Spec.Selector = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near", Values: []string{"billing"}}}}
	for _, obj := range []client.Object{
		newTopic(ns, "orders", "orders.>"),
		badTopic,
		newSubscription(ns, "billing", "orders.*", map[string]string{"app": "billing"}),
		badSub,
		newPod(ns, "billing-0", map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled, "app": "billing"}),
	} {
		if err := k8sClient.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s: %v (this test needs selectors that the schema accepts)", obj.GetName(), err)
		}
	}
	podConfig(t, ns, "billing-0", "the pod is configured with the good resources", func(cfg meshconfig.PodConfig) error {
		if subscriptionNames(cfg) != "billing" || len(cfg.Topics) != 2 {
			return fmt.Errorf("subscriptions %q, topics %+v", subscriptionNames(cfg), cfg.Topics)
		}
		for _, p := range cfg.Topics {
			// The bad Topic admits no publisher: its subjects are refused
			// rather than opened to every pod.
			if want := p.Name == "orders"; p.MayPublish != want {
				return fmt.Errorf("topic %s MayPublish %v, want %v", p.Name, p.MayPublish, want)
			}
		}
		return nil
	})
	eventually(t, "the bad Subscription says why in its status", func() error {
		var got v1alpha1.Subscription
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(badSub), &got); err != nil {
			return err
		}
		if err := conditionIs(got.Status.Conditions, v1alpha1.ConditionValid, metav1.ConditionFalse, 1, `spec.selector: "Near" is not a valid label selector operator`); err != nil {
			return err
		}
		return conditionIs(got.Status.Conditions, v1alpha1.ConditionReady, metav1.ConditionFalse, 1, "spec.selector is invalid")
	})
	eventually(t, "the bad Topic says why in its status", func() error {
		got, err := getTopic(ns, "payments")
		if err != nil {
			return err
		}
		for _, part := range []string{"spec.publishers: ", "values set can't be empty"} {
			if err := conditionIs(got.Status.Conditions, v1alpha1.ConditionValid, metav1.ConditionFalse, 1, part); err != nil {
				return err
			}
		}
		return conditionIs(got.Status.Conditions, v1alpha1.ConditionReady, metav1.ConditionFalse, 1, "spec.publishers is invalid")
	})
	eventsAre(t, ns, "Topic", "payments", announce.EventReasonInvalidSelector, "spec.publishers: values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty")
	eventsAre(t, ns, "Subscription", "broken", announce.EventReasonInvalidSelector, "spec.selector: \"Near\" is not a valid label selector operator")
	for _, name := range []string{"orders", "billing"} {
		for _, kind := range []string{"Topic", "Subscription"} {
			if events, err := eventsAbout(ns, kind, name, announce.EventReasonInvalidSelector); err != nil || len(events) > 0 {
				t.Fatalf("the good %s %s has Events %q (%v)", kind, name, notes(events), err)
			}
		}
	}

	// Once per generation, not once per reconcile: a change that keeps the
	// generation reconciles the Subscription again and says nothing; the
	// next generation (the sentinel, reconciled after it) is announced.
	var sub v1alpha1.Subscription
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(badSub), &sub); err != nil {
		t.Fatal(err)
	}
	// Patches without a resourceVersion: the operator writes status
	// meanwhile, and an Update would conflict with it.
	before := sub.DeepCopy()
	sub.Annotations = map[string]string{"touched": "yes"}
	if err := k8sClient.Patch(ctx, &sub, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	before = sub.DeepCopy()
	sub.Spec.QueueGroup = "workers"
	if err := k8sClient.Patch(ctx, &sub, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	eventsAre(t, ns, "Subscription", "broken", announce.EventReasonInvalidSelector, "(generation 1)", "(generation 2)")

	// Fixed, it selects its pods again.
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(badSub), &sub); err != nil {
		t.Fatal(err)
	}
	before = sub.DeepCopy()
	sub.Spec.Selector = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"billing"}}}}
	if err := k8sClient.Patch(ctx, &sub, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	podConfig(t, ns, "billing-0", "the fixed Subscription reaches the pod", func(cfg meshconfig.PodConfig) error {
		if subscriptionNames(cfg) != "billing,broken" {
			return fmt.Errorf("subscriptions %q", subscriptionNames(cfg))
		}
		return nil
	})
	eventually(t, "the fixed Subscription is Valid", func() error {
		var got v1alpha1.Subscription
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(badSub), &got); err != nil {
			return err
		}
		return conditionIs(got.Status.Conditions, v1alpha1.ConditionValid, metav1.ConditionTrue, 3, "")
	})
}

// TestConflictsAreAnnouncedOncePerChange: a Topic that shares its pattern
// gets a Warning Event naming the others, once per change of who they are,
// however often it is reconciled meanwhile.
func TestConflictsAreAnnouncedOncePerChange(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	for _, name := range []string{"orders-a", "orders-b"} {
		if err := k8sClient.Create(ctx, newTopic(ns, name, "orders.*")); err != nil {
			t.Fatal(err)
		}
	}
	if err := k8sClient.Create(ctx, newTopic(ns, "orders-eu", "orders.eu")); err != nil {
		t.Fatal(err)
	}
	eventsAre(t, ns, "Topic", "orders-a", announce.EventReasonConflicting, "Topic(s) orders-b have the same subject pattern")
	eventsAre(t, ns, "Topic", "orders-b", announce.EventReasonConflicting, "Topic(s) orders-a have the same subject pattern")
	// The sentinel: a third Topic changes the conflict. Every Topic of the
	// namespace was reconciled many times before it (each status write
	// requeues them all), and only the change is announced.
	if err := k8sClient.Create(ctx, newTopic(ns, "orders-c", "orders.*")); err != nil {
		t.Fatal(err)
	}
	eventsAre(t, ns, "Topic", "orders-a", announce.EventReasonConflicting, "Topic(s) orders-b have", "Topic(s) orders-b, orders-c have")
	eventsAre(t, ns, "Topic", "orders-b", announce.EventReasonConflicting, "Topic(s) orders-a have", "Topic(s) orders-a, orders-c have")
	eventsAre(t, ns, "Topic", "orders-c", announce.EventReasonConflicting, "Topic(s) orders-a, orders-b have")
	eventsAre(t, ns, "Topic", "orders-eu", announce.EventReasonConflicting)
}
