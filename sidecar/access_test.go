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

// TestReplyAllowanceCoversInboxesOnly: the pod may publish nowhere (a
// Topic ">" whose publishers exclude it), but it may answer a request it
// received, once, when the request's reply subject is an inbox
// ("_INBOX.<token>.…", as every sidecar's translated inboxes are). A
// requester that names another subject as its reply subject cannot steer
// the answer there: a Topic the pod may not publish to, a '$' subject
// (JetStream's API), a subject reserved for weighstation, or an "_INBOX"
// subject without a token and more after it; the publish rules judge those
// replies, which are counted.
func TestReplyAllowanceCoversInboxesOnly(t *testing.T) {
	tests := []struct {
		reply   string
		allowed bool
		rule    policy.Rule // the rule that refuses it otherwise
	}{
		{"_INBOX.requester.1", true, policy.RuleNotPublisher},
		{"_INBOX.abcdefghijklmnopqrst.nuid.7", true, policy.RuleNotPublisher},
		{"audit.reply.1", false, policy.RuleNotPublisher},
		{"orders.secret", false, policy.RuleNotPublisher},
		{"$JS.API.STREAM.DELETE.orders", false, policy.RuleDollar},
		{"$WEIGHSTATION.x", false, policy.RuleReserved},
		{"_INBOX.requester", false, policy.RuleNotPublisher},
	}
	for _, tc := range tests {
		t.Run(tc.reply, func(t *testing.T) {
			r := newRig(t)
			cfg := aclConfig(meshconfig.AccessEnforce)
			cfg.Topics = append(cfg.Topics, meshconfig.TopicPolicy{Name: "closed", Subject: ">", MaxMessageBytes: 1 << 20, MayPublish: false})
			r.setConfig(t, cfg)
			app, errs := r.appWithErrors(t)
			requests := make(chan *nats.Msg, 1)
			if _, err := app.Subscribe("orders.eu", func(m *nats.Msg) { requests <- m }); err != nil {
				t.Fatal(err)
			}
			flush(t, app)
			got := r.countOutside(t, tc.reply)
			outside := r.direct(t)
			if err := outside.PublishRequest("orders.eu", tc.reply, []byte("q")); err != nil {
				t.Fatal(err)
			}
			flush(t, outside)
			req := receive(t, "the request", requests)
			for range 2 {
				if err := req.Respond([]byte("a")); err != nil {
					t.Fatal(err)
				}
			}
			flush(t, app)
			// The refusals are the sentinel: once they arrived, so did
			// what went through before them.
			wantDelivered, wantRefused := 0, 2
			if tc.allowed {
				wantDelivered, wantRefused = 1, 1
			}
			natstest.WaitFor(t, "the refusals", func() bool { return len(errs.all()) == min(wantRefused, 1) })
			natstest.WaitFor(t, "the replies let through", func() bool { return int(got.Load()) == wantDelivered })
			if e := errs.all()[0]; !strings.Contains(e, tc.rule.Explain()) {
				t.Fatalf("refusal %q, want it to say %q", e, tc.rule.Explain())
			}
			outsideInbox := uint64(0)
			if !tc.allowed {
				outsideInbox = 1 // the first reply: the second answers nothing
			}
			if allowed, outside := r.side.RepliesAllowed(), r.side.RepliesOutsideInbox(); allowed != uint64(wantDelivered) || outside != outsideInbox {
				t.Fatalf("RepliesAllowed = %d, RepliesOutsideInbox = %d; want %d, %d", allowed, outside, wantDelivered, outsideInbox)
			}
			assertDenials(t, r.side.AccessDenials(), map[sidecar.AccessKey]uint64{{Op: sidecar.OpPublish, Rule: tc.rule}: uint64(wantRefused)})
		})
	}
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
