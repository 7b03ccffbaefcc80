package sidecar_test

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/sidecar"
	"github.com/weighstation/weighstation/sidecar/pending"
	"github.com/weighstation/weighstation/sidecar/upstream"
)

// rawClient is a TCP client that speaks the protocol by hand, badly if told.
type rawClient struct {
	t    testing.TB
	conn net.Conn
	r    *bufio.Reader
	info string // the INFO line it got on connecting, without its CRLF
}

// raw connects a rawClient to the sidecar.
func (r *rig) raw(t *testing.T) *rawClient {
	t.Helper()
	return dialRaw(t, r.side.Addr().String())
}

// dialRaw connects a rawClient to addr (the sidecar, or the broker) and
// reads its INFO.
func dialRaw(t testing.TB, addr string) *rawClient {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &rawClient{t: t, conn: conn, r: bufio.NewReader(conn)}
	if c.info = c.line(); !strings.HasPrefix(c.info, "INFO ") {
		t.Fatalf("first line %q, want INFO", c.info)
	}
	return c
}

func (c *rawClient) send(s string) {
	c.t.Helper()
	if _, err := c.conn.Write([]byte(s)); err != nil {
		c.t.Fatalf("writing: %v", err)
	}
}

// line reads one line, failing after 5 s.
func (c *rawClient) line() string {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	l, err := c.r.ReadString('\n')
	if err != nil {
		c.t.Fatalf("reading a line: %v (got %q)", err, l)
	}
	return strings.TrimRight(l, "\r\n")
}

// closedAfter expects the given -ERR line, then the connection to close;
// with "", the close alone.
func (c *rawClient) closedAfter(wantErr string) {
	c.t.Helper()
	if wantErr == "" {
		// nothing before the close
	} else if got := c.line(); got != wantErr {
		c.t.Fatalf("got %q, want %q", got, wantErr)
	}
	_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if l, err := c.r.ReadString('\n'); err == nil {
		c.t.Fatalf("the connection stayed open and sent %q", l)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		c.t.Fatal("the connection stayed open")
	}
}

// stillWorks checks that a well-behaved application on the same sidecar is
// unaffected.
func (r *rig) stillWorks(t *testing.T, app *nats.Conn) {
	t.Helper()
	got := make(chan struct{}, 1)
	sub, err := app.Subscribe("health.check", func(*nats.Msg) { got <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	flush(t, app)
	if err := app.Publish("health.check", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("a well-behaved connection stopped working")
	}
}

func TestMalformedInputGetsAClearErrorAndAClose(t *testing.T) {
	tests := []struct {
		name  string
		input string
		err   string
	}{
		{"malformed PUB", "CONNECT {}\r\nPUB a\r\n", "-ERR 'Parser Error: PUB takes a subject, an optional reply subject and a size, got 1 arguments'"},
		{"unknown operation", "CONNECT {}\r\nFLY me.to.the.moon\r\n", "-ERR 'Unknown Protocol Operation'"},
		{"oversize control line", "CONNECT {}\r\nSUB " + strings.Repeat("a", 5000) + " 1\r\n", "-ERR 'Maximum Control Line Exceeded (max_control_line 4016)'"}, // 4096 less protocol.UpstreamLineRoom
		{"payload over max_payload", "CONNECT {}\r\nPUB a 2000000\r\n", "-ERR 'Maximum Payload Violation'"},
		{"CONNECT that is not JSON", "CONNECT {verbose\r\n", "-ERR 'Parser Error: CONNECT options are not valid JSON'"},
	}
	r := newRig(t)
	app := r.app(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := r.raw(t)
			c.send(tc.input)
			c.closedAfter(tc.err)
			r.stillWorks(t, app)
		})
	}
}

// TestPublishesBeforeAProtocolErrorGoUp: a PUB parsed before a protocol
// error in the same read is forwarded, as nats-server would process it,
// and at once: not left queued until some later write to the broker.
func TestPublishesBeforeAProtocolErrorGoUp(t *testing.T) {
	// Nothing else to wake the upstream writer, which would write whatever
	// is queued: no early PING from the broker (nats-server's first comes
	// 2 s after a connect, and its answer is a write) and no confirmation
	// timer.
	broker := natstest.StartBroker(t, &server.Options{DisableShortFirstPing: true})
	r := startRig(t, broker, natstest.DialUpstream(t, broker.ClientURL(), func(o *upstream.Options) { o.ConfirmInterval = time.Hour }))
	got := make(chan string, 1)
	outside := r.direct(t)
	if _, err := outside.Subscribe("before.error", func(m *nats.Msg) { got <- string(m.Data) }); err != nil {
		t.Fatal(err)
	}
	flush(t, outside)
	app := r.raw(t)
	app.send("CONNECT {}\r\nPUB before.error 4\r\nsent\r\nFLY me.to.the.moon\r\n")
	app.closedAfter("-ERR 'Unknown Protocol Operation'")
	select {
	case data := <-got:
		if data != "sent" {
			t.Fatalf("got %q, want %q", data, "sent")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the PUB before the protocol error did not reach the broker within 5s")
	}
}

// TestInvalidSubjectsAreRefusedWithoutClosing: an invalid SUB gets
// nats-server's error; an invalid PUB is dropped and counted, with an
// error only to a pedantic client, as from nats-server (nats.go closes its
// connection on that error, so a stock client that is not pedantic must not
// get it). Every one is counted, and the connection stays.
func TestInvalidSubjectsAreRefusedWithoutClosing(t *testing.T) {
	for _, tc := range []struct {
		connect string
		want    []string
	}{
		{`CONNECT {}`, []string{"-ERR 'Invalid Subject'", "PONG"}},
		{`CONNECT {"pedantic":true}`, []string{"-ERR 'Invalid Subject'", "-ERR 'Invalid Publish Subject'", "-ERR 'Invalid Publish Subject'", "PONG"}},
	} {
		t.Run(tc.connect, func(t *testing.T) {
			r := newRig(t)
			c := r.raw(t)
			c.send(tc.connect + "\r\nSUB a..b 1\r\nPUB a.> 1\r\nx\r\nPUB b reply.* 1\r\nx\r\nPING\r\n")
			for _, want := range tc.want {
				if got := c.line(); got != want {
					t.Fatalf("got %q, want %q", got, want)
				}
			}
			if n := r.side.Invalid(); n != 3 {
				t.Fatalf("%d invalid refusals counted, want 3", n)
			}
		})
	}
}

// TestAStockClientPublishingToAWildcardKeepsItsConnection: nats.go sends a
// PUB to a wildcard subject as it is; through the sidecar, as against
// nats-server, the connection survives it and goes on working.
func TestAStockClientPublishingToAWildcardKeepsItsConnection(t *testing.T) {
	r := newRig(t)
	app := r.app(t)
	if err := app.Publish("orders.>", []byte("x")); err != nil {
		t.Fatal(err)
	}
	flush(t, app) // the sentinel: the PUB was read before the PING
	if app.IsClosed() || app.LastError() != nil {
		t.Fatalf("the client's connection closed (%v) or saw an error (%v)", app.IsClosed(), app.LastError())
	}
	if n := r.side.Invalid(); n != 1 {
		t.Fatalf("%d invalid publishes counted, want 1", n)
	}
	r.stillWorks(t, app)
}

func TestSlowAndSilentClientsAreClosed(t *testing.T) {
	r := newRig(t, func(o *sidecar.Options) {
		o.ConnectTimeout = 300 * time.Millisecond
		o.MaxIdle = 300 * time.Millisecond
	})
	t.Run("silent before CONNECT", func(t *testing.T) {
		r.raw(t).closedAfter("-ERR 'Authentication Timeout'")
	})
	t.Run("slow-loris: a line that never ends", func(t *testing.T) {
		c := r.raw(t)
		c.send("CONNECT {}\r\nSUB orders.")
		for range 3 { // keep dribbling, more slowly than MaxIdle allows for the line
			time.Sleep(150 * time.Millisecond)
			if _, err := c.conn.Write([]byte("x")); err != nil {
				break // already closed, as it should be
			}
		}
		c.closedAfter("-ERR 'Stale Connection'")
	})
	// Other connections are unaffected. (With MaxIdle this short, a stock
	// client idle for 300ms is closed too, so the check uses a fresh one.)
	r.stillWorks(t, r.app(t))
}

// TestABusyClientIsNotClosed: the reader's deadline is an idle timer,
// renewed as commands arrive, not a deadline set once: a client that sends
// a command every tenth of MaxIdle for two and a half MaxIdles is answered
// throughout.
func TestABusyClientIsNotClosed(t *testing.T) {
	const maxIdle = time.Second
	r := newRig(t, func(o *sidecar.Options) {
		o.ConnectTimeout = maxIdle
		o.MaxIdle = maxIdle
	})
	c := r.raw(t)
	c.send("CONNECT {}\r\n")
	// The ticker paces the commands; what the test asserts is that every
	// one is answered, over more than twice the time a deadline set once
	// would allow.
	pace := time.NewTicker(maxIdle / 10)
	defer pace.Stop()
	start := time.Now()
	for time.Since(start) < maxIdle*5/2 {
		<-pace.C
		c.send("PING\r\n")
		if got := c.line(); got != "PONG" {
			t.Fatalf("after %s of commands every %s: got %q, want PONG", time.Since(start).Round(time.Millisecond), maxIdle/10, got)
		}
	}
}

// TestACommandSentWithConnectGetsMaxIdle: the commands after CONNECT are
// given MaxIdle, not what was left of ConnectTimeout, even when the first
// of them arrived in the same read as CONNECT (a client that sends CONNECT
// and a large body at once, then the body's end later).
func TestACommandSentWithConnectGetsMaxIdle(t *testing.T) {
	const connectTimeout = 200 * time.Millisecond
	r := newRig(t, func(o *sidecar.Options) {
		o.ConnectTimeout = connectTimeout
		o.MaxIdle = time.Minute
	})
	c := r.raw(t)
	c.send("CONNECT {}\r\nPUB orders.1 10\r\n12345")
	// The sentinel: a connection opened after c that sends nothing is
	// closed once its ConnectTimeout ran out, so c's ran out before. The
	// PONG below is what shows that c was kept.
	r.raw(t).closedAfter("-ERR 'Authentication Timeout'")
	c.send("67890\r\nPING\r\n")
	if got := c.line(); got != "PONG" {
		t.Fatalf("got %q, want PONG: a body begun with CONNECT was held to ConnectTimeout (%s)", got, connectTimeout)
	}
}

func TestConnectionLimit(t *testing.T) {
	r := newRig(t, func(o *sidecar.Options) { o.MaxConnections = 2 })
	r.app(t)
	r.app(t)
	conn, err := net.Dial("tcp", r.side.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := &rawClient{t: t, conn: conn, r: bufio.NewReader(conn)}
	c.closedAfter("-ERR 'maximum connections exceeded'")
}

func TestSubscriptionLimit(t *testing.T) {
	r := newRig(t, func(o *sidecar.Options) { o.MaxSubscriptions = 2 })
	c := r.raw(t)
	c.send("CONNECT {}\r\nSUB a 1\r\nSUB b 2\r\nSUB c 3\r\nUNSUB 1\r\nSUB c 4\r\nPING\r\n")
	for _, want := range []string{"-ERR 'Maximum Subscriptions Exceeded'", "PONG"} {
		if got := c.line(); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	if n := r.side.Interest().Subscriptions(); n != 2 {
		t.Fatalf("%d upstream subscriptions, want 2 (b and c)", n)
	}
}

// TestNoRespondersOnlyForClientsThatAskForThem: a client that did not
// declare no_responders (nor headers) never gets the broker's 503 status;
// it is counted as dropped (unsupported).
func TestNoRespondersOnlyForClientsThatAskForThem(t *testing.T) {
	r := newRig(t)
	c := r.raw(t)
	c.send("CONNECT {}\r\nSUB _INBOX.plain.* inbox-1\r\nPUB nobody.home _INBOX.plain.1 0\r\n\r\nPING\r\n")
	if got := c.line(); got != "PONG" {
		t.Fatalf("got %q, want PONG", got)
	}
	r.countsOnceArrived(t, "inbox-1", 1)
	var counts pending.Counts
	natstest.WaitFor(t, "the writer settles the status", func() bool {
		for _, s := range r.side.Stats() {
			if s.SID == "inbox-1" {
				counts = s.Counts
			}
		}
		return counts.Pending == 0 && counts.InFlight == 0
	})
	if counts.Dropped[pending.ReasonUnsupported] != 1 || counts.Delivered != 0 || !counts.Balanced() {
		t.Fatalf("counts %+v: want the status dropped as unsupported", counts)
	}
	c.send("PING\r\n")
	if got := c.line(); got != "PONG" {
		t.Fatalf("got %q after the status was withheld, want only PONG", got)
	}
}
