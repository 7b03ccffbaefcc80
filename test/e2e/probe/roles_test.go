package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

// startRole runs a probe of role against url until the test ends, and
// returns it and a function that stops it.
func startRole(t *testing.T, roleName string, o options) (*probe, context.CancelFunc) {
	t.Helper()
	o.reportInterval = time.Hour
	p := newProbe(roleName, o, newRole(roleName, o))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.runRole(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", roleName, err)
		}
	}
	t.Cleanup(stop)
	return p, stop
}

// TestRolesAgainstABroker runs every role against a plain nats-server, as
// they would run against their pods' sidecars: the publisher's messages
// all reach the subscriber, the requester is answered, and fails fast once
// the responder is gone.
func TestRolesAgainstABroker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	srv := natstest.StartBroker(t, nil)
	url := srv.ClientURL()
	base := options{natsURL: url, rate: 500, interval: 5 * time.Millisecond, timeout: 200 * time.Millisecond}
	with := func(id, subject string) options { o := base; o.id, o.subject = id, subject; return o }

	sub, _ := startRole(t, probestats.RoleSubscriber, with("sub", "e2e.stream"))
	natstest.WaitFor(t, "the subscriber subscribes", sub.ready)
	pub, stopPub := startRole(t, probestats.RolePublisher, with("pub", "e2e.stream"))
	_, stopResponder := startRole(t, probestats.RoleResponder, with("resp", "e2e.rpc"))
	req, _ := startRole(t, probestats.RoleRequester, with("req", "e2e.rpc"))

	natstest.WaitFor(t, "200 messages and 10 answers", func() bool {
		return sub.stats(false).Subscriber.Received >= 200 && req.stats(false).Requester.OK >= 10
	})
	stopPub()
	published := pub.stats(true).Publisher.Published
	natstest.WaitFor(t, fmt.Sprintf("all %d published messages received", published), func() bool {
		return sub.stats(false).Subscriber.Received >= published
	})
	s := sub.stats(false).Subscriber
	if s.Received != published || s.Lost != 0 || s.Duplicates != 0 || s.Publishers["pub"].Highest != uint64(published) {
		t.Fatalf("subscriber %+v after %d published", s, published)
	}

	killed := time.Now()
	stopResponder()
	natstest.WaitFor(t, "requests fail fast without the responder", func() bool {
		_, ok := req.stats(false).Requester.FirstTransitionAfter(probestats.OutcomeFastFailure, killed)
		return ok
	})
	r := req.stats(false).Requester
	if r.State() != probestats.OutcomeFastFailure || r.Transitions[0].To != probestats.OutcomeOK {
		t.Fatalf("requester transitions %+v, want ok then fast-failure", r.Transitions)
	}
	line, err := probestats.FormatLine(req.stats(true))
	if err != nil {
		t.Fatal(err)
	}
	if back, err := probestats.ParseLine(line); err != nil || !back.Final || back.Requester.FastFailures == 0 {
		t.Fatalf("the final line %q read back as %+v, %v", line, back, err)
	}
}

// TestFirstConnectRetriesUntilTheSidecarListens starts the probe before
// its "sidecar" (a broker on a port that is free at first).
func TestFirstConnectRetriesUntilTheSidecarListens(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	port := natstest.FreePort(t)
	o := options{natsURL: fmt.Sprintf("nats://127.0.0.1:%d", port), id: "late", subject: "e2e.late"}
	sub, _ := startRole(t, probestats.RoleSubscriber, o)
	natstest.WaitFor(t, "a failed first attempt", func() bool { return sub.stats(false).ConnectAttempts >= 2 })
	if sub.ready() {
		t.Fatal("ready before connecting")
	}
	startBrokerOn(t, port)
	natstest.WaitFor(t, "connected and subscribed once the broker listens", sub.ready)
}

func startBrokerOn(t *testing.T, port int) {
	t.Helper()
	natstest.StartBroker(t, &server.Options{Port: port})
}
