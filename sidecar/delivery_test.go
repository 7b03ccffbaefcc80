package sidecar_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar"
	"github.com/weighstation/weighstation/sidecar/pending"
)

// TestStalledConsumerFillsOnlyItsOwnQueue: a raw client subscribes and then
// stops reading its socket. Its queue fills and drops by its policy, with
// exact counts, while a stock client on the same subject gets everything.
func TestStalledConsumerFillsOnlyItsOwnQueue(t *testing.T) {
	for _, policy := range []pending.Overflow{pending.DropNewest, pending.DropOldest} {
		t.Run(map[pending.Overflow]string{pending.DropNewest: "DropNewest", pending.DropOldest: "DropOldest"}[policy], func(t *testing.T) {
			r := newRig(t, func(o *sidecar.Options) {
				o.Queue = pending.Limits{MaxMessages: 50, MaxBytes: 1 << 30, Overflow: policy}
			})
			stalled := r.raw(t)
			stalled.send("CONNECT {}\r\nSUB flood stalled-1\r\nPING\r\n")
			if got := stalled.line(); got != "PONG" {
				t.Fatalf("got %q, want PONG", got)
			}
			// From here on, the stalled client never reads.
			healthy := r.app(t)
			var received atomic.Int64
			if _, err := healthy.Subscribe("flood", func(*nats.Msg) { received.Add(1) }); err != nil {
				t.Fatal(err)
			}
			flush(t, healthy)

			const n, batch = 3000, 20
			payload := bytes.Repeat([]byte("x"), 8<<10) // 24 MiB in all: more than the socket buffers hold
			pub := r.direct(t)
			// Paced to the healthy consumer, whose queue (50 messages, like
			// every queue here) must never overflow: only the stalled one does.
			for i := 0; i < n; i += batch {
				for range batch {
					if err := pub.Publish("flood", payload); err != nil {
						t.Fatal(err)
					}
				}
				flush(t, pub)
				natstest.WaitFor(t, "the healthy consumer keeps up", func() bool { return received.Load() == int64(i+batch) })
			}

			counts := r.countsOnceArrived(t, "stalled-1", n)
			dropped := counts.Dropped[pending.ReasonOverflow]
			if !counts.Balanced() || dropped == 0 || counts.Pending > 50 {
				t.Fatalf("stalled subscription: %+v; want balanced, some overflow drops, at most 50 pending", counts)
			}
			t.Logf("stalled subscription: %d arrived = %d delivered + %d dropped + %d in flight + %d pending",
				counts.Arrived, counts.Delivered, dropped, counts.InFlight, counts.Pending)
		})
	}
}

// TestLocalSubscriptionsTakeTheirSubscriptionsLimits: a SUB covered by a
// Subscription of the configuration gets that Subscription's queue limits.
func TestLocalSubscriptionsTakeTheirSubscriptionsLimits(t *testing.T) {
	r := newRig(t)
	cfg := configWith()
	cfg.Subscriptions = []meshconfig.SubscriptionPolicy{{Name: "flood", Subject: "flood.>", Essential: true,
		Limits: meshconfig.Limits{MaxPendingMessages: 7, MaxPendingBytes: 1 << 30, Overflow: "DropOldest"}}}
	if err := r.side.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	stalled := r.raw(t)
	stalled.send("CONNECT {}\r\nSUB flood.x stalled-1\r\nPING\r\n")
	if got := stalled.line(); got != "PONG" {
		t.Fatalf("got %q, want PONG", got)
	}
	pub := r.direct(t)
	payload := bytes.Repeat([]byte("x"), 64<<10)
	const n = 400 // 25 MiB: far more than the socket buffers hold
	for range n {
		if err := pub.Publish("flood.x", payload); err != nil {
			t.Fatal(err)
		}
	}
	flush(t, pub)
	counts := r.countsOnceArrived(t, "stalled-1", n)
	if lim := r.limitsOf(t, "stalled-1"); lim.MaxMessages != 7 || lim.Overflow != pending.DropOldest {
		t.Fatalf("the SUB's queue limits are %+v, want the Subscription's 7 and DropOldest", lim)
	}
	// How much the kernel's socket buffers absorb varies; the queue never
	// holds more than its limit, and every message is accounted for.
	if counts.Pending > 7 || !counts.Balanced() || counts.Dropped[pending.ReasonOverflow] == 0 {
		t.Fatalf("counts %+v: want at most 7 pending, balanced, overflow drops", counts)
	}
}

// countsOnceArrived waits until the subscription with sid has seen n
// messages arrive, and returns its accounting.
func (r *rig) countsOnceArrived(t *testing.T, sid string, n uint64) pending.Counts {
	t.Helper()
	var counts pending.Counts
	natstest.WaitFor(t, "every message reached "+sid+"'s accounting", func() bool {
		for _, s := range r.side.Stats() {
			if s.SID == sid {
				counts = s.Counts
			}
		}
		return counts.Arrived == n
	})
	return counts
}

// TestMemoryBudgetShedsNonEssentialFirst: one stalled client holds an
// essential and a non-essential subscription; under a 2 MiB budget the
// non-essential one is shed while the essential one keeps what fits.
func TestMemoryBudgetShedsNonEssentialFirst(t *testing.T) {
	r := newRig(t, func(o *sidecar.Options) { o.MemoryBudget = 2 << 20 })
	roomy := meshconfig.Limits{MaxPendingMessages: 100000, MaxPendingBytes: 1 << 30, Overflow: "DropNewest"}
	cfg := configWith()
	cfg.Subscriptions = []meshconfig.SubscriptionPolicy{
		{Name: "critical", Subject: "critical.>", Essential: true, Limits: roomy},
		{Name: "optional", Subject: "optional.>", Essential: false, Limits: roomy},
	}
	if err := r.side.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	stalled := r.raw(t)
	stalled.send("CONNECT {}\r\nSUB critical.x crit\r\nSUB optional.x opt\r\nPING\r\n")
	if got := stalled.line(); got != "PONG" {
		t.Fatalf("got %q, want PONG", got)
	}
	pub := r.direct(t)
	payload := bytes.Repeat([]byte("x"), 8<<10)
	const n = 1000 // per subject: 16 MiB in all, against a 2 MiB budget and the socket's buffers
	for range n {
		for _, subject := range []string{"optional.x", "critical.x"} {
			if err := pub.Publish(subject, payload); err != nil {
				t.Fatal(err)
			}
		}
	}
	flush(t, pub)
	crit, opt := r.countsOnceArrived(t, "crit", n), r.countsOnceArrived(t, "opt", n)
	if !crit.Balanced() || !opt.Balanced() {
		t.Fatalf("unbalanced: critical %+v, optional %+v", crit, opt)
	}
	if opt.Dropped[pending.ReasonShed] == 0 || crit.Dropped[pending.ReasonShed] != 0 {
		t.Fatalf("shed: optional %d, critical %d; want the optional one shed, never the critical one", opt.Dropped[pending.ReasonShed], crit.Dropped[pending.ReasonShed])
	}
	if crit.Pending*8<<10 < 1<<20 || opt.Pending > crit.Pending {
		t.Fatalf("pending: critical %d, optional %d; the budget should go to the critical one", crit.Pending, opt.Pending)
	}
	if used := r.side.BudgetUsed(); used > 2<<20 {
		t.Fatalf("pending bytes %d over the 2 MiB budget", used)
	}
	t.Logf("critical: %+v", crit)
	t.Logf("optional: %+v", opt)
}

// TestConfigurationChangesReachExistingSubscriptions: a SUB made under the
// defaults takes the limits of a Subscription that a later configuration
// adds.
func TestConfigurationChangesReachExistingSubscriptions(t *testing.T) {
	r := newRig(t)
	stalled := r.raw(t)
	stalled.send("CONNECT {}\r\nSUB later.x stalled-1\r\nPING\r\n")
	if got := stalled.line(); got != "PONG" {
		t.Fatalf("got %q, want PONG", got)
	}
	cfg := configWith()
	cfg.Subscriptions = []meshconfig.SubscriptionPolicy{{Name: "later", Subject: "later.>", Essential: true,
		Limits: meshconfig.Limits{MaxPendingMessages: 3, MaxPendingBytes: 1 << 30, Overflow: "DropNewest"}}}
	if err := r.side.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	pub := r.direct(t)
	payload := bytes.Repeat([]byte("x"), 64<<10)
	const n = 400
	for range n {
		if err := pub.Publish("later.x", payload); err != nil {
			t.Fatal(err)
		}
	}
	flush(t, pub)
	counts := r.countsOnceArrived(t, "stalled-1", n)
	if lim := r.limitsOf(t, "stalled-1"); lim.MaxMessages != 3 {
		t.Fatalf("the existing SUB's limits are %+v, want the new Subscription's 3", lim)
	}
	if counts.Pending > 3 || !counts.Balanced() {
		t.Fatalf("counts %+v: want at most 3 pending, balanced", counts)
	}
}

// limitsOf returns the live queue limits of the subscription with sid.
func (r *rig) limitsOf(t *testing.T, sid string) pending.Limits {
	t.Helper()
	return r.subscriptionStats(t, sid).Limits
}

// subscriptionStats returns the live subscription with sid.
func (r *rig) subscriptionStats(t *testing.T, sid string) sidecar.SubscriptionStats {
	t.Helper()
	for _, s := range r.side.Stats() {
		if s.SID == sid {
			return s
		}
	}
	t.Fatalf("no live subscription %s", sid)
	return sidecar.SubscriptionStats{}
}

// TestLargePayloadsAreWrittenByReference: payloads of 16 KiB and more are
// written from their pooled body, between the lines of smaller ones, in one
// writev; each message arrives intact and in order, headers included, in a
// fan-out to two subscribers and over a bounded send buffer (writes then
// complete in parts).
func TestLargePayloadsAreWrittenByReference(t *testing.T) {
	r := newRig(t, func(o *sidecar.Options) { o.AppSendBuffer = 32 << 10 })
	sizes := []int{10, 20_000, 100, 70_000, 16 << 10, 0, 1 << 20, 3, 64 << 10}
	type got struct {
		data   []byte
		header string
	}
	var subs [2]chan got
	for i := range subs {
		subs[i] = make(chan got, 4*len(sizes))
		app := r.app(t)
		if _, err := app.Subscribe("large", func(m *nats.Msg) { subs[i] <- got{m.Data, m.Header.Get("Seq")} }); err != nil {
			t.Fatal(err)
		}
		flush(t, app)
	}
	pub := r.direct(t)
	const rounds = 3
	for round := range rounds {
		for i, size := range sizes {
			m := &nats.Msg{Subject: "large", Data: bytes.Repeat([]byte{byte('a' + i)}, size)}
			if i%2 == 1 {
				m.Header = nats.Header{"Seq": []string{fmt.Sprint(round, i)}}
			}
			if err := pub.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	flush(t, pub)
	for s, ch := range subs {
		for round := range rounds {
			for i, size := range sizes {
				select {
				case g := <-ch:
					want := bytes.Repeat([]byte{byte('a' + i)}, size)
					wantHeader := ""
					if i%2 == 1 {
						wantHeader = fmt.Sprint(round, i)
					}
					if !bytes.Equal(g.data, want) || g.header != wantHeader {
						t.Fatalf("subscriber %d, round %d, message %d: %d bytes, header %q; want %d bytes of %q, header %q",
							s, round, i, len(g.data), g.header, size, rune('a'+i), wantHeader)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("subscriber %d: round %d message %d did not arrive within 10s", s, round, i)
				}
			}
		}
	}
}

// TestDeliveryIsWrittenInline: a subscriber that keeps up gets its messages
// written by the upstream reader itself (no hand-off to the connection's
// writer), every one intact and in order, while a stalled subscriber on a
// bounded socket beside it leaves its messages to its own writer and
// delays no one.
func TestDeliveryIsWrittenInline(t *testing.T) {
	r := newRig(t, func(o *sidecar.Options) { o.AppSendBuffer = 16 << 10 })
	app := r.app(t)
	got := make(chan []byte, 1000)
	if _, err := app.Subscribe("inline", func(m *nats.Msg) { got <- m.Data }); err != nil {
		t.Fatal(err)
	}
	flush(t, app)
	stalled := r.stalledSubscriber(t, "inline")
	defer stalled.Close()
	inlineBefore, _ := r.side.AppWrites()
	pub := r.direct(t)
	const messages = 500
	payload := bytes.Repeat([]byte("x"), 1024)
	for i := range messages {
		if err := pub.Publish("inline", append([]byte(fmt.Sprintf("%04d", i)), payload...)); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			flush(t, pub) // several reads on the sidecar's side, not one
		}
	}
	flush(t, pub)
	for i := range messages {
		select {
		case data := <-got:
			if want := fmt.Sprintf("%04d", i); string(data[:4]) != want || len(data) != 4+len(payload) {
				t.Fatalf("message %d: got %q... (%d bytes), want %s... (%d bytes)", i, data[:4], len(data), want, 4+len(payload))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("message %d did not arrive within 10s beside a stalled subscriber", i)
		}
	}
	inline, byWriter := r.side.AppWrites()
	if inline == inlineBefore {
		t.Fatalf("no write was made inline (inline %d, by writers %d)", inline, byWriter)
	}
	if counts := r.statsOf(t, "stalled"); counts.Pending+counts.InFlight == 0 {
		t.Fatalf("the stalled subscriber holds nothing (%+v): it did not stall, and the test shows nothing", counts)
	}
}

// stalledSubscriber subscribes to subject (sid "stalled") on a raw connection with
// a 4 KiB receive buffer, then never reads again.
func (r *rig) stalledSubscriber(t *testing.T, subject string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) }); cerr != nil {
			return cerr
		}
		return err
	}}
	conn, err := d.Dial("tcp", r.side.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("CONNECT {}\r\nSUB " + subject + " stalled\r\nPING\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("waiting for the stalled subscriber's PONG: %v", err)
		}
		if line == "PONG\r\n" {
			return conn
		}
	}
}

// TestAPongFollowsWhatWasQueuedBeforeIt: nats-server writes a client's
// output in order, so a client that publishes to its own subscription and
// flushes has the message when Flush returns, even behind a backlog. The
// sidecar's PONG, answerable once the broker confirmed the PUB (its echo
// queued by then), waits for every message queued before it. (It went
// first, ahead of the backlog and of the echo.)
func TestAPongFollowsWhatWasQueuedBeforeIt(t *testing.T) {
	r := newRig(t, func(o *sidecar.Options) { o.AppSendBuffer = 4096 })
	stalled := r.stalledSubscriber(t, "order")
	defer stalled.Close()
	arrived := r.backlog(t, "order")
	if _, err := stalled.Write([]byte("PUB order 4\r\nmine\r\nPING\r\n")); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, "the echo in the sidecar's queue", func() bool { return r.stalledStats(t).Arrived == arrived+1 })
	br := bufio.NewReader(stalled)
	_ = stalled.SetReadDeadline(time.Now().Add(10 * time.Second))
	before, mine := 0, false
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading: %v (after %d messages, the echo among them: %v)", err, before, mine)
		}
		switch {
		case line == "PONG\r\n":
			if !mine || uint64(before) != arrived+1 {
				t.Fatalf("PONG after %d of the %d messages queued before it (the echo among them: %v)", before, arrived+1, mine)
			}
			return
		case strings.HasPrefix(line, "MSG "):
			body, err := br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			before++
			mine = mine || body == "mine\r\n"
		}
	}
}

// stalledStats is the accounting of stalledSubscriber's SUB.
func (r *rig) stalledStats(t *testing.T) pending.Counts {
	t.Helper()
	for _, st := range r.side.Stats() {
		if st.SID == "stalled" {
			return st.Counts
		}
	}
	t.Fatal("the stalled SUB is gone")
	return pending.Counts{}
}

// backlog publishes 16 KiB messages to subject, from outside, until four
// wait in the sidecar's queue of stalledSubscriber's SUB, and returns how
// many arrived there (all of them, by its return). Four: while the kernel
// still takes a little of the write in flight, the writer may move one or
// two more from the queue into writes, and the tests need some waiting.
func (r *rig) backlog(t *testing.T, subject string) uint64 {
	t.Helper()
	pub := r.direct(t)
	payload := bytes.Repeat([]byte("x"), 16<<10)
	var published uint64
	natstest.WaitFor(t, "a backlog in the sidecar's queue", func() bool {
		if err := pub.Publish(subject, payload); err != nil {
			t.Fatal(err)
		}
		published++
		flush(t, pub)
		return r.stalledStats(t).Pending >= 4
	})
	natstest.WaitFor(t, "every message in the sidecar", func() bool { return r.stalledStats(t).Arrived == published })
	return published
}

// TestHeldPongsCountAgainstMaxControlBytes: PONGs held behind a backlog
// are control replies the client has not taken: up to MaxControlBytes of
// them wait, and one more closes the connection as a slow consumer.
//
// The client reads nothing until the sidecar has parsed every PING: were
// it to read at once, the writer would drain the backlog, and the PONGs
// held behind it go out, while the sidecar's reader still parsed the
// PINGs, and then 101 fit (rightly: the client had taken the first ones).
// A SUB sent after the PINGs, in the same write, shows in Stats once they
// are parsed (the reader runs commands in order); a close removes the
// stalled SUB, and the SUB after it is refused.
func TestHeldPongsCountAgainstMaxControlBytes(t *testing.T) {
	const maxControl = 600 // 100 PONGs
	for _, tc := range []struct {
		pings  int
		closed bool
	}{{100, false}, {101, true}} {
		t.Run(fmt.Sprint(tc.pings), func(t *testing.T) {
			r := newRig(t, func(o *sidecar.Options) { o.AppSendBuffer, o.MaxControlBytes = 4096, maxControl })
			stalled := r.stalledSubscriber(t, "held")
			defer stalled.Close()
			arrived := r.backlog(t, "held")
			if _, err := stalled.Write([]byte(strings.Repeat("PING\r\n", tc.pings) + "SUB held.parsed parsed\r\n")); err != nil {
				t.Fatal(err)
			}
			var counts pending.Counts // the stalled SUB's, once the PINGs are parsed
			parsed, closed := false, false
			natstest.WaitFor(t, "the sidecar parsed the PINGs (the SUB after them is live, or the connection closed)", func() bool {
				live := false
				parsed = false
				for _, st := range r.side.Stats() {
					switch st.SID {
					case "stalled":
						live, counts = true, st.Counts
					case "parsed":
						parsed = true
					}
				}
				closed = !live
				return parsed || closed
			})
			switch {
			case tc.closed && !closed:
				t.Fatalf("%d PONGs held past MaxControlBytes %d, the connection went on (%d messages still queued before them)", tc.pings, maxControl, counts.Pending)
			case !tc.closed && closed:
				t.Fatalf("closed with %d PONGs held, within MaxControlBytes %d", tc.pings, maxControl)
			case !tc.closed && counts.Pending == 0:
				// The client read nothing, so the queue keeps what the
				// backlog left there, and every PONG was held at once.
				t.Fatalf("the backlog left the queue while the PINGs were parsed: %+v", counts)
			}
			br := bufio.NewReader(stalled)
			_ = stalled.SetReadDeadline(time.Now().Add(10 * time.Second))
			msgs, pongs := uint64(0), 0
			for pongs < tc.pings {
				line, err := br.ReadString('\n')
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatalf("after %d messages and %d PONGs, the connection neither answered nor closed", msgs, pongs)
				}
				if err != nil {
					if !tc.closed {
						t.Fatalf("closed after %d messages and %d PONGs: %v", msgs, pongs, err)
					}
					return
				}
				switch {
				case line == "PONG\r\n":
					if msgs != arrived {
						t.Fatalf("a PONG after %d of the %d messages queued before it", msgs, arrived)
					}
					pongs++
				case strings.HasPrefix(line, "MSG "):
					if _, err := br.Discard(16<<10 + 2); err != nil {
						if !tc.closed {
							t.Fatalf("closed after %d messages and %d PONGs: %v", msgs, pongs, err)
						}
						return
					}
					msgs++
				}
			}
			if tc.closed {
				t.Fatalf("%d PONGs held past MaxControlBytes %d were all answered", tc.pings, maxControl)
			}
		})
	}
}
