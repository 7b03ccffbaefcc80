package controllers_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/internal/envtestsuite"
	"github.com/weighstation/weighstation/meshconfig"
)

// eventually polls check until it returns nil, failing the test with its
// last error after eventuallyTimeout.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	envtestsuite.Eventually(t, eventuallyTimeout, poll, what, check)
}

const eventuallyTimeout = 20 * time.Second

// conditionIs checks one condition of an object's status.
func conditionIs(conditions []metav1.Condition, condType string, status metav1.ConditionStatus, generation int64, messagePart string) error {
	c := meta.FindStatusCondition(conditions, condType)
	switch {
	case c == nil:
		return fmt.Errorf("no %s condition", condType)
	case c.Status != status:
		return fmt.Errorf("%s is %s (%s: %s), want %s", condType, c.Status, c.Reason, c.Message, status)
	case c.ObservedGeneration != generation:
		return fmt.Errorf("%s has observedGeneration %d, want %d", condType, c.ObservedGeneration, generation)
	case !strings.Contains(c.Message, messagePart):
		return fmt.Errorf("%s message %q does not mention %q", condType, c.Message, messagePart)
	}
	return nil
}

func getTopic(ns, name string) (*v1alpha1.Topic, error) {
	var t v1alpha1.Topic
	err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &t)
	return &t, err
}

func newTopic(ns, name, subject string) *v1alpha1.Topic {
	return &v1alpha1.Topic{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.TopicSpec{Subject: v1alpha1.SubjectPattern(subject)}}
}

func TestTopicReadyFollowsGeneration(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	topic := newTopic(ns, "orders", "orders.>")
	if err := k8sClient.Create(ctx, topic); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Ready at generation 1", func() error {
		got, err := getTopic(ns, "orders")
		if err != nil {
			return err
		}
		if got.Status.ObservedGeneration != 1 {
			return fmt.Errorf("observedGeneration %d", got.Status.ObservedGeneration)
		}
		return conditionIs(got.Status.Conditions, v1alpha1.ConditionValid, metav1.ConditionTrue, 1, `"orders.>"`)
	})
	got, _ := getTopic(ns, "orders")
	// A merge patch, not an update: the status writers move the
	// resourceVersion under the test's feet.
	before := got.DeepCopy()
	got.Spec.Limits.MaxMessageBytes = 4096
	if err := k8sClient.Patch(ctx, got, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Ready at generation 2", func() error {
		got, err := getTopic(ns, "orders")
		if err != nil {
			return err
		}
		if got.Generation != 2 || got.Status.ObservedGeneration != 2 {
			return fmt.Errorf("generation %d, observedGeneration %d", got.Generation, got.Status.ObservedGeneration)
		}
		return conditionIs(got.Status.Conditions, v1alpha1.ConditionValid, metav1.ConditionTrue, 2, "")
	})
}

func TestConflictingTopicsAreReported(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	for _, name := range []string{"orders-a", "orders-b"} {
		if err := k8sClient.Create(ctx, newTopic(ns, name, "orders.*")); err != nil {
			t.Fatal(err)
		}
	}
	// A more specific Topic does not conflict with them.
	if err := k8sClient.Create(ctx, newTopic(ns, "orders-eu", "orders.eu")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "both same-pattern Topics Conflicting, naming each other", func() error {
		a, err := getTopic(ns, "orders-a")
		if err != nil {
			return err
		}
		b, err := getTopic(ns, "orders-b")
		if err != nil {
			return err
		}
		eu, err := getTopic(ns, "orders-eu")
		if err != nil {
			return err
		}
		for _, check := range []error{
			conditionIs(a.Status.Conditions, v1alpha1.ConditionConflicting, metav1.ConditionTrue, 1, "orders-b"),
			conditionIs(b.Status.Conditions, v1alpha1.ConditionConflicting, metav1.ConditionTrue, 1, "orders-a"),
			conditionIs(a.Status.Conditions, v1alpha1.ConditionValid, metav1.ConditionTrue, 1, ""),
			conditionIs(b.Status.Conditions, v1alpha1.ConditionValid, metav1.ConditionFalse, 1, "orders-a"),
			conditionIs(eu.Status.Conditions, v1alpha1.ConditionConflicting, metav1.ConditionFalse, 1, ""),
			conditionIs(eu.Status.Conditions, v1alpha1.ConditionValid, metav1.ConditionTrue, 1, ""),
		} {
			if check != nil {
				return check
			}
		}
		return nil
	})
	// Deleting one ends the conflict for the other.
	if err := k8sClient.Delete(ctx, newTopic(ns, "orders-a", "")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the conflict ends", func() error {
		b, err := getTopic(ns, "orders-b")
		if err != nil {
			return err
		}
		if err := conditionIs(b.Status.Conditions, v1alpha1.ConditionConflicting, metav1.ConditionFalse, 1, ""); err != nil {
			return err
		}
		return conditionIs(b.Status.Conditions, v1alpha1.ConditionValid, metav1.ConditionTrue, 1, "")
	})
}

func newPod(ns, name string, labels map[string]string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		// Scheduled: there is no scheduler in envtest, and propagation
		// counts only scheduled pods.
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app:1"}}},
	}
	if labels[v1alpha1.InjectLabel] == v1alpha1.InjectEnabled {
		// As the webhook marks a pod it injected: without it the pod is
		// reported as missing its sidecar, and that status write would
		// disturb the tests that count writes.
		pod.Annotations = map[string]string{v1alpha1.InjectedAnnotation: currentSidecar}
	}
	return pod
}

func newSubscription(ns, name, subject string, selector map[string]string) *v1alpha1.Subscription {
	return &v1alpha1.Subscription{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.SubscriptionSpec{
			Subject:  v1alpha1.SubjectPattern(subject),
			Selector: metav1.LabelSelector{MatchLabels: selector},
		},
	}
}

// podConfig waits until the store holds a configuration for the pod that
// satisfies check, and returns it.
func podConfig(t *testing.T, ns, pod, what string, check func(meshconfig.PodConfig) error) meshconfig.PodConfig {
	t.Helper()
	var cfg meshconfig.PodConfig
	eventually(t, what, func() error {
		var ok bool
		cfg, ok = store.Get(types.NamespacedName{Namespace: ns, Name: pod})
		if !ok {
			return fmt.Errorf("no configuration for %s/%s", ns, pod)
		}
		return check(cfg)
	})
	return cfg
}

func subscriptionNames(cfg meshconfig.PodConfig) string {
	var names []string
	for _, s := range cfg.Subscriptions {
		names = append(names, s.Name)
	}
	return strings.Join(names, ",")
}

func TestPodConfigFollowsLabelsAndSubscriptions(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	injected := map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled, "app": "billing"}
	if err := k8sClient.Create(ctx, newTopic(ns, "orders", "orders.>")); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Create(ctx, newSubscription(ns, "billing", "orders.*.created", map[string]string{"app": "billing"})); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Create(ctx, newPod(ns, "billing-0", injected)); err != nil {
		t.Fatal(err)
	}
	// A pod without the inject label gets no configuration at all.
	if err := k8sClient.Create(ctx, newPod(ns, "plain", map[string]string{"app": "billing"})); err != nil {
		t.Fatal(err)
	}
	first := podConfig(t, ns, "billing-0", "the pod is configured", func(cfg meshconfig.PodConfig) error {
		if subscriptionNames(cfg) != "billing" || len(cfg.Topics) != 1 || cfg.Topics[0].Subject != "orders.>" {
			return fmt.Errorf("subscriptions %q, topics %+v", subscriptionNames(cfg), cfg.Topics)
		}
		return nil
	})
	if _, ok := store.Get(types.NamespacedName{Namespace: ns, Name: "plain"}); ok {
		t.Fatal("a pod without the inject label was configured")
	}

	// Nothing that matters changes: an unrelated annotation requeues the
	// pod, and the configuration stays.
	var pod corev1.Pod
	updatePod := func(change func(*corev1.Pod)) {
		t.Helper()
		if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "billing-0"}, &pod); err != nil {
			t.Fatal(err)
		}
		change(&pod)
		if err := k8sClient.Update(ctx, &pod); err != nil {
			t.Fatal(err)
		}
	}
	updatePod(func(p *corev1.Pod) { p.Annotations = map[string]string{"unrelated": "change"} })
	// The sentinel goes through the same pod, whose updates reach the
	// reconciler in order: out of the Subscription's selector and back.
	// The configuration computed after that has seen the annotation, and
	// must be exactly the first one.
	updatePod(func(p *corev1.Pod) { p.Labels["app"] = "elsewhere" })
	podConfig(t, ns, "billing-0", "the sentinel: the pod leaves the subscription", func(cfg meshconfig.PodConfig) error {
		if len(cfg.Subscriptions) != 0 {
			return fmt.Errorf("subscriptions %q", subscriptionNames(cfg))
		}
		return nil
	})
	updatePod(func(p *corev1.Pod) { p.Labels["app"] = "billing" })
	back := podConfig(t, ns, "billing-0", "the sentinel: the pod is back in the subscription", func(cfg meshconfig.PodConfig) error {
		if subscriptionNames(cfg) != "billing" {
			return fmt.Errorf("subscriptions %q", subscriptionNames(cfg))
		}
		return nil
	})
	if !reflect.DeepEqual(back, first) {
		t.Fatalf("an unrelated annotation changed the configuration:\n%+v\nwas\n%+v", back, first)
	}

	// A Subscription edit (the kill switch) changes the configuration.
	var sub v1alpha1.Subscription
	if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "billing"}, &sub); err != nil {
		t.Fatal(err)
	}
	subBefore := sub.DeepCopy()
	sub.Spec.KillSwitch = &v1alpha1.KillSwitch{Engaged: true, Reason: "maintenance"}
	if err := k8sClient.Patch(ctx, &sub, client.MergeFrom(subBefore)); err != nil {
		t.Fatal(err)
	}
	killed := podConfig(t, ns, "billing-0", "the kill switch reaches the pod", func(cfg meshconfig.PodConfig) error {
		if len(cfg.Subscriptions) != 1 || !cfg.Subscriptions[0].KillSwitch.Engaged {
			return fmt.Errorf("subscriptions %+v", cfg.Subscriptions)
		}
		return nil
	})
	if killed.Version == first.Version {
		t.Fatal("the configuration changed but its version did not")
	}

	// A label change moves the pod out of the Subscription's selector...
	updatePod(func(p *corev1.Pod) { p.Labels["app"] = "shipping" })
	podConfig(t, ns, "billing-0", "the pod leaves the subscription", func(cfg meshconfig.PodConfig) error {
		if len(cfg.Subscriptions) != 0 {
			return fmt.Errorf("subscriptions %q", subscriptionNames(cfg))
		}
		return nil
	})
	// ...and removing the inject label removes its configuration.
	updatePod(func(p *corev1.Pod) { delete(p.Labels, v1alpha1.InjectLabel) })
	eventually(t, "the configuration is dropped", func() error {
		if _, ok := store.Get(types.NamespacedName{Namespace: ns, Name: "billing-0"}); ok {
			return fmt.Errorf("still configured")
		}
		return nil
	})
}

func TestTopicInAnotherNamespaceChangesNothing(t *testing.T) {
	ctx := context.Background()
	mine, other := newNamespace(t), newNamespace(t)
	injected := map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled}
	if err := k8sClient.Create(ctx, newPod(mine, "app-0", injected)); err != nil {
		t.Fatal(err)
	}
	before := podConfig(t, mine, "app-0", "the pod is configured with defaults only", func(cfg meshconfig.PodConfig) error {
		if len(cfg.Topics) != 0 || cfg.Default.MaxMessageBytes != meshconfig.DefaultPolicy.MaxMessageBytes {
			return fmt.Errorf("topics %+v, default %+v", cfg.Topics, cfg.Default)
		}
		return nil
	})
	// A tight Topic and a Subscription selecting everything, in the other
	// namespace.
	tight := newTopic(other, "everything", ">")
	tight.Spec.Limits.MaxMessageBytes = 16
	if err := k8sClient.Create(ctx, tight); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Create(ctx, newSubscription(other, "all", ">", nil)); err != nil {
		t.Fatal(err)
	}
	// Wait until the other namespace's Topic is reconciled: the operator's
	// cache holds it.
	eventually(t, "the other namespace's topic is reconciled", func() error {
		got, err := getTopic(other, "everything")
		if err != nil {
			return err
		}
		return conditionIs(got.Status.Conditions, v1alpha1.ConditionValid, metav1.ConditionTrue, 1, "")
	})
	// The sentinel: a change in the pod's own namespace, which must reach
	// it. The configuration that holds it was computed with everything the
	// operator knows of the other namespace, and must hold the sentinel
	// and nothing else.
	if err := k8sClient.Create(ctx, newTopic(mine, "sentinel", "sentinel.>")); err != nil {
		t.Fatal(err)
	}
	cfg := podConfig(t, mine, "app-0", "the sentinel reaches the pod", func(cfg meshconfig.PodConfig) error {
		if !slices.ContainsFunc(cfg.Topics, func(p meshconfig.TopicPolicy) bool { return p.Name == "sentinel" }) {
			return fmt.Errorf("topics %+v", cfg.Topics)
		}
		return nil
	})
	if len(cfg.Topics) != 1 || len(cfg.Subscriptions) != 0 || !reflect.DeepEqual(cfg.Default, before.Default) {
		t.Fatalf("resources in namespace %s changed a pod in %s: topics %+v, subscriptions %+v, default %+v", other, mine, cfg.Topics, cfg.Subscriptions, cfg.Default)
	}
}

func TestSubscriptionStatus(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	for i := range 3 {
		if err := k8sClient.Create(ctx, newPod(ns, fmt.Sprintf("billing-%d", i), map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled, "app": "billing"})); err != nil {
			t.Fatal(err)
		}
	}
	sub := newSubscription(ns, "billing", "orders.*", map[string]string{"app": "billing"})
	sub.Spec.KillSwitch = &v1alpha1.KillSwitch{Engaged: true, Reason: "load test"}
	if err := k8sClient.Create(ctx, sub); err != nil {
		t.Fatal(err)
	}
	// A pod that is not scheduled is not counted: no sidecar runs for it.
	// It was injected (the annotation), as newPod's pods are: one without
	// it would be reported PodsWithoutSidecar, a third writer's condition.
	if err := k8sClient.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: "billing-pending",
			Labels:      map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled, "app": "billing"},
			Annotations: map[string]string{v1alpha1.InjectedAnnotation: currentSidecar},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app:1"}}},
	}); err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.Subscription
	eventually(t, "status counts the pods and reports the kill switch", func() error {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(sub), &got); err != nil {
			return err
		}
		if got.Status.Config == nil || got.Status.Config.TotalPods != 3 || got.Status.Config.Version == "" || got.Status.ObservedGeneration != 1 {
			return fmt.Errorf("config %+v, observedGeneration %d", got.Status.Config, got.Status.ObservedGeneration)
		}
		if err := conditionIs(got.Status.Conditions, v1alpha1.ConditionKillSwitchEngaged, metav1.ConditionTrue, 1, "load test"); err != nil {
			return err
		}
		if err := conditionIs(got.Status.Conditions, v1alpha1.ConditionValid, metav1.ConditionTrue, 1, ""); err != nil {
			return err
		}
		// No sidecar runs in this suite, so nothing is applied.
		return conditionIs(got.Status.Conditions, v1alpha1.ConditionReady, metav1.ConditionFalse, 1, "0 of 3 pod(s) applied")
	})
	// Each writer owns its part of the status (api/v1alpha1's table).
	owners := map[string]bool{}
	for _, mf := range got.ManagedFields {
		if mf.Subresource == "status" && mf.Operation == metav1.ManagedFieldsOperationApply {
			owners[mf.Manager] = true
		}
	}
	if !owners[v1alpha1.FieldManagerReconciler] || !owners[v1alpha1.FieldManagerPropagation] || len(owners) != 2 {
		t.Fatalf("status field managers %v, want %s and %s", owners, v1alpha1.FieldManagerReconciler, v1alpha1.FieldManagerPropagation)
	}
}

// TestTopicStatusCountsAndIsWrittenOnlyWhenChanged checks what the Topic
// governs, that the status is written by server-side apply under the
// operator's field manager, and that a requeue that changes nothing writes
// nothing (the resourceVersion stays).
func TestTopicStatusCountsAndIsWrittenOnlyWhenChanged(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	injected := map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled}
	orders := newTopic(ns, "orders", "orders.>")
	orders.Spec.Publishers = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "checkout"}}
	for _, obj := range []client.Object{
		orders,
		newTopic(ns, "orders-eu", "orders.eu"),
		newSubscription(ns, "created", "orders.*.created", nil), // governed by orders
		newSubscription(ns, "eu", "orders.eu", nil),             // governed by orders-eu, the more specific
		newPod(ns, "checkout-0", map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled, "app": "checkout"}),
		newPod(ns, "billing-0", injected),
	} {
		if err := k8sClient.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	var settled *v1alpha1.Topic
	eventually(t, "orders governs one subscription and one publishing pod", func() error {
		got, err := getTopic(ns, "orders")
		if err != nil {
			return err
		}
		if got.Status.Subscriptions != 1 || got.Status.Config == nil || got.Status.Config.TotalPods != 1 {
			return fmt.Errorf("subscriptions %d, config %+v", got.Status.Subscriptions, got.Status.Config)
		}
		settled = got
		return nil
	})
	statusManagers := 0
	for _, mf := range settled.ManagedFields {
		if mf.Manager == "weighstation-operator" && mf.Subresource == "status" && mf.Operation == metav1.ManagedFieldsOperationApply {
			statusManagers++
		}
	}
	if statusManagers != 1 {
		t.Fatalf("managed fields %+v: want the status applied by weighstation-operator", settled.ManagedFields)
	}
	// A Subscription the Topic does not govern requeues every Topic of the
	// namespace but changes none of their status. Every write of the Topic
	// from here on is watched.
	writes := watchTopic(t, ns, "orders", settled.ResourceVersion)
	if err := k8sClient.Create(ctx, newSubscription(ns, "payments", "payments.x", nil)); err != nil {
		t.Fatal(err)
	}
	// The sentinel: a Subscription that orders governs, created after the
	// unrelated one. The Topic's reconcile that counts it has seen the
	// unrelated one too, and its write must be the only one.
	if err := k8sClient.Create(ctx, newSubscription(ns, "shipped", "orders.us.shipped", nil)); err != nil {
		t.Fatal(err)
	}
	var seen []v1alpha1.Topic
	for {
		select {
		case got := <-writes:
			seen = append(seen, got)
		case <-time.After(eventuallyTimeout):
			t.Fatalf("the sentinel was not counted within %s; writes %+v", eventuallyTimeout, seen)
		}
		if last := seen[len(seen)-1]; last.Status.Subscriptions == 2 {
			break
		}
	}
	if len(seen) != 1 {
		var statuses []string
		for _, w := range seen {
			statuses = append(statuses, fmt.Sprintf("%+v", w.Status))
		}
		t.Fatalf("%d writes of the Topic, want only the sentinel's:\n%s", len(seen), strings.Join(statuses, "\n"))
	}
}

// watchTopic sends every write of a Topic after resourceVersion, until the
// test ends.
func watchTopic(t *testing.T, ns, name, resourceVersion string) <-chan v1alpha1.Topic {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(context.Background(), &v1alpha1.TopicList{}, client.InNamespace(ns),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: resourceVersion, FieldSelector: "metadata.name=" + name}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	out := make(chan v1alpha1.Topic, 100)
	go func() {
		for ev := range w.ResultChan() {
			if topic, ok := ev.Object.(*v1alpha1.Topic); ok && ev.Type == watch.Modified {
				out <- *topic
			}
		}
	}()
	return out
}

// A Topic's limits are its namespace's, not any pod's: changing them
// configures no pod, and every pod's configuration follows. A change of
// its publishers does configure the pods (which it may exclude).
func TestTopicLimitChangeConfiguresNoPod(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	injected := func(app string) map[string]string {
		return map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled, "app": app}
	}
	if err := k8sClient.Create(ctx, newTopic(ns, "orders", "orders.>")); err != nil {
		t.Fatal(err)
	}
	pods := []string{"billing-0", "billing-1", "web-0"}
	for _, name := range pods {
		if err := k8sClient.Create(ctx, newPod(ns, name, injected(strings.Split(name, "-")[0]))); err != nil {
			t.Fatal(err)
		}
		podConfig(t, ns, name, "the pod is configured", func(cfg meshconfig.PodConfig) error {
			if len(cfg.Topics) != 1 {
				return fmt.Errorf("topics %+v", cfg.Topics)
			}
			return nil
		})
	}
	var topic v1alpha1.Topic
	patchTopic := func(change func(*v1alpha1.Topic)) {
		t.Helper()
		if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "orders"}, &topic); err != nil {
			t.Fatal(err)
		}
		before := topic.DeepCopy()
		change(&topic)
		if err := k8sClient.Patch(ctx, &topic, client.MergeFrom(before)); err != nil {
			t.Fatal(err)
		}
	}
	// sentinel relabels web-0 (one SetPod) and waits for it: the pod
	// reconciler works its queue in order, so every pod a change before
	// it requeued has been configured by then.
	sentinel := func(value string) {
		t.Helper()
		var pod corev1.Pod
		if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web-0"}, &pod); err != nil {
			t.Fatal(err)
		}
		pod.Labels["sentinel"] = value
		if err := k8sClient.Update(ctx, &pod); err != nil {
			t.Fatal(err)
		}
	}
	settled := podSets.podsSet(ns)
	patchTopic(func(tp *v1alpha1.Topic) { tp.Spec.Limits.MaxMessageBytes = 4096 })
	for _, name := range pods {
		podConfig(t, ns, name, "the new limit reaches the pod", func(cfg meshconfig.PodConfig) error {
			if cfg.Topics[0].MaxMessageBytes != 4096 {
				return fmt.Errorf("topics %+v", cfg.Topics)
			}
			return nil
		})
	}
	beforeSentinel := podSets.podsSet(ns)
	sentinel("1")
	eventually(t, "the sentinel pod is configured", func() error {
		if n := podSets.podsSet(ns); n <= beforeSentinel {
			return fmt.Errorf("%d pods configured", n)
		}
		return nil
	})
	if got := podSets.podsSet(ns) - settled; got != 1 {
		t.Fatalf("a Topic's limit change and one pod's relabelling configured %d pods; want 1 (the relabelled pod)", got)
	}

	// Its publishers decide which pods may publish: every pod is
	// configured again, and web-0 is left out.
	settled = podSets.podsSet(ns)
	patchTopic(func(tp *v1alpha1.Topic) {
		tp.Spec.Publishers = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "billing"}}
	})
	podConfig(t, ns, "web-0", "the publishers selector leaves web-0 out", func(cfg meshconfig.PodConfig) error {
		if cfg.Topics[0].MayPublish {
			return fmt.Errorf("topics %+v", cfg.Topics)
		}
		return nil
	})
	for _, name := range pods[:2] {
		podConfig(t, ns, name, "billing pods may still publish", func(cfg meshconfig.PodConfig) error {
			if !cfg.Topics[0].MayPublish || cfg.Topics[0].MaxMessageBytes != 4096 {
				return fmt.Errorf("topics %+v", cfg.Topics)
			}
			return nil
		})
	}
	beforeSentinel = podSets.podsSet(ns)
	sentinel("2")
	eventually(t, "the sentinel pod is configured", func() error {
		if n := podSets.podsSet(ns); n <= beforeSentinel {
			return fmt.Errorf("%d pods configured", n)
		}
		return nil
	})
	// The relabelled pod may still have been queued from the change, in
	// which case the queue configures it once for both.
	if got := podSets.podsSet(ns) - settled; got < len(pods) || got > len(pods)+1 {
		t.Fatalf("a publishers change and one relabelling configured %d pods; want each of the %d pods once (the relabelled one perhaps twice)", got, len(pods))
	}

	// A new Topic for every pod, on a subject of its own, is the
	// namespace's alone; one on a subject another Topic has may take its
	// place (the name sorting first is in force), so every pod is
	// configured again.
	tests := []struct {
		name, topic, subject string
		wantPods             int
	}{
		{"a Topic of its own", "refunds", "refunds.>", 0},
		{"a Topic on a subject another has", "aaa-orders", "orders.>", len(pods)},
	}
	for i, tc := range tests {
		settled = podSets.podsSet(ns)
		if err := k8sClient.Create(ctx, newTopic(ns, tc.topic, tc.subject)); err != nil {
			t.Fatal(err)
		}
		for _, name := range pods {
			podConfig(t, ns, name, tc.name+" reaches the pod", func(cfg meshconfig.PodConfig) error {
				if !slices.ContainsFunc(cfg.Topics, func(p meshconfig.TopicPolicy) bool { return p.Name == tc.topic }) {
					return fmt.Errorf("topics %+v", cfg.Topics)
				}
				return nil
			})
		}
		beforeSentinel = podSets.podsSet(ns)
		sentinel(fmt.Sprint(3 + i))
		eventually(t, "the sentinel pod is configured", func() error {
			if n := podSets.podsSet(ns); n <= beforeSentinel {
				return fmt.Errorf("%d pods configured", n)
			}
			return nil
		})
		if got := podSets.podsSet(ns) - settled; got < tc.wantPods || got > tc.wantPods+1 {
			t.Fatalf("%s and one relabelling configured %d pods; want %d and the relabelled one", tc.name, got, tc.wantPods)
		}
	}
}

// Past -max-topics-per-namespace, the Topics created last are in force
// nowhere: Valid=False names the flag, the pods keep the Topics admitted,
// and deleting one admits the next.
func TestTopicsPastTheNamespaceLimit(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	if err := k8sClient.Create(ctx, newPod(ns, "app-0", map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled})); err != nil {
		t.Fatal(err)
	}
	names := make([]string, suiteMaxTopics+1)
	for i := range names {
		names[i] = fmt.Sprintf("t%02d", i)
		if err := k8sClient.Create(ctx, newTopic(ns, names[i], names[i]+".>")); err != nil {
			t.Fatal(err)
		}
		// One at a time, so that creation times order them (the apiserver
		// stamps whole seconds; ties go by name, which is the same order).
	}
	last := names[suiteMaxTopics]
	eventually(t, "the last Topic is refused", func() error {
		got, err := getTopic(ns, last)
		if err != nil {
			return err
		}
		return conditionIs(got.Status.Conditions, v1alpha1.ConditionValid, metav1.ConditionFalse, 1, "-max-topics-per-namespace (8)")
	})
	for _, name := range names[:suiteMaxTopics] {
		eventually(t, "an admitted Topic is valid", func() error {
			got, err := getTopic(ns, name)
			if err != nil {
				return err
			}
			return conditionIs(got.Status.Conditions, v1alpha1.ConditionValid, metav1.ConditionTrue, 1, "")
		})
	}
	podConfig(t, ns, "app-0", "the pod holds the Topics admitted, not the last", func(cfg meshconfig.PodConfig) error {
		if len(cfg.Topics) != suiteMaxTopics || slices.ContainsFunc(cfg.Topics, func(p meshconfig.TopicPolicy) bool { return p.Name == last }) {
			return fmt.Errorf("topics %+v", cfg.Topics)
		}
		return nil
	})
	if err := k8sClient.Delete(ctx, newTopic(ns, names[0], "")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the last Topic is admitted", func() error {
		got, err := getTopic(ns, last)
		if err != nil {
			return err
		}
		return conditionIs(got.Status.Conditions, v1alpha1.ConditionValid, metav1.ConditionTrue, 1, "")
	})
	podConfig(t, ns, "app-0", "the pod holds the last Topic", func(cfg meshconfig.PodConfig) error {
		if len(cfg.Topics) != suiteMaxTopics || !slices.ContainsFunc(cfg.Topics, func(p meshconfig.TopicPolicy) bool { return p.Name == last }) {
			return fmt.Errorf("topics %+v", cfg.Topics)
		}
		return nil
	})
}
