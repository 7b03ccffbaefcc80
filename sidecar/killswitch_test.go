package sidecar_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/internal/poll"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar"
	"github.com/weighstation/weighstation/sidecar/breaker"
	"github.com/weighstation/weighstation/sidecar/pending"
)

// subscription is a Subscription policy with roomy limits.
func subscription(name, subject, queue string, essential bool) meshconfig.SubscriptionPolicy {
	return meshconfig.SubscriptionPolicy{Name: name, Subject: subject, QueueGroup: queue, Essential: essential,
		Limits: meshconfig.Limits{MaxPendingMessages: 10_000, MaxPendingBytes: 32 << 20, Overflow: "DropNewest"}}
}

func withSubscriptions(subs ...meshconfig.SubscriptionPolicy) meshconfig.PodConfig {
	cfg := configWith()
	cfg.Subscriptions = subs
	return cfg
}

func (r *rig) setConfig(t *testing.T, cfg meshconfig.PodConfig) {
	t.Helper()
	if err := r.side.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
}

// statsOf returns the accounting of the live SUB with sid.
func (r *rig) statsOf(t *testing.T, sid string) pending.Counts {
	t.Helper()
	return r.subscriptionStats(t, sid).Counts
}

// brokerSubs waits until the broker holds want subscriptions besides its own.
func (r *rig) waitBrokerSubs(t *testing.T, base uint32, want uint32) {
	t.Helper()
	natstest.WaitFor(t, "the broker's interest", func() bool { return r.broker.NumSubscriptions()-base == want })
}

// TestManualKillSwitch: engaging the switch stops delivery at once and
// withdraws the upstream queue-group membership, so the group's other
// member takes every message; releasing it restores both. The counts are
// exact.
func TestManualKillSwitch(t *testing.T) {
	r := newRig(t)
	base := r.broker.NumSubscriptions()
	work := subscription("work", "jobs", "workers", false)
	r.setConfig(t, withSubscriptions(work))
	app, peer, pub := r.app(t), r.direct(t), r.direct(t)
	var inPod, outside atomic.Int64
	if _, err := app.QueueSubscribe("jobs", "workers", func(*nats.Msg) { inPod.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if _, err := peer.QueueSubscribe("jobs", "workers", func(*nats.Msg) { outside.Add(1) }); err != nil {
		t.Fatal(err)
	}
	flush(t, app, peer)
	r.waitBrokerSubs(t, base, 2)
	publish := func(n int) {
		t.Helper()
		for range n {
			if err := pub.Publish("jobs", []byte("j")); err != nil {
				t.Fatal(err)
			}
		}
		flush(t, pub)
	}

	publish(100)
	natstest.WaitFor(t, "the group shares 100 jobs", func() bool { return inPod.Load()+outside.Load() == 100 })
	if inPod.Load() == 0 || outside.Load() == 0 {
		t.Fatalf("the group did not share: in the pod %d, outside %d", inPod.Load(), outside.Load())
	}
	before := inPod.Load()

	work.KillSwitch.Engaged, work.KillSwitch.Reason = true, "maintenance"
	r.setConfig(t, withSubscriptions(work))
	if ks := r.side.KillSwitches()["work"]; !ks.Killed || !ks.Engaged || !strings.Contains(ks.Reason, "maintenance") {
		t.Fatalf("kill switch status %+v, want killed by hand for maintenance", ks)
	}
	if n := r.side.Interest().Subscriptions(); n != 0 {
		t.Fatalf("the sidecar holds %d upstream subscriptions while killed, want 0", n)
	}
	r.waitBrokerSubs(t, base, 1) // only the outside member is left
	publish(100)
	natstest.WaitFor(t, "the outside member takes the whole load", func() bool { return outside.Load() == 200-before })
	flush(t, app)
	if got := inPod.Load(); got != before {
		t.Fatalf("the killed member received %d messages while killed", got-before)
	}

	work.KillSwitch.Engaged = false
	r.setConfig(t, withSubscriptions(work))
	r.waitBrokerSubs(t, base, 2)
	publish(100)
	natstest.WaitFor(t, "the group shares again", func() bool { return inPod.Load()+outside.Load() == 300 })
	if inPod.Load() == before {
		t.Fatal("the restored member received nothing")
	}
	// The application can read a message before the sidecar's writer has
	// settled the write that carried it: the counts catch up, bounded.
	var counts pending.Counts
	settled := func() bool {
		counts = r.statsOf(t, "1")
		return counts.Balanced() && counts.Arrived == uint64(inPod.Load())+counts.Dropped[pending.ReasonKilled] && counts.Delivered == uint64(inPod.Load())
	}
	if err := poll.Until(10*time.Second, 10*time.Millisecond, func() error {
		if !settled() {
			return fmt.Errorf("counts %+v; the application received %d", counts, inPod.Load())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if ks := r.side.KillSwitches()["work"]; ks.Killed {
		t.Fatalf("still killed after release: %+v", ks)
	}
}

// stalledWithBacklog subscribes a client that never reads to subject and
// publishes 64 KiB messages until the sidecar holds at least minPending for
// it (past what the socket buffers take).
func (r *rig) stalledWithBacklog(t *testing.T, sub string, sid string, subject, reply string, minPending uint64) {
	t.Helper()
	stalled := r.raw(t)
	stalled.send("CONNECT {}\r\n" + sub + "\r\nPING\r\n")
	if got := stalled.line(); got != "PONG" {
		t.Fatalf("got %q, want PONG", got)
	}
	pub := r.direct(t)
	payload := bytes.Repeat([]byte("x"), 64<<10)
	for sent := 0; r.statsOf(t, sid).Pending < minPending; sent++ {
		if sent > 2000 {
			t.Fatalf("after %d messages only %d pending", sent, r.statsOf(t, sid).Pending)
		}
		if err := pub.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Data: payload}); err != nil {
			t.Fatal(err)
		}
		flush(t, pub)
	}
}

// TestKillDropsWhatWaitsAndAnswersQueuedRequests: what waited for a killed
// subscription is dropped at once with reason killed; the requests among it
// that were sent to a queue group get the sidecar's "no responders"
// answer, one each, so their requesters fail fast.
func TestKillDropsWhatWaitsAndAnswersQueuedRequests(t *testing.T) {
	r := newRig(t)
	svc := subscription("svc", "svc", "workers", false)
	r.setConfig(t, withSubscriptions(svc))
	requester := r.direct(t)
	var answers atomic.Int64
	if _, err := requester.Subscribe("_INBOX.test.*", func(m *nats.Msg) {
		if m.Header.Get("Status") == "503" && len(m.Data) == 0 {
			answers.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	flush(t, requester)
	// 100 waiting messages of 64 KiB are more than the stalled socket's
	// buffers take (the sender's grows to 4 MiB here, the receiver's stays
	// small while nothing reads), so some still wait when the kill comes.
	r.stalledWithBacklog(t, "SUB svc workers 1", "1", "svc", "_INBOX.test.1", 100)

	// The connection's writer may still move a message or two from the
	// queue into the socket until the socket's buffer is full, so how many
	// wait at the instant of the kill is not known beforehand: what is
	// asserted is that nothing waits after it, that every message is
	// accounted for, and that each one dropped as killed was answered.
	svc.KillSwitch.Engaged = true
	r.setConfig(t, withSubscriptions(svc))
	counts := r.statsOf(t, "1")
	if !counts.Balanced() || counts.Pending != 0 || counts.Dropped[pending.ReasonKilled] == 0 {
		t.Fatalf("after the kill: %+v; want nothing pending, and what waited dropped as killed", counts)
	}
	// A message the broker had sent before it learnt of the withdrawal may
	// still arrive and be dropped as killed (and answered) after the counts
	// above were read: each check reads them afresh.
	natstest.WaitFor(t, "a no-responders answer per killed request", func() bool {
		killed := r.statsOf(t, "1").Dropped[pending.ReasonKilled]
		return uint64(answers.Load()) == killed && r.side.NoRespondersSent() == killed
	})
}

// TestRequestToKilledRespondersFailsFast: once every responder of a subject
// in the pod is killed, a stock nats.go Request with a 10 s timeout returns
// ErrNoResponders, not ErrTimeout, and the requesting side counts it.
func TestRequestToKilledRespondersFailsFast(t *testing.T) {
	for _, tc := range []struct {
		name  string
		queue string
		n     int
	}{
		{"the only responder", "", 1},
		{"a queue group with every member killed", "workers", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			base := r.broker.NumSubscriptions()
			svc := subscription("svc", "svc.echo", tc.queue, false)
			r.setConfig(t, withSubscriptions(svc))
			for range tc.n {
				responder := r.app(t)
				if _, err := responder.QueueSubscribe("svc.echo", tc.queue, func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
					t.Fatal(err)
				}
				flush(t, responder)
			}
			requester := r.app(t) // in the same pod: its sidecar counts the answers
			if _, err := requester.Request("svc.echo", []byte("hi"), 10*time.Second); err != nil {
				t.Fatalf("before the kill: %v", err)
			}
			svc.KillSwitch.Engaged = true
			r.setConfig(t, withSubscriptions(svc))
			r.waitBrokerSubs(t, base, 1) // the requester's reply inbox only
			_, err := requester.Request("svc.echo", []byte("hi"), 10*time.Second)
			if !errors.Is(err, nats.ErrNoResponders) {
				t.Fatalf("Request to killed responders: %v, want %v", err, nats.ErrNoResponders)
			}
			if got := r.side.NoRespondersReceived(); got != 1 {
				t.Fatalf("NoRespondersReceived = %d, want 1", got)
			}
		})
	}
}

// autoKill is a non-essential subscription with an automatic kill switch.
func autoKill(name, subject string, auto meshconfig.AutoKillSwitch) meshconfig.SubscriptionPolicy {
	sp := subscription(name, subject, "", false)
	sp.Limits.MaxPendingMessages = 1000
	sp.KillSwitch.Auto = &auto
	return sp
}

// TestAutoKillSwitchTripsAndRecovers: a consumer that stops reading its
// socket trips its breaker (closed to open): its interest is withdrawn and
// what waited is dropped as killed. When it reads again, the breaker goes
// half-open after the cooldown, the trial passes, and it closes; delivery
// resumes.
func TestAutoKillSwitchTripsAndRecovers(t *testing.T) {
	r := newRig(t)
	base := r.broker.NumSubscriptions()
	r.setConfig(t, withSubscriptions(autoKill("feed", "feed", meshconfig.AutoKillSwitch{MaxPendingMessages: 20, WindowMillis: 1000, CooldownMillis: 1000})))
	stalled := r.raw(t)
	stalled.send("CONNECT {}\r\nSUB feed 1\r\nPING\r\n")
	if got := stalled.line(); got != "PONG" {
		t.Fatalf("got %q, want PONG", got)
	}
	r.waitBrokerSubs(t, base, 1)
	pub := r.direct(t)
	payload := bytes.Repeat([]byte("x"), 64<<10)
	for sent := 0; !r.side.KillSwitches()["feed"].Killed; sent++ {
		if sent > 2000 {
			t.Fatalf("not tripped after %d messages: %+v", sent, r.side.KillSwitches())
		}
		if err := pub.Publish("feed", payload); err != nil {
			t.Fatal(err)
		}
		flush(t, pub)
	}
	ks := r.side.KillSwitches()["feed"]
	if ks.State != breaker.Open || !strings.Contains(ks.Reason, "pending") {
		t.Fatalf("tripped: %+v, want open for pending", ks)
	}
	r.waitBrokerSubs(t, base, 0)

	// The application reads again: everything it is sent, from here on.
	var read atomic.Int64
	go func() {
		buf := make([]byte, 1<<20)
		for {
			_ = stalled.conn.SetReadDeadline(time.Now().Add(time.Minute))
			n, err := stalled.r.Read(buf)
			read.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	natstest.WaitFor(t, "half-open, then closed", func() bool { return r.side.KillSwitches()["feed"].Transitions["half-open->closed"] == 1 })
	ks = r.side.KillSwitches()["feed"]
	if ks.Killed || ks.State != breaker.Closed || ks.Transitions["closed->open"] != 1 || ks.Transitions["open->half-open"] != 1 {
		t.Fatalf("after recovery: %+v", ks)
	}
	r.waitBrokerSubs(t, base, 1)
	before := r.statsOf(t, "1").Delivered
	for range 10 {
		if err := pub.Publish("feed", []byte("again")); err != nil {
			t.Fatal(err)
		}
	}
	flush(t, pub)
	natstest.WaitFor(t, "delivery resumed", func() bool { return r.statsOf(t, "1").Delivered == before+10 })
	if c := r.statsOf(t, "1"); !c.Balanced() || c.Dropped[pending.ReasonKilled] == 0 {
		t.Fatalf("counts %+v: want balanced, with the backlog dropped as killed", c)
	}
}

// TestSlowResponderTripsOnReplyLatency: a responder whose replies take
// 50 ms, against a 20 ms threshold, trips once the window holds enough
// replies; then requests to it fail fast.
func TestSlowResponderTripsOnReplyLatency(t *testing.T) {
	r := newRig(t)
	r.setConfig(t, withSubscriptions(autoKill("slow", "slow.svc", meshconfig.AutoKillSwitch{MaxLatencyMillis: 20, WindowMillis: 10_000, CooldownMillis: 600_000})))
	responder := r.app(t)
	if _, err := responder.Subscribe("slow.svc", func(m *nats.Msg) {
		time.Sleep(50 * time.Millisecond)
		_ = m.Respond(m.Data)
	}); err != nil {
		t.Fatal(err)
	}
	flush(t, responder)
	requester := r.direct(t)
	for sent := 0; !r.side.KillSwitches()["slow"].Killed; sent++ {
		if sent > 200 {
			t.Fatalf("not tripped after %d slow replies: %+v", sent, r.side.KillSwitches()["slow"])
		}
		_, _ = requester.Request("slow.svc", nil, 10*time.Second) // the last may be cut off by the trip
	}
	ks := r.side.KillSwitches()["slow"]
	if ks.State != breaker.Open || !strings.Contains(ks.Reason, "reply latency") {
		t.Fatalf("tripped: %+v, want open for reply latency", ks)
	}
	natstest.WaitFor(t, "interest withdrawn", func() bool {
		_, err := requester.Request("slow.svc", nil, 10*time.Second)
		return errors.Is(err, nats.ErrNoResponders)
	})
}

// TestEssentialSubscriptionNeverTrips: an essential subscription with an
// automatic kill switch in its configuration (the API refuses that; a
// hand-written configuration may not) never trips: its stalled consumer
// overflows its queue instead, and other evaluations go on.
func TestEssentialSubscriptionNeverTrips(t *testing.T) {
	// A bounded send buffer: the stalled consumer's socket then takes a
	// few messages and no more, so its queue stays full (the kernel's
	// autotuning would go on taking them while the test looks).
	r := newRig(t, func(o *sidecar.Options) { o.AppSendBuffer = 64 << 10 })
	crit := autoKill("crit", "crit", meshconfig.AutoKillSwitch{MaxPendingMessages: 5, WindowMillis: 1000, CooldownMillis: 1000})
	crit.Essential = true
	crit.Limits.MaxPendingMessages = 50
	r.setConfig(t, withSubscriptions(crit))
	r.stalledWithBacklog(t, "SUB crit 1", "1", "crit", "", 50)
	evaluated := r.side.KillSwitchEvaluations()
	natstest.WaitFor(t, "ten more evaluations", func() bool { return r.side.KillSwitchEvaluations() >= evaluated+10 })
	ks := r.side.KillSwitches()["crit"]
	if ks.Killed || ks.Auto || len(ks.Transitions) != 0 {
		t.Fatalf("essential subscription: %+v; want never killed, no breaker", ks)
	}
	if c := r.statsOf(t, "1"); c.Pending != 50 || c.Dropped[pending.ReasonKilled] != 0 {
		t.Fatalf("counts %+v: want a full queue, nothing killed", c)
	}
}

// TestFastResponderDoesNotTrip: a responder that answers at once, faster
// than the sidecar's write of the request returns, has every answer
// matched to its request: none is left to count as unanswered once past
// the threshold, which would trip the breaker of a healthy responder.
func TestFastResponderDoesNotTrip(t *testing.T) {
	r := newRig(t)
	r.setConfig(t, withSubscriptions(autoKill("fast", "fast.svc", meshconfig.AutoKillSwitch{MaxLatencyMillis: 100, WindowMillis: 10_000, CooldownMillis: 600_000})))
	responder := r.app(t)
	if _, err := responder.Subscribe("fast.svc", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		t.Fatal(err)
	}
	flush(t, responder)
	requester := r.direct(t)
	for range 200 {
		if _, err := requester.Request("fast.svc", nil, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// An unanswered request counts once it is past the threshold, at an
	// evaluation (every 50 ms): wait for those of three thresholds.
	evaluated := r.side.KillSwitchEvaluations()
	natstest.WaitFor(t, "evaluations over 300ms", func() bool { return r.side.KillSwitchEvaluations() >= evaluated+6 })
	if ks := r.side.KillSwitches()["fast"]; ks.Killed || ks.State != breaker.Closed {
		t.Fatalf("a responder answering at once: %+v, want closed", ks)
	}
}

// TestSUBsFollowTheirSubscriptionAcrossConfigurations: a SUB made before
// the Subscription that covers it (kubectl apply on a running pod) is under
// that Subscription from the configuration on: its kill switch withdraws
// and restores the SUB's interest, and a rename keeps it under the new
// name. What it counted before stays with the policy it was counted under,
// and each policy's totals balance (nothing was pending at the changes). (A SUB kept the policy it was made
// under, so a kill switch never reached SUBs older than its Subscription.)
func TestSUBsFollowTheirSubscriptionAcrossConfigurations(t *testing.T) {
	r := newRig(t)
	base := r.broker.NumSubscriptions()
	app := r.app(t)
	var late, sentinel atomic.Int64
	if _, err := app.Subscribe("late.x", func(*nats.Msg) { late.Add(1) }); err != nil {
		t.Fatal(err)
	}
	sentinelSub, err := app.Subscribe("sentinel", func(*nats.Msg) { sentinel.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	flush(t, app)
	pub := r.direct(t)
	// send publishes n messages to late.x and a sentinel, and waits for the
	// sentinel: whatever late.x's SUB gets of them it has got by then.
	send := func(n int) {
		t.Helper()
		want := sentinel.Load() + 1
		for range n {
			if err := pub.Publish("late.x", []byte("m")); err != nil {
				t.Fatal(err)
			}
		}
		if err := pub.Publish("sentinel", nil); err != nil {
			t.Fatal(err)
		}
		natstest.WaitFor(t, "the sentinel", func() bool { return sentinel.Load() == want })
	}
	send(3) // under no Subscription
	killed := subscription("late", "late.>", "", false)
	killed.KillSwitch.Engaged, killed.KillSwitch.Reason = true, "incident"
	for _, step := range []struct {
		name        string
		subs        []meshconfig.SubscriptionPolicy
		delivered   int64 // late.x's messages received, all told
		upstreamFor int   // upstream subscriptions for late.x
	}{
		{"a new Subscription, killed, covers the SUB", []meshconfig.SubscriptionPolicy{killed}, 3, 0},
		{"released", []meshconfig.SubscriptionPolicy{subscription("late", "late.>", "", false)}, 8, 1},
		{"renamed, and killed under its new name", []meshconfig.SubscriptionPolicy{func() meshconfig.SubscriptionPolicy {
			s := killed
			s.Name = "later"
			return s
		}()}, 8, 0},
		{"gone: the SUB is under none, and alive", nil, 13, 1},
	} {
		r.setConfig(t, withSubscriptions(step.subs...))
		r.waitBrokerSubs(t, base, uint32(step.upstreamFor)+1) // the sentinel's and late.x's, if it is alive
		send(5)
		if got := late.Load(); got != step.delivered {
			t.Fatalf("%s: late.x got %d messages, want %d", step.name, got, step.delivered)
		}
		if n := r.side.Interest().Subscriptions() - 1; n != step.upstreamFor { // less sentinel's
			t.Fatalf("%s: %d upstream subscriptions for late.x, want %d", step.name, n, step.upstreamFor)
		}
	}
	if err := sentinelSub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	flush(t, app)
	totals := r.side.PolicyTotals()
	for policy, want := range map[string]struct{ arrived, delivered uint64 }{
		"":      {3 + 5 + 5, 3 + 5 + 5}, // late.x's before and after, and the five sentinels
		"late":  {5, 5},                 // the killed SUB gets nothing: its interest was withdrawn
		"later": {0, 0},
	} {
		got := totals[policy]
		if got.Arrived != want.arrived || got.Delivered != want.delivered || !got.Balanced() {
			t.Errorf("policy %q totals %+v, want %d arrived and %d delivered, balanced", policy, got, want.arrived, want.delivered)
		}
	}
}
