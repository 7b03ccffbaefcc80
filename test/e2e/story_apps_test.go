//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/weighstation/weighstation/demo/demoapi"
	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

// Bounds of the applications story.
const (
	appsReady     = 4 * time.Minute
	flowStarts    = 90 * time.Second
	flowGrowth    = 30 * time.Second
	minFlowGrowth = PublisherRate // a second of the publisher's messages
)

// stepApps applies the policy and starts the applications: the four
// probes and the demo's three, in a namespace labelled for injection.
// Each pod must be READY 2/2 with the sidecar as a native sidecar (an init
// container with restartPolicy Always) that started before the
// application, and the probes must be exchanging messages.
//
// The Topics and Subscriptions go first: the sidecar refuses a SUB that
// no Subscription of its pod covers, and a stock client does not
// subscribe again (the probes do, after a second; the demo's apps do
// not).
func stepApps(s *stepRun) {
	ctx, cfg := s.ctx, s.cfg
	policy, err := s.m.Policy()
	if err != nil {
		s.fatalf("%v", err)
	}
	if err := s.c.apply(ctx, "Topics and Subscriptions", policy); err != nil {
		s.fatalf("%v", err)
	}
	apps, err := s.m.Applications()
	if err != nil {
		s.fatalf("%v", err)
	}
	start := time.Now()
	if err := s.c.apply(ctx, "the probes and the demo's applications", apps); err != nil {
		s.fatalf("%v", err)
	}
	s.suspects = ApplicationPods()
	ready, err := s.c.waitPodsReady(ctx, cfg.AppNamespace, ApplicationPods(), appsReady)
	if err != nil {
		s.fatalf("%v", err)
	}
	s.measure("apply → every application pod Ready 2/2", ready.Sub(start), 0)
	s.c.show(ctx, "get", "pods", "-n", cfg.AppNamespace, "-o", "wide")

	for _, name := range ApplicationPods() {
		p, err := s.c.pod(ctx, cfg.AppNamespace, name)
		if err != nil {
			s.fatalf("%v", err)
		}
		if problems := InjectionProblems(p); len(problems) > 0 {
			s.errorf("pod %s: %s", name, strings.Join(problems, "; "))
		}
	}
	s.checkProbesFlow(ctx)
	s.checkDemoFlow(ctx)
}

// checkProbesFlow waits until the subscriber receives the publisher's
// messages, and more a moment later, and the requester is answered.
func (s *stepRun) checkProbesFlow(ctx context.Context) {
	ns := s.cfg.AppNamespace
	var first int64
	at, err := Poll(ctx, "the probes exchanging messages", flowStarts, apiPoll, func(ctx context.Context) (bool, string) {
		sub, err1 := s.c.probeStats(ctx, ns, PodSubscriber)
		req, err2 := s.c.probeStats(ctx, ns, PodRequester)
		resp, err3 := s.c.probeStats(ctx, ns, PodResponder)
		if err := firstErr(err1, err2, err3); err != nil {
			return false, err.Error()
		}
		first = sub.Subscriber.Received
		return first > 0 && req.Requester.OK > 0 && resp.Responder.Answered > 0, probeLine(sub) + " | " + probeLine(req) + " | " + probeLine(resp)
	})
	if err != nil {
		s.fatalf("%v", err)
	}
	s.flowSince = at
	if _, err := s.waitReceivedBeyond(ctx, first+minFlowGrowth, flowGrowth); err != nil {
		s.fatalf("%v", err)
	}
	for _, name := range []string{PodPublisher, PodSubscriber, PodRequester, PodResponder} {
		st, err := s.c.probeStats(ctx, ns, name)
		if err != nil {
			s.fatalf("%v", err)
		}
		say("  %s", probeLine(st))
		if st.Subscriber != nil && st.Subscriber.SubscribeRefusals > 0 {
			s.note("the subscriber's SUB was refused %d time(s) before its Subscription reached its sidecar", st.Subscriber.SubscribeRefusals)
		}
	}
}

// waitReceivedBeyond waits until the subscriber has received more than n.
func (s *stepRun) waitReceivedBeyond(ctx context.Context, n int64, timeout time.Duration) (probestats.Stats, error) {
	var last probestats.Stats
	_, err := Poll(ctx, fmt.Sprintf("the subscriber receiving more than %d messages", n), timeout, apiPoll, func(ctx context.Context) (bool, string) {
		st, err := s.c.probeStats(ctx, s.cfg.AppNamespace, PodSubscriber)
		if err != nil {
			return false, err.Error()
		}
		last = st
		return st.Subscriber.Received > n, probeLine(st)
	})
	return last, err
}

// checkDemoFlow waits until orders-api's spam checks are answered by the
// spam filter, through two sidecars and the brokers (billing gets no
// orders here: the demo's load generator is not run).
func (s *stepRun) checkDemoFlow(ctx context.Context) {
	ns := s.cfg.AppNamespace
	_, err := Poll(ctx, "orders-api's checks answered by spam-filter", flowStarts, apiPoll, func(ctx context.Context) (bool, string) {
		api, err := s.c.pod(ctx, ns, "orders-api")
		if err != nil {
			return false, err.Error()
		}
		b, err := s.c.podGet(ctx, api, DemoControlPort, demoapi.PathRequests)
		if err != nil {
			return false, err.Error()
		}
		var rq demoapi.Requests
		if err := json.Unmarshal(b, &rq); err != nil {
			return false, fmt.Sprintf("orders-api's %s: %v", demoapi.PathRequests, err)
		}
		spam, err := s.c.pod(ctx, ns, "spam-filter")
		if err != nil {
			return false, err.Error()
		}
		b, err = s.c.podGet(ctx, spam, DemoControlPort, demoapi.PathStats)
		if err != nil {
			return false, err.Error()
		}
		var st demoapi.Stats
		if err := json.Unmarshal(b, &st); err != nil {
			return false, fmt.Sprintf("spam-filter's %s: %v", demoapi.PathStats, err)
		}
		return rq.Counts[demoapi.Answered] > 0 && st.Answered > 0, fmt.Sprintf("orders-api's checks %v; spam-filter answered %d", rq.Counts, st.Answered)
	})
	if err != nil {
		s.fatalf("%v", err)
	}
	s.note("orders-api's spam checks are answered by spam-filter")
}

func probeLine(st probestats.Stats) string {
	line, _ := FormatProbeSummary(st)
	return line
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
