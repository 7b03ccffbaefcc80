package system_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/desired"
	"github.com/weighstation/weighstation/controllers/xds"
	"github.com/weighstation/weighstation/internal/envtestsuite"
	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/meshconfig/xdsresource"
)

// conditionIs checks a condition's status and that its message contains
// msg.
func conditionIs(conds []metav1.Condition, condType string, status metav1.ConditionStatus, msg string) error {
	c := meta.FindStatusCondition(conds, condType)
	if c == nil {
		return fmt.Errorf("no %s condition in %+v", condType, conds)
	}
	if c.Status != status || !strings.Contains(c.Message, msg) {
		return fmt.Errorf("%s is %s %q, want %s containing %q", condType, c.Status, c.Message, status, msg)
	}
	return nil
}

func newNamespace(t *testing.T) string {
	t.Helper()
	return envtestsuite.NewNamespace(t, k8sClient, "system-")
}

// billingSubscription selects one pod into the queue group "billing".
func billingSubscription(ns, name, podName string) *v1alpha1.Subscription {
	return &v1alpha1.Subscription{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.SubscriptionSpec{
			Subject:    "orders.*",
			QueueGroup: "billing",
			Essential:  ptr.To(false),
			Selector:   metav1.LabelSelector{MatchLabels: map[string]string{"pod": podName}},
		},
	}
}

func killSwitch(name string, engaged bool) func(meshconfig.PodConfig) error {
	return func(cfg meshconfig.PodConfig) error {
		for _, s := range cfg.Subscriptions {
			if s.Name == name {
				if s.KillSwitch.Engaged != engaged {
					return fmt.Errorf("%s engaged=%v", name, s.KillSwitch.Engaged)
				}
				return nil
			}
		}
		return fmt.Errorf("no subscription %s", name)
	}
}

// TestKubectlDrivesTheSidecars: kubectl patches reach the sidecars through
// the operator and are enforced there, and an operator restart changes no
// sidecar's configuration.
func TestKubectlDrivesTheSidecars(t *testing.T) {
	ctx := background()
	ns := newNamespace(t)
	broker := natstest.StartBroker(t, nil)
	xdsAddr := natstest.FreeAddr(t)

	topic := &v1alpha1.Topic{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"},
		Spec:       v1alpha1.TopicSpec{Subject: "orders.>", Limits: v1alpha1.TopicLimits{MaxMessageBytes: 4096}},
	}
	for _, obj := range []clientObject{topic, billingSubscription(ns, "billing-a", "billing-0"), billingSubscription(ns, "billing-b", "billing-1")} {
		if err := k8sClient.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s: %v", obj.GetName(), err)
		}
	}
	op := startOperator(t, xdsAddr)
	checkout := startPod(t, ns, "checkout-0", map[string]string{"app": "checkout", "pod": "checkout-0"}, broker.ClientURL(), xdsAddr)
	billing0 := startPod(t, ns, "billing-0", map[string]string{"app": "billing", "pod": "billing-0"}, broker.ClientURL(), xdsAddr)
	billing1 := startPod(t, ns, "billing-1", map[string]string{"app": "billing", "pod": "billing-1"}, broker.ClientURL(), xdsAddr)
	pods := []*pod{checkout, billing0, billing1}
	waitConfigured(t, op, ns, checkout, "configured", func(meshconfig.PodConfig) error { return nil })
	waitConfigured(t, op, ns, billing0, "configured", killSwitch("billing-a", false))
	waitConfigured(t, op, ns, billing1, "configured", killSwitch("billing-b", false))

	// Two responders in one queue group, one in each billing pod.
	for _, p := range []*pod{billing0, billing1} {
		nc := p.app(t)
		name := p.name
		if _, err := nc.QueueSubscribe("orders.*", "billing", func(m *nats.Msg) { _ = m.Respond([]byte(name)) }); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	var asyncErrs sync.Map
	requester := checkout.app(t, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		asyncErrs.Store(err.Error(), true)
	}))
	answers := func(n int) map[string]int {
		t.Helper()
		got := map[string]int{}
		for range n {
			m, err := requester.Request("orders.new", []byte("order"), 10*time.Second)
			if err != nil {
				t.Fatalf("request: %v", err)
			}
			got[string(m.Data)]++
		}
		return got
	}
	// The broker learns of both queue members once both sidecars forwarded
	// their SUBs; until then one may take everything.
	eventually(t, "both billing pods answer", func() error {
		if got := answers(40); got["billing-0"] == 0 || got["billing-1"] == 0 {
			return fmt.Errorf("answers %v", got)
		}
		return nil
	})

	t.Run("a kill switch engaged with kubectl moves the load to the queue peer", func(t *testing.T) {
		kubectl(t, "-n", ns, "patch", "subscription", "billing-a", "--type=merge", "-p", `{"spec":{"killSwitch":{"engaged":true,"reason":"incident 42"}}}`)
		waitConfigured(t, op, ns, billing0, "billing-a killed", killSwitch("billing-a", true))
		// The broker learns of the withdrawn interest asynchronously; once
		// it has, every request goes to billing-1.
		eventually(t, "only billing-1 answers", func() error {
			if got := answers(40); got["billing-0"] != 0 || got["billing-1"] != 40 {
				return fmt.Errorf("answers %v", got)
			}
			return nil
		})
	})

	t.Run("status shows the kill switch applied by every selected pod", func(t *testing.T) {
		eventually(t, "billing-a is Ready with its one pod applied", func() error {
			var sub v1alpha1.Subscription
			if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "billing-a"}, &sub); err != nil {
				return err
			}
			want := xds.Version(xdsresource.SubscriptionResource(desired.SubscriptionPolicyOf(sub)))
			c := sub.Status.Config
			if c == nil || c.Version != want || c.AppliedPods != 1 || c.TotalPods != 1 || c.PropagationTime == nil {
				return fmt.Errorf("config %+v, want version %s applied by 1 of 1", c, want)
			}
			return conditionIs(sub.Status.Conditions, v1alpha1.ConditionReady, metav1.ConditionTrue, "the kill switch is engaged in all 1")
		})
		// The kill switch's arrival in every pod is an Event on the
		// Subscription, as kubectl shows it.
		eventually(t, "an Event says the kill switch reached every pod", func() error {
			var events eventsv1.EventList
			if err := k8sClient.List(ctx, &events, client.InNamespace(ns)); err != nil {
				return err
			}
			for _, e := range events.Items {
				if e.Regarding.Name == "billing-a" && e.Reason == "KillSwitchEngaged" && strings.Contains(e.Note, "in all 1 pod(s)") {
					return nil
				}
			}
			return fmt.Errorf("no KillSwitchEngaged event among %d", len(events.Items))
		})
		out := kubectl(t, "-n", ns, "get", "subscriptions")
		if !strings.Contains(out, "billing-a") {
			t.Fatalf("kubectl get subscriptions:\n%s", out)
		}
	})

	t.Run("a configuration a sidecar refuses is NACKed and shown in status", func(t *testing.T) {
		refuse := func(cfg meshconfig.PodConfig) error {
			for _, s := range cfg.Subscriptions {
				if s.KillSwitch.Reason == "unreadable" {
					return errors.New(`subscription "billing-b": this sidecar cannot apply the reason "unreadable"`)
				}
			}
			return nil
		}
		billing1.refuse.Store(&refuse)
		defer billing1.refuse.Store(nil)
		before := billing1.client.Version()
		kubectl(t, "-n", ns, "patch", "subscription", "billing-b", "--type=merge", "-p", `{"spec":{"killSwitch":{"reason":"unreadable"}}}`)
		eventually(t, "the refusal is in status", func() error {
			var sub v1alpha1.Subscription
			if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "billing-b"}, &sub); err != nil {
				return err
			}
			if c := sub.Status.Config; c == nil || len(c.Rejected) != 1 || c.Rejected[0].Pod != "billing-1" || !strings.Contains(c.Rejected[0].Reason, "cannot apply") {
				return fmt.Errorf("config %+v", c)
			}
			if err := conditionIs(sub.Status.Conditions, v1alpha1.ConditionConfigRejected, metav1.ConditionTrue, "billing-1"); err != nil {
				return err
			}
			return conditionIs(sub.Status.Conditions, v1alpha1.ConditionReady, metav1.ConditionFalse, "0 of 1")
		})
		eventually(t, "a Warning Event names the refusal", func() error {
			var events eventsv1.EventList
			if err := k8sClient.List(ctx, &events, client.InNamespace(ns)); err != nil {
				return err
			}
			for _, e := range events.Items {
				if e.Regarding.Name == "billing-b" && e.Reason == "Rejected" && e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, "cannot apply") {
					return nil
				}
			}
			return fmt.Errorf("no Rejected event among %d", len(events.Items))
		})
		if got := billing1.client.Version(); got != before {
			t.Fatalf("the refusing sidecar holds %s, want its last good %s", got, before)
		}
		billing1.refuse.Store(nil)
		kubectl(t, "-n", ns, "patch", "subscription", "billing-b", "--type=merge", "-p", `{"spec":{"killSwitch":{"reason":"readable"}}}`)
		eventually(t, "the fixed version clears the refusal", func() error {
			var sub v1alpha1.Subscription
			if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "billing-b"}, &sub); err != nil {
				return err
			}
			if c := sub.Status.Config; c == nil || len(c.Rejected) != 0 || c.AppliedPods != 1 {
				return fmt.Errorf("config %+v", c)
			}
			return conditionIs(sub.Status.Conditions, v1alpha1.ConditionConfigRejected, metav1.ConditionFalse, "")
		})
	})

	t.Run("with every member killed, requests fail fast", func(t *testing.T) {
		kubectl(t, "-n", ns, "patch", "subscription", "billing-b", "--type=merge", "-p", `{"spec":{"killSwitch":{"engaged":true,"reason":"incident 42"}}}`)
		waitConfigured(t, op, ns, billing1, "billing-b killed", killSwitch("billing-b", true))
		eventually(t, "requests fail with no responders", func() error {
			start := time.Now()
			_, err := requester.Request("orders.new", []byte("order"), 10*time.Second)
			if !errors.Is(err, nats.ErrNoResponders) {
				return fmt.Errorf("request: %v, want %v", err, nats.ErrNoResponders)
			}
			if took := time.Since(start); took > 2*time.Second {
				return fmt.Errorf("failing took %v, not fast", took)
			}
			return nil
		})
	})

	t.Run("released with kubectl, both answer again", func(t *testing.T) {
		kubectl(t, "-n", ns, "patch", "subscription", "billing-a", "--type=merge", "-p", `{"spec":{"killSwitch":{"engaged":false}}}`)
		kubectl(t, "-n", ns, "patch", "subscription", "billing-b", "--type=merge", "-p", `{"spec":{"killSwitch":{"engaged":false}}}`)
		waitConfigured(t, op, ns, billing0, "billing-a released", killSwitch("billing-a", false))
		waitConfigured(t, op, ns, billing1, "billing-b released", killSwitch("billing-b", false))
		eventually(t, "both billing pods answer", func() error {
			if got := answers(40); got["billing-0"] == 0 || got["billing-1"] == 0 {
				return fmt.Errorf("answers %v", got)
			}
			return nil
		})
	})

	t.Run("a Topic's size limit changed with kubectl is enforced", func(t *testing.T) {
		kubectl(t, "-n", ns, "patch", "topic", "orders", "--type=merge", "-p", `{"spec":{"limits":{"maxMessageBytes":100}}}`)
		waitConfigured(t, op, ns, checkout, "maxMessageBytes 100", func(cfg meshconfig.PodConfig) error {
			if len(cfg.Topics) != 1 || cfg.Topics[0].MaxMessageBytes != 100 {
				return fmt.Errorf("topics %+v", cfg.Topics)
			}
			return nil
		})
		if err := requester.Publish("orders.big", make([]byte, 200)); err != nil {
			t.Fatalf("publish: %v", err)
		}
		// A sentinel under the limit still gets its answer: the refusal
		// kept the connection.
		if _, err := requester.Request("orders.small", []byte("ok"), 10*time.Second); err != nil {
			t.Fatalf("a request under the limit after the refusal: %v", err)
		}
		want := `message of 200 bytes exceeds maxMessageBytes 100`
		eventually(t, "the refusal reaches the application", func() error {
			var found bool
			asyncErrs.Range(func(k, _ any) bool {
				found = found || strings.Contains(k.(string), want)
				return !found
			})
			if !found {
				return fmt.Errorf("no async error containing %q", want)
			}
			return nil
		})
	})

	t.Run("an operator restart changes no sidecar's configuration", func(t *testing.T) {
		// Every sidecar holds what the operator computed (the size limit
		// above reached all three, not only the one the subtest waited for).
		for _, p := range pods {
			waitConfigured(t, op, ns, p, "up to date before the restart", func(meshconfig.PodConfig) error { return nil })
		}
		before, connects := map[string]uint64{}, map[string]uint64{}
		versions := map[string]string{}
		for _, p := range pods {
			st := p.client.Stats()
			before[p.name], connects[p.name] = st.Applied, st.Connects
			versions[p.name] = p.client.Version()
		}
		var observedB *metav1.Time
		eventually(t, "billing-b's status settles on its current version", func() error {
			var sub v1alpha1.Subscription
			if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "billing-b"}, &sub); err != nil {
				return err
			}
			want := xds.Version(xdsresource.SubscriptionResource(desired.SubscriptionPolicyOf(sub)))
			if c := sub.Status.Config; c == nil || c.Version != want || c.AppliedPods != 1 || c.ObservedTime == nil {
				return fmt.Errorf("config %+v, want version %s applied", c, want)
			}
			observedB = sub.Status.Config.ObservedTime
			return nil
		})
		op.stop()
		// Traffic flows while the operator is away.
		if got := answers(10); got["billing-0"]+got["billing-1"] != 10 {
			t.Fatalf("answers while the operator is down: %v", got)
		}
		op = startOperator(t, xdsAddr)
		for _, p := range pods {
			eventually(t, p.name+" reconnects", func() error {
				if st := p.client.Stats(); !st.Connected || st.Connects <= connects[p.name] {
					return fmt.Errorf("stats %+v", st)
				}
				return nil
			})
		}
		// The new operator knows what the sidecars hold from their reports
		// at reconnection: status stays Ready, with the same observed time.
		eventually(t, "billing-b is Ready under the new operator, its observed time kept", func() error {
			var sub v1alpha1.Subscription
			if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "billing-b"}, &sub); err != nil {
				return err
			}
			c := sub.Status.Config
			if c == nil || c.AppliedPods != 1 || c.ObservedTime == nil || !c.ObservedTime.Equal(observedB) {
				return fmt.Errorf("config %+v, want 1 applied, observed at %v", c, observedB)
			}
			return conditionIs(sub.Status.Conditions, v1alpha1.ConditionReady, metav1.ConditionTrue, "1 of 1")
		})
		// Sentinel: a change after the reconnection reaches billing-0, so
		// anything the reconnection sent it came before.
		kubectl(t, "-n", ns, "patch", "subscription", "billing-a", "--type=merge", "-p", `{"spec":{"killSwitch":{"reason":"sentinel"}}}`)
		waitConfigured(t, op, ns, billing0, "the sentinel", func(cfg meshconfig.PodConfig) error {
			for _, s := range cfg.Subscriptions {
				if s.KillSwitch.Reason == "sentinel" {
					return nil
				}
			}
			return errors.New("no sentinel yet")
		})
		for _, p := range pods {
			want := before[p.name]
			if p == billing0 {
				want++ // the sentinel
			} else if v := p.client.Version(); v != versions[p.name] {
				t.Errorf("%s: version %s after the restart, was %s", p.name, v, versions[p.name])
			}
			if got := p.client.Stats().Applied; got != want {
				t.Errorf("%s applied %d configurations, want %d: the restart must apply nothing", p.name, got, want)
			}
		}
	})
}
