package controllers_test

import (
	"context"
	"fmt"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/meshconfig"
)

// TestPodCountsFollowALabelChange: a pod whose labels move it from one
// Subscription's selector to another's leaves the first's count and joins
// the second's (controller-runtime's map handler maps the old pod and the
// new one on an update).
func TestPodCountsFollowALabelChange(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	for _, obj := range []client.Object{
		newSubscription(ns, "a", "a.*", map[string]string{"app": "a"}),
		newSubscription(ns, "b", "b.*", map[string]string{"app": "b"}),
		newPod(ns, "p0", map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled, "app": "a"}),
		newPod(ns, "p1", map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled, "app": "a"}),
	} {
		if err := k8sClient.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	totals := func(wantA, wantB int32) func() error {
		return func() error {
			for name, want := range map[string]int32{"a": wantA, "b": wantB} {
				var sub v1alpha1.Subscription
				if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &sub); err != nil {
					return err
				}
				var got int32
				if sub.Status.Config != nil {
					got = sub.Status.Config.TotalPods
				}
				if sub.Status.Config == nil || got != want {
					return fmt.Errorf("%s counts %d pods (config %+v), want %d", name, got, sub.Status.Config, want)
				}
			}
			return nil
		}
	}
	eventually(t, "a counts both pods", totals(2, 0))
	// Sentinel: propagation's own write of a's status queues one more
	// reconcile of a. A Subscription created now is queued after it (one
	// worker, in order), so once it has a status, a has nothing pending
	// that could pick up the label change by chance.
	if err := k8sClient.Create(ctx, newSubscription(ns, "sentinel", "s.*", map[string]string{"app": "s"})); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the sentinel is reconciled", func() error {
		var sub v1alpha1.Subscription
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sentinel"}, &sub); err != nil {
			return err
		}
		if sub.Status.Config == nil {
			return fmt.Errorf("no propagation status yet")
		}
		return nil
	})
	pod := newPod(ns, "p0", nil)
	if err := k8sClient.Patch(ctx, pod, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"app":"b"}}}`))); err != nil {
		t.Fatal(err)
	}
	eventually(t, "p0 moves from a's count to b's", totals(1, 1))
}

// podconfigReconciles reads controller-runtime's reconcile counter of the
// pod configuration controller.
func podconfigReconciles(t *testing.T) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "podconfig" {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// TestAKillSwitchRecomputesOnlyThePodsItSelects: engaging a kill switch
// recomputes the configuration of the pods the Subscription selects, and
// of no other pod of the namespace.
func TestAKillSwitchRecomputesOnlyThePodsItSelects(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	objs := []client.Object{newSubscription(ns, "billing", "orders.*", map[string]string{"app": "billing"})}
	for i := range 5 {
		app := "other"
		if i < 2 {
			app = "billing"
		}
		objs = append(objs, newPod(ns, fmt.Sprintf("pod-%d", i), map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled, "app": app}))
	}
	for _, obj := range objs {
		if err := k8sClient.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		podConfig(t, ns, fmt.Sprintf("pod-%d", i), "configured", func(meshconfig.PodConfig) error { return nil })
	}
	// Sentinel for the creations: a pod created last is configured after
	// every reconcile they queued.
	if err := k8sClient.Create(ctx, newPod(ns, "sentinel-0", map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled, "app": "none"})); err != nil {
		t.Fatal(err)
	}
	podConfig(t, ns, "sentinel-0", "the first sentinel is configured", func(meshconfig.PodConfig) error { return nil })
	before := podconfigReconciles(t)

	sub := newSubscription(ns, "billing", "", nil)
	if err := k8sClient.Patch(ctx, sub, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"killSwitch":{"engaged":true}}}`))); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		podConfig(t, ns, fmt.Sprintf("pod-%d", i), "the kill switch reaches the selected pod", func(cfg meshconfig.PodConfig) error {
			if len(cfg.Subscriptions) != 1 || !cfg.Subscriptions[0].KillSwitch.Engaged {
				return fmt.Errorf("subscriptions %+v", cfg.Subscriptions)
			}
			return nil
		})
	}
	// Sentinel for the change: queued after whatever the kill switch queued.
	if err := k8sClient.Create(ctx, newPod(ns, "sentinel-1", map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled, "app": "none"})); err != nil {
		t.Fatal(err)
	}
	podConfig(t, ns, "sentinel-1", "the second sentinel is configured", func(meshconfig.PodConfig) error { return nil })
	if got := podconfigReconciles(t) - before; got != 3 {
		t.Fatalf("%v pod reconciles for a kill switch selecting 2 pods and one sentinel, want 3", got)
	}
}
