package system_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nats-io/nats.go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/reports"
	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/meshconfig"
)

// TestSidecarReportsFillStatus: real sidecars report what they measured,
// and the operator writes it into the Subscription's and the Topic's
// status and kubectl's columns: the aggregate counts every stamped
// message delivered and its percentiles are the sidecars' merged
// distribution within one bucket; the kill switch shows as the sidecars
// report it; a pod whose reports stop turns stale, then leaves.
func TestSidecarReportsFillStatus(t *testing.T) {
	ctx := background()
	ns := newNamespace(t)
	broker := natstest.StartBroker(t, nil)
	xdsAddr := natstest.FreeAddr(t)
	topic := &v1alpha1.Topic{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"},
		Spec:       v1alpha1.TopicSpec{Subject: "orders.>", Limits: v1alpha1.TopicLimits{MaxMessageBytes: 4096}},
	}
	sub := &v1alpha1.Subscription{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "billing"},
		Spec:       v1alpha1.SubscriptionSpec{Subject: "orders.*", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "billing"}}},
	}
	for _, obj := range []clientObject{topic, sub} {
		if err := k8sClient.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	op := startOperator(t, xdsAddr)
	checkout := startPod(t, ns, "checkout-0", map[string]string{"app": "checkout"}, broker.ClientURL(), xdsAddr)
	consumers := []*pod{
		startPod(t, ns, "billing-0", map[string]string{"app": "billing"}, broker.ClientURL(), xdsAddr),
		startPod(t, ns, "billing-1", map[string]string{"app": "billing"}, broker.ClientURL(), xdsAddr),
	}
	for _, p := range append([]*pod{checkout}, consumers...) {
		waitConfigured(t, op, ns, p, "configured", func(meshconfig.PodConfig) error { return nil })
	}
	const messages = 300
	var received [2]atomic.Int64
	for i, p := range consumers {
		nc := p.app(t)
		if _, err := nc.Subscribe("orders.*", func(*nats.Msg) { received[i].Add(1) }); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// The broker learns of both sidecars' interest asynchronously: a
	// sentinel that both receive says it has.
	pub := checkout.app(t)
	eventually(t, "both consumers receive", func() error {
		if err := pub.Publish("orders.sentinel", nil); err != nil {
			return err
		}
		if err := pub.Flush(); err != nil {
			return err
		}
		if received[0].Load() == 0 || received[1].Load() == 0 {
			return fmt.Errorf("received %d and %d", received[0].Load(), received[1].Load())
		}
		return nil
	})
	before := [2]int64{received[0].Load(), received[1].Load()}
	for i := range messages {
		if err := pub.Publish("orders.new", fmt.Appendf(nil, "order %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "both consumers receive every order", func() error {
		for i := range consumers {
			if got := received[i].Load() - before[i]; got < messages {
				return fmt.Errorf("%s received %d of %d", consumers[i].name, got, messages)
			}
		}
		return nil
	})
	// Everything each consumer received was stamped by checkout's sidecar
	// and measured by its own: the sidecars' distributions, merged, are
	// the truth the status must tell.
	truth := hdrhistogram.New(1, 60_000_000, 3)
	var delivered int64
	for i, p := range consumers {
		snap := p.side.Latency()["billing"][1]
		truth.Merge(snap.Histogram)
		delivered += received[i].Load()
	}
	var got v1alpha1.Subscription
	eventually(t, "status tells the sidecars' distribution", func() error {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(sub), &got); err != nil {
			return err
		}
		agg := got.Status.Aggregate
		if agg == nil {
			return fmt.Errorf("no aggregate yet")
		}
		if agg.Count != truth.TotalCount() || agg.Delivered != delivered || agg.Pods != 2 || len(got.Status.Pods) != 2 {
			return fmt.Errorf("aggregate of %d pods: %d measured, %d delivered, %d pods listed; want 2 pods, %d measured, %d delivered",
				agg.Pods, agg.Count, agg.Delivered, len(got.Status.Pods), truth.TotalCount(), delivered)
		}
		for _, p := range []struct {
			name   string
			status time.Duration
			q      float64
		}{{"p50", agg.P50.Duration, 50}, {"p99", agg.P99.Duration, 99}, {"p99.9", agg.P999.Duration, 99.9}, {"max", agg.Max.Duration, 100}} {
			want := time.Duration(truth.ValueAtQuantile(p.q)) * time.Microsecond
			if reports.MovedMoreThanOneBucket(p.status, want) {
				return fmt.Errorf("%s is %s in status, %s in the sidecars: more than one bucket apart", p.name, p.status, want)
			}
		}
		for _, ps := range got.Status.Pods {
			if ps.Latency == nil || ps.Latency.Count == 0 || ps.Dwell == nil || ps.LastReportTime == nil || ps.Stale {
				return fmt.Errorf("pod %s: %+v", ps.Name, ps)
			}
		}
		return conditionIs(got.Status.Conditions, v1alpha1.ConditionDegraded, metav1.ConditionFalse, "2 pod(s) reporting")
	})
	eventually(t, "the Topic counts the publishes", func() error {
		var tp v1alpha1.Topic
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(topic), &tp); err != nil {
			return err
		}
		if p := tp.Status.Publish; p == nil || p.Forwarded < messages || p.Attempts != p.Forwarded || p.Pods != 1 {
			return fmt.Errorf("publish %+v, want at least %d forwarded, as many attempts, by 1 pod", p, messages)
		}
		return nil
	})

	t.Run("kubectl shows the columns filled", func(t *testing.T) {
		out := kubectl(t, "get", "wsub", "-n", ns, "billing", "--no-headers",
			"-o", "custom-columns=P99:.status.aggregate.p99,MAX:.status.aggregate.max,DROPPED:.status.dropped,PODS:.status.aggregate.pods")
		fields := strings.Fields(out)
		if len(fields) != 4 || fields[0] == "<none>" || fields[1] == "<none>" || fields[3] != "2" {
			t.Fatalf("kubectl get wsub: %q, want p99, max, dropped and 2 pods", out)
		}
		table := kubectl(t, "get", "wsub", "-n", ns, "billing")
		if !strings.Contains(table, got.Status.Aggregate.P99.Duration.String()) {
			t.Fatalf("kubectl get wsub does not show p99 %s:\n%s", got.Status.Aggregate.P99.Duration, table)
		}
	})

	t.Run("the kill switch shows as the sidecars report it", func(t *testing.T) {
		kubectl(t, "-n", ns, "patch", "subscription", "billing", "--type=merge", "-p", `{"spec":{"killSwitch":{"engaged":true,"reason":"incident 7"}}}`)
		eventually(t, "KILLED says Manual", func() error {
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(sub), &got); err != nil {
				return err
			}
			if got.Status.Killed != "Manual" {
				return fmt.Errorf("killed %q, want Manual", got.Status.Killed)
			}
			for _, p := range got.Status.Pods {
				if p.Killed == nil || p.Killed.Reason != v1alpha1.KillManual {
					return fmt.Errorf("pod %s killed %+v", p.Name, p.Killed)
				}
			}
			return nil
		})
		if table := kubectl(t, "get", "wsub", "-n", ns, "billing"); !strings.Contains(table, "Manual") {
			t.Fatalf("kubectl get wsub does not show KILLED Manual:\n%s", table)
		}
		kubectl(t, "-n", ns, "patch", "subscription", "billing", "--type=merge", "-p", `{"spec":{"killSwitch":{"engaged":false}}}`)
		eventually(t, "KILLED clears", func() error {
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(sub), &got); err != nil {
				return err
			}
			if got.Status.Killed != "" {
				return fmt.Errorf("killed %q, want empty", got.Status.Killed)
			}
			return nil
		})
	})

	t.Run("a pod whose reports stop turns stale, then leaves", func(t *testing.T) {
		consumers[1].stopReports()
		stoppedAt := time.Now()
		eventually(t, "billing-1 is stale", func() error {
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(sub), &got); err != nil {
				return err
			}
			for _, p := range got.Status.Pods {
				if p.Name == "billing-1" && p.Stale {
					return conditionIs(got.Status.Conditions, v1alpha1.ConditionDegraded, metav1.ConditionTrue, "1 pod(s) stopped reporting (billing-1)")
				}
			}
			return fmt.Errorf("pods %+v", got.Status.Pods)
		})
		// Two missed reports, judged every half interval, and the
		// writer's batch: well within twice that.
		if took := time.Since(stoppedAt); took > 2*(2*reportInterval+time.Second) {
			t.Errorf("stale %s after the reports stopped, want within two intervals (%s) and the writer's delay", took, 2*reportInterval)
		}
		eventually(t, "billing-1 leaves after the window", func() error {
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(sub), &got); err != nil {
				return err
			}
			if agg := got.Status.Aggregate; agg == nil || agg.Pods != 1 || len(got.Status.Pods) != 1 || got.Status.Pods[0].Name != "billing-0" {
				return fmt.Errorf("aggregate %+v, pods %+v", agg, got.Status.Pods)
			}
			return nil
		})
		if took := time.Since(stoppedAt); took < reportWindow-2*reportInterval {
			t.Errorf("billing-1 left %s after its last report, before the window of %s", took, reportWindow)
		}
	})
}
