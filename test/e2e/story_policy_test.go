//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

// Bounds and targets of the policy stories.
const (
	// statusFilled: the sidecars report every 10 s and the operator writes
	// at most every 10 s (README: Limits), over a 1 min window.
	statusFilled = 3 * time.Minute
	// killSwitchTarget: a kill switch PATCH to the first request that
	// fails fast.
	killSwitchTarget = 300 * time.Millisecond
	killSwitchSeen   = 10 * time.Second
	killedInStatus   = 90 * time.Second
	requesterSteady  = 30 * time.Second
	measurePoll      = 20 * time.Millisecond
)

// trafficSubscriptions are the Subscriptions that see messages in these
// stories, so that their latency columns must hold a measurement (billing
// gets no orders: the demo's load generator is not run here).
var trafficSubscriptions = []string{SubscriptionStream, SubscriptionRPC, "spam-filter"}

// stepPolicyStatus waits until every Subscription's status columns are
// filled from the sidecars' reports: READY True, P99, P99.9 and MAX from
// status.aggregate, DROPPED and KILLED agreeing with it, as `kubectl get
// subscriptions` shows them (the CRD's own printer columns are evaluated).
func stepPolicyStatus(s *stepRun) {
	ctx, ns := s.ctx, s.cfg.AppNamespace
	crd, err := s.c.kubectl(ctx, "get", "crd", SubscriptionCRD, "-o", "json")
	if err != nil {
		s.fatalf("%v", err)
	}
	cols, err := PrinterColumns([]byte(crd))
	if err != nil {
		s.fatalf("%v", err)
	}
	start := time.Now()
	at, err := Poll(ctx, "every Subscription's status columns filled from reports", statusFilled, 2*time.Second, func(ctx context.Context) (bool, string) {
		out, err := s.c.kubectl(ctx, "get", "subscriptions", "-n", ns, "-o", "json")
		if err != nil {
			return false, err.Error()
		}
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			return false, err.Error()
		}
		if len(list.Items) == 0 {
			return false, "no Subscription"
		}
		var missing []string
		for _, raw := range list.Items {
			var obj map[string]any
			var sub v1alpha1.Subscription
			if err := json.Unmarshal(raw, &obj); err != nil {
				return false, err.Error()
			}
			if err := json.Unmarshal(raw, &sub); err != nil {
				return false, err.Error()
			}
			values, err := EvaluateColumns(cols, obj)
			if err != nil {
				return false, err.Error()
			}
			if why := ReportedStatus(values, sub, slices.Contains(trafficSubscriptions, sub.Name)); why != "" {
				missing = append(missing, sub.Name+": "+why)
			}
		}
		sort.Strings(missing)
		return len(missing) == 0, strings.Join(missing, " | ")
	})
	s.c.show(ctx, "get", "subscriptions", "-n", ns)
	s.c.show(ctx, "get", "topics", "-n", ns)
	if err != nil {
		s.fatalf("%v", err)
	}
	s.measure("status columns filled from the sidecars' reports", at.Sub(start), 0)
}

// stepKillSwitch engages the responder's kill switch by hand and measures,
// from the PATCH to the requester's first fast failure (no responders),
// against the 300 ms target; then sees the KILLED column say Manual, and
// requests answered again once it is released.
func stepKillSwitch(s *stepRun) {
	ctx := s.ctx
	s.suspects = []string{PodRequester, PodResponder}
	s.waitRequesterAnswered(ctx)
	s.releaseKillSwitchAtEnd()
	t0 := time.Now()
	if err := s.c.setKillSwitch(ctx, s.cfg.AppNamespace, SubscriptionRPC, true, "e2e: kill switch story"); err != nil {
		s.fatalf("%v", err)
	}
	first := s.waitRequesterState(ctx, probestats.OutcomeFastFailure, t0, killSwitchSeen)
	s.measure("kill switch PATCH → first fast failure", first.At().Sub(t0), killSwitchTarget)
	s.note("the first request to fail fast was sent %s after the PATCH", time.Unix(0, first.SentUnixNano).Sub(t0).Round(time.Millisecond))
	s.waitKilledInStatus(ctx, string(v1alpha1.KillManual), t0)

	t1 := time.Now()
	if err := s.c.setKillSwitch(ctx, s.cfg.AppNamespace, SubscriptionRPC, false, ""); err != nil {
		s.fatalf("%v", err)
	}
	answered := s.waitRequesterState(ctx, probestats.OutcomeOK, t1, killSwitchSeen)
	s.measure("release PATCH → first answer", answered.At().Sub(t1), 0)
}

// waitRequesterAnswered waits until the requester's requests are answered
// (its last transition is to ok).
func (s *stepRun) waitRequesterAnswered(ctx context.Context) {
	_, err := Poll(ctx, "the requester answered", requesterSteady, apiPoll, func(ctx context.Context) (bool, string) {
		st, err := s.c.probeStats(ctx, s.cfg.AppNamespace, PodRequester)
		if err != nil {
			return false, err.Error()
		}
		return st.Requester.State() == probestats.OutcomeOK, probeLine(st)
	})
	if err != nil {
		s.fatalf("%v", err)
	}
}

// waitRequesterState waits for the requester's first transition to
// outcome known at or after since, and returns it.
func (s *stepRun) waitRequesterState(ctx context.Context, outcome probestats.Outcome, since time.Time, timeout time.Duration) probestats.Transition {
	var tr probestats.Transition
	_, err := Poll(ctx, fmt.Sprintf("the requester's first %s after %s", outcome, since.Format("15:04:05.000")), timeout, measurePoll, func(ctx context.Context) (bool, string) {
		st, err := s.c.probeStats(ctx, s.cfg.AppNamespace, PodRequester)
		if err != nil {
			return false, err.Error()
		}
		var ok bool
		tr, ok = st.Requester.FirstTransitionAfter(outcome, since)
		return ok, probeLine(st)
	})
	if err != nil {
		s.fatalf("%v", err)
	}
	return tr
}

// waitKilledInStatus waits until the responder's Subscription reports its
// kill switch: the KillSwitchEngaged condition (from the spec) and the
// KILLED column (status.killed, from the sidecars' reports).
func (s *stepRun) waitKilledInStatus(ctx context.Context, killed string, patched time.Time) {
	at, err := Poll(ctx, "KILLED "+killed+" on Subscription "+SubscriptionRPC, killedInStatus, time.Second, func(ctx context.Context) (bool, string) {
		u, err := s.c.dyn.Resource(subscriptionsGVR).Namespace(s.cfg.AppNamespace).Get(ctx, SubscriptionRPC, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		var sub v1alpha1.Subscription
		if err := fromUnstructured(u, &sub); err != nil {
			return false, err.Error()
		}
		engaged := meta.IsStatusConditionTrue(sub.Status.Conditions, v1alpha1.ConditionKillSwitchEngaged)
		return engaged && sub.Status.Killed == killed, fmt.Sprintf("KillSwitchEngaged %v, KILLED %q", engaged, sub.Status.Killed)
	})
	if err != nil {
		s.errorf("%v", err)
		return
	}
	s.measure("kill switch PATCH → KILLED "+killed+" in status", at.Sub(patched), 0)
	s.c.show(ctx, "get", "subscription", SubscriptionRPC, "-n", s.cfg.AppNamespace)
}

func fromUnstructured(u *unstructured.Unstructured, into any) error {
	b, err := u.MarshalJSON()
	if err != nil {
		return err
	}
	return json.Unmarshal(b, into)
}

// releaseKillSwitchAtEnd releases the responder's kill switch when the
// step ends, however it ends, so that a failed step leaves the later ones
// a responder that answers.
func (s *stepRun) releaseKillSwitchAtEnd() {
	s.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		u, err := s.c.dyn.Resource(subscriptionsGVR).Namespace(s.cfg.AppNamespace).Get(ctx, SubscriptionRPC, metav1.GetOptions{})
		if err != nil {
			return
		}
		if engaged, _, _ := unstructured.NestedBool(u.Object, "spec", "killSwitch", "engaged"); engaged {
			if err := s.c.setKillSwitch(ctx, s.cfg.AppNamespace, SubscriptionRPC, false, ""); err != nil {
				say("releasing the kill switch after the step: %v", err)
			}
		}
	})
}
