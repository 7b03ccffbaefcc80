package sidecar_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar"
	"github.com/weighstation/weighstation/sidecar/policy"
)

// aclConfig: the pod consumes orders.* and may not publish to audit.>.
func aclConfig(mode string) meshconfig.PodConfig {
	cfg := withSubscriptions(subscription("orders", "orders.*", "", true))
	cfg.Topics = []meshconfig.TopicPolicy{{Name: "audit", Subject: "audit.>", MaxMessageBytes: 1 << 20, MayPublish: false}}
	cfg.Access.Mode = mode
	return cfg
}

// aclAttempts are the operations both modes try, and the rule each breaks.
var aclAttempts = []struct {
	op      sidecar.Operation
	subject string
	rule    policy.Rule
}{
	{sidecar.OpSubscribe, "payments.eu", policy.RuleNotCovered},
	{sidecar.OpSubscribe, "_INBOX.>", policy.RuleInboxWildcard},
	{sidecar.OpSubscribe, "$SYS.>", policy.RuleDollar},
	{sidecar.OpPublish, "audit.login", policy.RuleNotPublisher},
	{sidecar.OpPublish, "$KV.config.x", policy.RuleDollar},
}

func TestACLEnforce(t *testing.T) {
	r := newRig(t)
	r.setConfig(t, aclConfig(meshconfig.AccessEnforce))
	app, errs := r.appWithErrors(t)
	outside := r.direct(t)
	var leaked atomic.Int64
	countAttemptedPublishes(t, outside, &leaked)
	flush(t, outside)
	for _, a := range aclAttempts {
		var err error
		if a.op == sidecar.OpSubscribe {
			_, err = app.Subscribe(a.subject, func(*nats.Msg) { leaked.Add(1) })
		} else {
			err = app.Publish(a.subject, []byte("x"))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	flush(t, app)
	natstest.WaitFor(t, "an error per refusal", func() bool { return len(errs.all()) == len(aclAttempts) })
	for i, a := range aclAttempts {
		verb := map[sidecar.Operation]string{sidecar.OpPublish: "Publish", sidecar.OpSubscribe: "Subscription"}[a.op]
		want := `permissions violation for ` + strings.ToLower(verb) + ` to "` + strings.ToLower(a.subject) + `": ` + strings.ToLower(a.rule.Explain())
		if got := strings.ToLower(errs.all()[i]); got != "nats: permissions violation: "+want {
			t.Errorf("error %d: %q, want %q", i, got, "nats: permissions violation: "+want)
		}
	}
	// Nothing the refused SUBs asked for arrives; the connection is kept and
	// what the pod may do still works, requests included (its own inbox).
	for _, subject := range []string{"payments.eu", "$SYS.x"} {
		if err := outside.Publish(subject, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	responder := r.direct(t)
	if _, err := responder.Subscribe("svc", func(m *nats.Msg) { _ = m.Respond([]byte("pong")) }); err != nil {
		t.Fatal(err)
	}
	flush(t, responder, outside)
	if !app.IsConnected() {
		t.Fatal("the application was disconnected")
	}
	if reply, err := app.Request("svc", nil, 10*time.Second); err != nil || string(reply.Data) != "pong" {
		t.Fatalf("a request from the pod: %v, %v", reply, err)
	}
	flush(t, app, outside)
	if n := leaked.Load(); n != 0 {
		t.Fatalf("%d messages crossed a refused permission", n)
	}
	want := map[sidecar.AccessKey]uint64{}
	for _, a := range aclAttempts {
		want[sidecar.AccessKey{Op: a.op, Rule: a.rule}]++
	}
	assertDenials(t, r.side.AccessDenials(), want)
	// The publish refusals are in the Topics' balances too.
	counters := r.side.TopicCounters()
	if a, d := counters["audit"], counters[""]; a.RefusedAccess != 1 || d.RefusedAccess != 1 || !a.Balanced() || !d.Balanced() {
		t.Fatalf("topic counters: audit %+v, default %+v; want one access refusal each, balanced", a, d)
	}
}

func TestACLAudit(t *testing.T) {
	r := newRig(t)
	r.setConfig(t, aclConfig(meshconfig.AccessAudit))
	app, errs := r.appWithErrors(t)
	outside := r.direct(t)
	var published atomic.Int64
	countAttemptedPublishes(t, outside, &published)
	var received atomic.Int64
	for _, a := range aclAttempts {
		if a.op == sidecar.OpSubscribe {
			if _, err := app.Subscribe(a.subject, func(*nats.Msg) { received.Add(1) }); err != nil {
				t.Fatal(err)
			}
		}
	}
	flush(t, app, outside)
	for range 2 { // the second time is counted, not logged again
		for _, a := range aclAttempts {
			if a.op == sidecar.OpPublish {
				if err := app.Publish(a.subject, []byte("x")); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := outside.Publish("payments.eu", []byte("x")); err != nil {
		t.Fatal(err)
	}
	flush(t, app, outside)
	natstest.WaitFor(t, "audit mode lets everything through", func() bool { return published.Load() == 4 && received.Load() == 1 })
	if e := errs.all(); len(e) != 0 {
		t.Fatalf("audit mode sent errors: %v", e)
	}
	want := map[sidecar.AccessKey]uint64{}
	for _, a := range aclAttempts {
		n := uint64(1)
		if a.op == sidecar.OpPublish {
			n = 2
		}
		want[sidecar.AccessKey{Op: a.op, Rule: a.rule, Audit: true}] += n
	}
	assertDenials(t, r.side.AccessDenials(), want)

	// Reserved subjects stay closed in audit mode.
	if _, err := app.Subscribe("$WEIGHSTATION.x", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	flush(t, app)
	natstest.WaitFor(t, "the reserved subject refused", func() bool { return len(errs.all()) == 1 })
	if got := r.side.AccessDenials()[sidecar.AccessKey{Op: sidecar.OpSubscribe, Rule: policy.RuleReserved}]; got != 1 {
		t.Fatalf("reserved refusals %d, want 1", got)
	}
}

// TestReplyToReceivedRequestIsAllowedOnce: the pod may not publish to
// audit.>, but it may answer a request it received whose reply subject is
// there, once.
func TestReplyToReceivedRequestIsAllowedOnce(t *testing.T) {
	r := newRig(t)
	r.setConfig(t, aclConfig(meshconfig.AccessEnforce))
	app, errs := r.appWithErrors(t)
	requests := make(chan *nats.Msg, 1)
	if _, err := app.Subscribe("orders.eu", func(m *nats.Msg) { requests <- m }); err != nil {
		t.Fatal(err)
	}
	flush(t, app)
	outside := r.direct(t)
	var replies atomic.Int64
	if _, err := outside.Subscribe("audit.reply.1", func(*nats.Msg) { replies.Add(1) }); err != nil {
		t.Fatal(err)
	}
	flush(t, outside)
	if err := outside.PublishRequest("orders.eu", "audit.reply.1", []byte("q")); err != nil {
		t.Fatal(err)
	}
	flush(t, outside)
	req := <-requests
	for range 2 {
		if err := req.Respond([]byte("a")); err != nil {
			t.Fatal(err)
		}
	}
	flush(t, app, outside)
	natstest.WaitFor(t, "one reply through, one refused", func() bool { return replies.Load() == 1 && len(errs.all()) == 1 })
	if got := r.side.RepliesAllowed(); got != 1 {
		t.Fatalf("RepliesAllowed = %d, want 1", got)
	}
	assertDenials(t, r.side.AccessDenials(), map[sidecar.AccessKey]uint64{{Op: sidecar.OpPublish, Rule: policy.RuleNotPublisher}: 1})
}

// countAttemptedPublishes counts, outside the pod, what arrives on the
// subjects aclAttempts publish to.
func countAttemptedPublishes(t *testing.T, outside *nats.Conn, n *atomic.Int64) {
	t.Helper()
	for _, a := range aclAttempts {
		if a.op == sidecar.OpPublish {
			if _, err := outside.Subscribe(a.subject, func(*nats.Msg) { n.Add(1) }); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func assertDenials(t *testing.T, got, want map[sidecar.AccessKey]uint64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("denials %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("denials %v, want %v", got, want)
		}
	}
}
