package sidecar_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar"
	"github.com/weighstation/weighstation/sidecar/pending"
)

// backlog is how many 1 KiB messages the stuck application holds in its
// sidecar: far more than the kernel buffers of its connection take.
const backlog, backlogSize = 1000, 1 << 10

// stuckApp is an application that subscribed to "work", under the
// Subscription "work", and stopped reading with backlog messages for it
// waiting in the sidecar. It is a raw socket, so that no client library
// reads behind the test's back.
type stuckApp struct {
	conn net.Conn
	in   *bufio.Reader
}

func newStuckApp(t *testing.T) (*rig, *stuckApp) {
	t.Helper()
	r := newRig(t, func(o *sidecar.Options) { o.AppSendBuffer = 8 << 10 })
	cfg := configWith()
	cfg.Subscriptions = []meshconfig.SubscriptionPolicy{{Name: "work", Subject: "work", Essential: true,
		Limits: meshconfig.Limits{MaxPendingMessages: 10 * backlog, MaxPendingBytes: 32 << 20, Overflow: meshconfig.OverflowDropNewest}}}
	if err := r.side.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", r.side.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	// Every read of the test is bounded.
	if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	app := &stuckApp{conn: conn, in: bufio.NewReader(conn)}
	if _, err := app.in.ReadString('\n'); err != nil { // INFO
		t.Fatal(err)
	}
	if _, err := fmt.Fprint(conn, "CONNECT {\"verbose\":false,\"protocol\":1}\r\nSUB work 1\r\nPING\r\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := app.in.ReadString('\n'); err != nil || !strings.HasPrefix(line, "PONG") {
		t.Fatalf("after SUB: %q, %v", line, err)
	}
	out := r.direct(t)
	payload := []byte(strings.Repeat("x", backlogSize))
	for range backlog {
		if err := out.Publish("work", payload); err != nil {
			t.Fatal(err)
		}
	}
	flush(t, out)
	natstest.WaitFor(t, "the backlog waits in the sidecar", func() bool {
		c := r.side.PolicyTotals()["work"]
		return c.Arrived == backlog && c.Pending > 0
	})
	return r, app
}

// read takes messages until n arrived, and returns the other lines it saw.
func (a *stuckApp) read(t *testing.T, n int) []string {
	t.Helper()
	var others []string
	for got := 0; got < n; {
		line, err := a.in.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d of %d messages: %v", got, n, err)
		}
		if !strings.HasPrefix(line, "MSG ") {
			others = append(others, strings.TrimSpace(line))
			continue
		}
		var subject, sid string
		var size int
		if _, err := fmt.Sscanf(line, "MSG %s %s %d", &subject, &sid, &size); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if _, err := io.ReadFull(a.in, make([]byte, size+2)); err != nil {
			t.Fatal(err)
		}
		got++
	}
	return others
}

// startShutdown runs Shutdown in the background.
func startShutdown(r *rig, grace time.Duration) <-chan sidecar.ShutdownSummary {
	done := make(chan sidecar.ShutdownSummary, 1)
	go func() { done <- r.side.Shutdown(grace) }()
	return done
}

func refusesConnections(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		_ = c.Close()
		return false
	}
	return true
}

// TestShutdownDeliversWhatASlowApplicationHolds: once shutdown starts, no
// connection is accepted and the broker stops sending the Subscription's
// messages, but the connected application still gets everything its
// sidecar held, and shutdown ends as soon as it has, well within its grace
// period.
func TestShutdownDeliversWhatASlowApplicationHolds(t *testing.T) {
	r, app := newStuckApp(t)
	addr := r.side.Addr().String()
	subscribed := r.broker.NumSubscriptions() // the "work" subscription, and those of the broker's own
	const grace = time.Minute                 // the test's own bound; it must end long before
	done := startShutdown(r, grace)

	natstest.WaitFor(t, "the sidecar refuses new connections", func() bool { return refusesConnections(addr) })
	natstest.WaitFor(t, "the broker no longer sends the Subscription's messages", func() bool { return r.broker.NumSubscriptions() == subscribed-1 })
	select {
	case sum := <-done:
		t.Fatalf("shutdown ended while the application still had messages waiting: %+v", sum)
	default:
	}
	// The connection is still served: everything held, and then the PONG,
	// which follows what was queued before it.
	if _, err := fmt.Fprint(app.conn, "PING\r\n"); err != nil {
		t.Fatal(err)
	}
	if others := app.read(t, backlog); len(others) != 0 {
		t.Fatalf("lines among the messages: %q, want none", others)
	}
	if line, err := app.in.ReadString('\n'); err != nil || line != "PONG\r\n" {
		t.Fatalf("after the messages: %q, %v, want the PONG", line, err)
	}
	var sum sidecar.ShutdownSummary
	select {
	case sum = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("shutdown did not end once the application had everything")
	}
	if !sum.Drained || sum.Undelivered != 0 || sum.Waited >= grace || sum.FlushErr != nil {
		t.Fatalf("summary %+v: want drained, nothing undelivered, flushed, before the grace period", sum)
	}
	if sum.Delivered == 0 {
		t.Error("the summary counts no delivery during the drain")
	}
	c := r.side.PolicyTotals()["work"]
	if !c.Balanced() || c.Delivered != backlog || c.Dropped != ([len(c.Dropped)]uint64{}) {
		t.Errorf("counts %+v: want all %d delivered, none dropped", c, backlog)
	}
}

// TestShutdownCountsWhatTheGracePeriodLeft: an application that reads
// nothing keeps its messages until the grace period ends; then they are
// dropped and counted with reason shutdown (those in flight to its socket
// too), in the summary and the metrics alike.
func TestShutdownCountsWhatTheGracePeriodLeft(t *testing.T) {
	r, _ := newStuckApp(t)
	const grace = 200 * time.Millisecond
	start := time.Now()
	var sum sidecar.ShutdownSummary
	select {
	case sum = <-startShutdown(r, grace):
	case <-time.After(30 * time.Second):
		t.Fatal("shutdown did not end after its grace period")
	}
	if took := time.Since(start); took < grace {
		t.Errorf("shutdown took %s: it did not wait out its %s grace period", took, grace)
	}
	c := r.side.PolicyTotals()["work"]
	if sum.Drained || sum.Undelivered == 0 || sum.Undelivered != c.Dropped[pending.ReasonShutdown] {
		t.Fatalf("summary %+v, counts %+v: want undelivered messages counted as shutdown", sum, c)
	}
	if !c.Balanced() || c.Pending != 0 || c.InFlight != 0 || c.Delivered+c.Dropped[pending.ReasonShutdown] != backlog {
		t.Errorf("counts %+v: want every message delivered or dropped as shutdown", c)
	}
	if c.Dropped[pending.ReasonClosed] != 0 {
		t.Errorf("%d messages counted as closed: the shutdown's loss must count as shutdown, in flight or not", c.Dropped[pending.ReasonClosed])
	}
	srv := httptest.NewServer(r.side.Handler())
	defer srv.Close()
	want := fmt.Sprintf(`weighstation_sidecar_dropped_total{reason="shutdown",subscription="work"} %d`, sum.Undelivered)
	if metrics := fetch(t, srv.URL+"/metrics"); !strings.Contains(metrics, want) {
		t.Errorf("the metrics do not say %s", want)
	}
}

// TestNoSubscriptionIsRenewedDuringShutdown: while the sidecar drains, a
// SUB under a Subscription is refused with an error that says why (one
// stock clients survive), and an inbox, which a request in progress needs,
// is still allowed.
func TestNoSubscriptionIsRenewedDuringShutdown(t *testing.T) {
	r, stuck := newStuckApp(t) // holds the drain open
	client, errs := r.appWithErrors(t)
	done := startShutdown(r, time.Minute)
	defer func() {
		_ = stuck.conn.Close() // what it held is dropped as closed: the drain ends
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("shutdown did not end once the stuck application left")
		}
	}()
	natstest.WaitFor(t, "the drain begins", func() bool { return refusesConnections(r.side.Addr().String()) })
	if _, err := client.SubscribeSync("work"); err != nil {
		t.Fatal(err)
	}
	if _, err := client.SubscribeSync("_INBOX.abc.*"); err != nil {
		t.Fatal(err)
	}
	flush(t, client)
	natstest.WaitFor(t, "the refusal reaches the client", func() bool { return len(errs.all()) > 0 })
	if e := errs.all(); len(e) != 1 || !strings.Contains(e[0], `Permissions Violation for Subscription to "work": the sidecar is shutting down`) {
		t.Fatalf("errors %q: want the SUB under the Subscription refused, and only it", e)
	}
	if !client.IsConnected() {
		t.Fatal("the refusal closed the connection")
	}
}
