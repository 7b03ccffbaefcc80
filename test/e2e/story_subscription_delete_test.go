//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

// Bounds of the Subscription story.
const (
	configReachesSidecar = 30 * time.Second
	subscriptionReady    = 60 * time.Second
)

// deliverySemantics is what README.md's "Delivery semantics" says of
// messages that wait when their subscription goes, printed beside what
// the probes counted.
const deliverySemantics = `README.md, Delivery semantics: "Core NATS is at most once, and so is weighstation. ` +
	`A message is delivered once or not at all"; every drop has a reason, and "closed, unsubscribed: the application ` +
	`closed its connection or unsubscribed while the message waited" counts as no loss.`

// stepSubscriptionDelete deletes the subscriber's (essential)
// Subscription while the publisher publishes, and records what happens:
// the probes' counts, the subscriber's sidecar's drops by reason, and
// whether delivery goes on (a live SUB keeps flowing under the sidecar's
// defaults once no Subscription covers it: it is rebound, not closed).
// Then the Subscription is applied again and the stream must flow under
// it. What is lost in between is reported against README's delivery
// semantics, not failed.
func stepSubscriptionDelete(s *stepRun) {
	ctx, cfg := s.ctx, s.cfg
	s.suspects = []string{PodSubscriber}
	subPod, err := s.c.pod(ctx, cfg.AppNamespace, PodSubscriber)
	if err != nil {
		s.fatalf("%v", err)
	}
	m0, err := s.c.metrics(ctx, subPod, SidecarMetricsPort)
	if err != nil {
		s.fatalf("%v", err)
	}
	pending, _ := m0.Sum(MetricPending, map[string]string{"subscription": SubscriptionStream})
	before := s.subscriberNow(ctx)
	t0 := time.Now()
	say("$ kubectl delete subscription %s -n %s", SubscriptionStream, cfg.AppNamespace)
	if err := s.c.dyn.Resource(subscriptionsGVR).Namespace(cfg.AppNamespace).Delete(ctx, SubscriptionStream, metav1.DeleteOptions{}); err != nil {
		s.fatalf("deleting Subscription %s: %v", SubscriptionStream, err)
	}
	s.note("%g message(s) waited in the subscriber's sidecar for %s at the delete (%s)", pending, SubscriptionStream, MetricPending)
	// The sidecar applied the change when its SUB counts under the
	// default policy ("") instead.
	unbound, err := s.waitArrivedUnder(ctx, subPod, "", m0, t0)
	if err != nil {
		// A finding, not a failure: what the sidecar does with a SUB its
		// Subscription no longer covers is what this story records.
		s.note("no arrival counted under the default policy after the delete: %v", err)
	} else {
		s.measure("Subscription delete → the sidecar applied it", unbound.Sub(t0), 0)
	}
	during := s.subscriberNow(ctx)

	policy, err := s.m.Policy()
	if err != nil {
		s.fatalf("%v", err)
	}
	m1, err := s.c.metrics(ctx, subPod, SidecarMetricsPort)
	if err != nil {
		s.fatalf("%v", err)
	}
	t1 := time.Now()
	if err := s.c.apply(ctx, "the Subscriptions again", policy); err != nil {
		s.fatalf("%v", err)
	}
	s.waitSubscriptionReady(ctx, SubscriptionStream)
	rebound, err := s.waitArrivedUnder(ctx, subPod, SubscriptionStream, m1, t1)
	if err != nil {
		s.errorf("%v", err)
	} else {
		s.measure("Subscription applied again → the sidecar applied it", rebound.Sub(t1), 0)
	}
	window := s.addWindow("subscription "+SubscriptionStream+" deleted and applied again", t0, time.Now().Add(lossWindowMargin))
	s.checkStillFlowing(ctx, during)
	s.checkNoLossSince(ctx, t0)

	after := s.subscriberNow(ctx)
	m2, err := s.c.metrics(ctx, subPod, SidecarMetricsPort)
	if err != nil {
		s.fatalf("%v", err)
	}
	s.note("while %s was gone: the subscriber received %d message(s) (disconnects %d), lost %d in the window; the sidecar dropped %s",
		SubscriptionStream, during.Subscriber.Received-before.Subscriber.Received, after.Disconnects-before.Disconnects,
		after.Subscriber.LostBetween(window.Start, window.End), dropDelta(m0, m2))
	s.note("%s", deliverySemantics)
}

// waitArrivedUnder waits until the sidecar counts arrivals for the
// subscriber's SUB under the Subscription policy name ("" is the
// default): the configuration reached it.
func (s *stepRun) waitArrivedUnder(ctx context.Context, p *corev1.Pod, policy string, base Samples, since time.Time) (time.Time, error) {
	match := map[string]string{"subscription": policy}
	was, _ := base.Sum(MetricArrived, match)
	return Poll(ctx, fmt.Sprintf("the subscriber's sidecar counting arrivals under %q", policy), configReachesSidecar, fastPoll, func(ctx context.Context) (bool, string) {
		m, err := s.c.metrics(ctx, p, SidecarMetricsPort)
		if err != nil {
			return false, err.Error()
		}
		now, _ := m.Sum(MetricArrived, match)
		return now > was, fmt.Sprintf("%s{subscription=%q} %g (was %g)", MetricArrived, policy, now, was)
	})
}

func (s *stepRun) waitSubscriptionReady(ctx context.Context, name string) {
	_, err := Poll(ctx, "Subscription "+name+" Ready", subscriptionReady, apiPoll, func(ctx context.Context) (bool, string) {
		u, err := s.c.dyn.Resource(subscriptionsGVR).Namespace(s.cfg.AppNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		var sub v1alpha1.Subscription
		if err := fromUnstructured(u, &sub); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(sub.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil {
			return false, "no Ready condition"
		}
		return c.Status == metav1.ConditionTrue && c.ObservedGeneration == sub.Generation, fmt.Sprintf("Ready %s: %s", c.Status, c.Message)
	})
	if err != nil {
		s.errorf("%v", err)
	}
}

// dropDelta lists weighstation_sidecar_dropped_total's growth by
// subscription and reason between two scrapes.
func dropDelta(before, after Samples) string {
	key := func(x Sample) string { return x.Labels["subscription"] + "/" + x.Labels["reason"] }
	was := map[string]float64{}
	for _, x := range before {
		if x.Name == MetricDropped {
			was[key(x)] += x.Value
		}
	}
	var out []string
	for _, x := range after {
		if x.Name == MetricDropped && x.Value > was[key(x)] {
			out = append(out, fmt.Sprintf("%s %g", key(x), x.Value-was[key(x)]))
		}
	}
	if len(out) == 0 {
		return "nothing"
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
