package sidecar

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar/pending"
	"github.com/weighstation/weighstation/sidecar/protocol"
	"github.com/weighstation/weighstation/sidecar/upstream"
)

// The steps of conn.subscribe, with something else between them: a SUB
// is listed in its connection (listSub) before Server.subscribe routes it
// and takes its upstream interest.

// connectedServer starts a broker and a sidecar in audit mode with cfg's
// Subscriptions, connects one raw client and returns the sidecar's side
// of it.
func connectedServer(t *testing.T, subs ...meshconfig.SubscriptionPolicy) (*Server, *conn) {
	t.Helper()
	broker := natstest.StartBroker(t, nil)
	opts := DefaultOptions
	opts.Listen = "127.0.0.1:0"
	s, err := New(natstest.DialUpstream(t, broker.ClientURL()), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.SetConfig(auditConfig(subs...)); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if _, err := nc.Write([]byte("CONNECT {}\r\nPING\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(nc)
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(l, "PONG") {
			break
		}
	}
	for _, c := range s.connections() {
		return s, c
	}
	t.Fatal("no connection")
	return nil, nil
}

func auditConfig(subs ...meshconfig.SubscriptionPolicy) meshconfig.PodConfig {
	cfg := meshconfig.DefaultConfig(meshconfig.DefaultPolicy)
	cfg.Access.Mode = meshconfig.AccessAudit
	cfg.Subscriptions = subs
	return cfg
}

// listSub is conn.subscribe's first step: a SUB on subject, listed in c.
func listSub(c *conn, sid, subject string) *localSub {
	limits, essential, name := c.srv.subscriptionPolicy(subject)
	ls := &localSub{conn: c, sid: sid, subject: subject, key: upstream.Key{Subject: subject},
		queue: pending.New(limits).WithConnectionLimit(c.pendingLimit).WithBudget(c.srv.budget, essential)}
	ls.binding.Store(&subBinding{policy: name, latency: c.srv.latenciesFor(name)})
	c.mu.Lock()
	c.subs[sid] = ls
	c.addToOrderLocked(ls) // order is read without mu (fill)
	c.mu.Unlock()
	return ls
}

// TestAKillSwitchReleasedDuringASUBLeavesItOneReference: a kill switch
// released between the SUB's two steps leaves it to the subscribe, which
// takes the one reference on its interest; the UNSUB gives it back. (The
// release took one, and the subscribe another: after the UNSUB the broker
// went on sending, and no kill could withdraw it.)
func TestAKillSwitchReleasedDuringASUBLeavesItOneReference(t *testing.T) {
	p := meshconfig.SubscriptionPolicy{Name: "p", Subject: "p.>",
		Limits: meshconfig.Limits{MaxPendingMessages: 10_000, MaxPendingBytes: 32 << 20, Overflow: "DropNewest"}}
	p.KillSwitch.Engaged = true
	s, c := connectedServer(t, p)
	ls := listSub(c, "1", "p.x")
	p.KillSwitch.Engaged = false
	if err := s.SetConfig(auditConfig(p)); err != nil {
		t.Fatal(err)
	}
	if err := s.subscribe(ls); err != nil {
		t.Fatal(err)
	}
	if refs := s.interest.Refs(ls.key); refs != 1 {
		t.Fatalf("the SUB holds %d references on its upstream interest, want 1", refs)
	}
	c.removeSub(ls, pending.ReasonUnsubscribed)
	if n := s.interest.Subscriptions(); n != 0 {
		t.Fatalf("after its UNSUB the sidecar holds %d upstream subscriptions, want 0", n)
	}
}

// TestASUBWhoseConnectionClosedMeanwhileIsNotRouted: a connection closed
// between the SUB's two steps removed the SUB; the subscribe that follows
// neither routes it nor takes its interest, which nothing would give back.
func TestASUBWhoseConnectionClosedMeanwhileIsNotRouted(t *testing.T) {
	s, c := connectedServer(t)
	ls := listSub(c, "1", "q.x")
	c.close()
	if err := s.subscribe(ls); err != nil {
		t.Fatal(err)
	}
	s.router.mu.RLock()
	routes := len(s.router.routes)
	s.router.mu.RUnlock()
	if n := s.interest.Subscriptions(); n != 0 || routes != 0 {
		t.Fatalf("after the SUB of a closed connection: %d upstream subscriptions and %d routes, want none", n, routes)
	}
	if totals := s.PolicyTotals()[""]; !totals.Balanced() {
		t.Fatalf("totals %+v do not balance", totals)
	}
}

// TestASUBReadAfterItsConnectionClosedIsRefused: the reader goes on with
// the commands it had read after its writer (a failed write) or a slow
// consumer's control replies closed the connection; a SUB among them is
// refused, since the close's removal of the SUBs has run. (It was routed
// and kept its upstream interest for ever.)
func TestASUBReadAfterItsConnectionClosedIsRefused(t *testing.T) {
	s, c := connectedServer(t)
	c.close()
	cmd := protocol.Command{Op: protocol.OpSub, Subject: []byte("leak.x"), SID: []byte("1")}
	if c.subscribe(&cmd) {
		t.Fatal("the SUB was taken")
	}
	s.router.mu.RLock()
	routes := len(s.router.routes)
	s.router.mu.RUnlock()
	if n := s.interest.Subscriptions(); n != 0 || routes != 0 {
		t.Fatalf("%d upstream subscriptions and %d routes, want none", n, routes)
	}
}
