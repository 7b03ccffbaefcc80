package sidecar_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar"
)

// TestRepliesCannotBeSnooped: two pods, each with its sidecar, on one
// broker. The responder learns the requester's reply subject with each
// request and subscribes to its inbox pattern, as the ACL lets it (a
// literal token after _INBOX). It receives none of the requester's
// replies: every inbox the responder names is translated into its own
// pod's inbox space. Before the translation it received every one of them.
//
// The sentinel: after its replies, the responder publishes on
// snoop.sentinel, which the snooping connection subscribes to after its
// inbox patterns. Both go up on the responder's sidecar's one broker
// connection and come back on it in that order, and the sidecar writes a
// connection's SUBs in the order they were made: once the sentinel is in,
// every reply the inbox patterns matched is already pending on them.
func TestRepliesCannotBeSnooped(t *testing.T) {
	broker := natstest.StartBroker(t, nil)
	requesterPod := startRig(t, broker, natstest.DialUpstream(t, broker.ClientURL()))
	responderPod := startRig(t, broker, natstest.DialUpstream(t, broker.ClientURL()))
	requesterCfg := withSubscriptions()
	requesterCfg.Access.Mode = meshconfig.AccessEnforce
	requesterPod.setConfig(t, requesterCfg)
	responderCfg := withSubscriptions(subscription("svc", "svc", "", true), subscription("sentinel", "snoop.sentinel", "", true))
	responderCfg.Access.Mode = meshconfig.AccessEnforce
	responderPod.setConfig(t, responderCfg)

	responder, snooper := responderPod.app(t), responderPod.app(t)
	replySubjects := make(chan string, 100)
	if _, err := responder.Subscribe("svc", func(m *nats.Msg) {
		replySubjects <- m.Reply
		_ = m.Respond([]byte("secret answer"))
	}); err != nil {
		t.Fatal(err)
	}
	flush(t, responder)
	requester := requesterPod.app(t)
	request := func() {
		t.Helper()
		if reply, err := requester.Request("svc", []byte("q"), 10*time.Second); err != nil || string(reply.Data) != "secret answer" {
			t.Fatalf("request: %v, %v", reply, err)
		}
	}

	// The first request shows the responder the requester's inbox.
	request()
	seen := receive(t, "the first request's reply subject", replySubjects)
	tokens := strings.Split(seen, ".")
	if tokens[0] != "_INBOX" || len(tokens) < 3 {
		t.Fatalf("reply subject %q, want _INBOX.<token>.…", seen)
	}
	if space := requesterPod.side.InboxSpace(); !strings.HasPrefix(seen, space+".") {
		t.Fatalf("the requester's reply subject %q is not in its pod's inbox space %q", seen, space)
	}
	// Every pattern the reply subject suggests, each a literal after _INBOX.
	var snoops []*nats.Subscription
	for i := 2; i <= len(tokens)-1; i++ {
		sub, err := snooper.SubscribeSync(strings.Join(tokens[:i], ".") + ".>")
		if err != nil {
			t.Fatal(err)
		}
		snoops = append(snoops, sub)
	}
	sentinelSub, err := snooper.SubscribeSync("snoop.sentinel")
	if err != nil {
		t.Fatal(err)
	}
	flush(t, snooper)

	const more = 3
	for range more {
		request()
		<-replySubjects
	}
	if err := responder.Publish("snoop.sentinel", []byte(sentinel)); err != nil {
		t.Fatal(err)
	}
	flush(t, responder)
	if _, err := sentinelSub.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("the sentinel: %v", err)
	}
	for _, sub := range snoops {
		if n, _, err := sub.Pending(); err != nil || n != 0 {
			t.Errorf("the snooper's SUB %s received %d of the requester's replies (%v)", sub.Subject, n, err)
		}
	}
	// What the snooper asked for went up in its own pod's space.
	for _, s := range responderPod.side.Stats() {
		if strings.HasPrefix(s.Key.Subject, "_INBOX.") && !strings.HasPrefix(s.Key.Subject, responderPod.side.InboxSpace()+".") {
			t.Errorf("the snooper's inbox SUB went up as %q, outside its pod's inbox space %q", s.Key.Subject, responderPod.side.InboxSpace())
		}
	}
}

// TestInboxesAreTranslatedBothWays: an application's inbox SUB and the
// reply subject of its request go up in its pod's inbox space, and the
// reply comes back under the application's own inbox prefix, for _INBOX
// and for the pod's custom prefix (Access.InboxPrefix), for old-style
// requests (one inbox per request) and new-style ones (a wildcard
// subscription for all replies).
func TestInboxesAreTranslatedBothWays(t *testing.T) {
	tests := []struct {
		name, prefix string // prefix: the application's custom inbox prefix, if any
		opts         []nats.Option
		oldStyle     bool
	}{
		{name: "_INBOX, new style"},
		{name: "_INBOX, old style", oldStyle: true},
		{name: "custom prefix", prefix: "billing.inbox", opts: []nats.Option{nats.CustomInboxPrefix("billing.inbox")}},
		{name: "custom prefix under _INBOX", prefix: "_INBOX.billing", opts: []nats.Option{nats.CustomInboxPrefix("_INBOX.billing")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			cfg := withSubscriptions()
			cfg.Access.Mode = meshconfig.AccessEnforce
			cfg.Access.InboxPrefix = tc.prefix
			r.setConfig(t, cfg)
			opts := tc.opts
			if tc.oldStyle {
				opts = append(opts, nats.UseOldRequestStyle())
			}
			app := r.app(t, opts...)
			outside := r.direct(t)
			replyTo := make(chan string, 1)
			if _, err := outside.Subscribe("svc", func(m *nats.Msg) {
				replyTo <- m.Reply
				_ = m.Respond([]byte("answer"))
			}); err != nil {
				t.Fatal(err)
			}
			flush(t, outside)
			reply, err := app.Request("svc", nil, 10*time.Second)
			if err != nil || string(reply.Data) != "answer" {
				t.Fatalf("request: %v, %v", reply, err)
			}
			appPrefix := nats.InboxPrefix[:len(nats.InboxPrefix)-1]
			if tc.prefix != "" {
				appPrefix = tc.prefix
			}
			if !strings.HasPrefix(reply.Subject, appPrefix+".") {
				t.Fatalf("the reply reached the application on %q, want it under its prefix %q", reply.Subject, appPrefix)
			}
			space := r.side.InboxSpace()
			if up := receive(t, "the reply subject", replyTo); !strings.HasPrefix(up, space+".") || !strings.HasSuffix(up, strings.TrimPrefix(reply.Subject, appPrefix)) {
				t.Fatalf("the request's reply subject at the broker is %q, want the application's %q in the pod's space %q", up, reply.Subject, space)
			}
		})
	}
}

// TestInboxSpaceWaitsForTheCredential: with a credential from the
// operator, the pod's inbox space is the one it names (the broker pins the
// credential's subscriptions to it). Until the credential arrived, /readyz
// reports it (not required, as the broker), a request is refused and
// counted, the connection kept, and an inbox SUB waits, unregistered: once
// the credential arrived it is registered in the credential's space, and
// the application's requests get their replies on it.
func TestInboxSpaceWaitsForTheCredential(t *testing.T) {
	const podSpace = "_INBOX.abcdefghijklmnopqrst"
	arrived := make(chan struct{})
	r := newRig(t, func(o *sidecar.Options) {
		o.InboxPrefix = func() (string, bool) {
			select {
			case <-arrived:
				return podSpace, true
			default:
				return "", false
			}
		}
	})
	cfg := withSubscriptions()
	cfg.Access.Mode = meshconfig.AccessEnforce
	r.setConfig(t, cfg)
	if code, body := readyz(t, r.side); code != 200 || !strings.Contains(body, "[-]inbox the broker credential") || !strings.Contains(body, "(not required)") {
		t.Fatalf("/readyz before the credential: %d %q", code, body)
	}
	app, errs := r.appWithErrors(t)
	early := make(chan *nats.Msg, 1)
	if _, err := app.Subscribe("_INBOX.early.*", func(m *nats.Msg) { early <- m }); err != nil {
		t.Fatal(err)
	}
	if err := app.PublishRequest("svc", "_INBOX.early.1", nil); err != nil {
		t.Fatal(err)
	}
	flush(t, app)
	natstest.WaitFor(t, "the request refused", func() bool { return len(errs.all()) == 1 })
	if e := errs.all()[0]; !strings.Contains(e, `Publish to "svc"`) || !strings.Contains(e, "inbox space is not known yet") {
		t.Fatalf("refusal %q", e)
	}
	if n := r.side.InboxPending(); n != 1 {
		t.Fatalf("InboxPending = %d, want 1", n)
	}

	close(arrived)
	if code, body := readyz(t, r.side); code != 200 || !strings.Contains(body, "[+]inbox ok") {
		t.Fatalf("/readyz once the credential arrived: %d %q", code, body)
	}
	outside := r.direct(t)
	if _, err := outside.Subscribe("svc", func(m *nats.Msg) { _ = m.Respond([]byte(m.Reply)) }); err != nil {
		t.Fatal(err)
	}
	flush(t, outside)
	// The SUB that waited is in the credential's space now.
	if err := app.PublishRequest("svc", "_INBOX.early.2", nil); err != nil {
		t.Fatal(err)
	}
	if m := receive(t, "the reply on the SUB that waited", early); m.Subject != "_INBOX.early.2" || string(m.Data) != podSpace+".early.2" {
		t.Fatalf("reply on %q: %q; want on _INBOX.early.2, sent to %s.early.2", m.Subject, m.Data, podSpace)
	}
	reply, err := app.Request("svc", nil, 10*time.Second)
	if err != nil || !strings.HasPrefix(string(reply.Data), podSpace+".") {
		t.Fatalf("request: %v, %v; want the reply subject in %s", reply, err, podSpace)
	}
	if r.side.InboxSpace() != podSpace || !app.IsConnected() || len(errs.all()) != 1 {
		t.Fatalf("inbox space %q, connected %v, errors %v", r.side.InboxSpace(), app.IsConnected(), errs.all())
	}
}

// readyz returns the sidecar's /readyz?verbose answer.
func readyz(t *testing.T, side *sidecar.Server) (int, string) {
	t.Helper()
	srv := httptest.NewServer(side.HealthHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/readyz?verbose")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}
