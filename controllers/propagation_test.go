package controllers_test

import (
	"context"
	"fmt"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
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
