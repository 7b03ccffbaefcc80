package sidecar

import (
	"runtime"
	"strings"
	"testing"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar/pending"
	"github.com/weighstation/weighstation/sidecar/upstream"
)

// Accounting and PONG ordering across a SUB's removal, a change of its
// Subscription, and drops: each test runs the steps of the goroutines
// involved in the order that once went wrong.

func accountingPolicy(name, subject string, maxMessages int) meshconfig.SubscriptionPolicy {
	return meshconfig.SubscriptionPolicy{Name: name, Subject: subject,
		Limits: meshconfig.Limits{MaxPendingMessages: int32(maxMessages), MaxPendingBytes: 32 << 20, Overflow: "DropNewest"}}
}

func pushTo(t *testing.T, ls *localSub, data string) bool {
	t.Helper()
	return ls.queue.Push(pending.Message{Subject: ls.key.Subject, Data: []byte(data)})
}

// goroutineAt reports whether some goroutine's stack holds every one of
// frames (a goroutine parked at a known point).
func goroutineAt(frames ...string) bool {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
next:
	for _, g := range strings.Split(string(buf[:n]), "\n\n") {
		for _, f := range frames {
			if !strings.Contains(g, f) {
				continue next
			}
		}
		return true
	}
	return false
}

// TestAHeldPongWaitsForOlderMessagesWhateverIsDropped: a PONG held behind
// a full DropNewest queue (the default overflow) waits for every message
// queued before it, however many newer arrivals the full queue drops.
// (Its barrier counted arrived - pending, which a drop on arrival raises
// with nothing leaving the queue, and fill wrote the PONG ahead of the
// older messages.)
func TestAHeldPongWaitsForOlderMessagesWhateverIsDropped(t *testing.T) {
	for _, tc := range []struct {
		name       string
		laterDrops int
	}{{"control: nothing dropped after the PING", 0}, {"newer arrivals dropped by a full queue", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := connectedServer(t, accountingPolicy("q", "q.>", 2))
			ls := listSub(c, "9", "q.x")
			c.writeMu.Lock() // the writer is busy (a stalled client): nothing leaves the queue
			defer c.writeMu.Unlock()
			pushTo(t, ls, "1")
			pushTo(t, ls, "2") // the queue is full
			owed := &owedPong{}
			c.mu.Lock()
			c.pongs = append(c.pongs, owed)
			c.mu.Unlock()
			c.pongReady(owed) // answerable now: held behind messages 1 and 2
			for range tc.laterDrops {
				if pushTo(t, ls, "late") {
					t.Fatal("a full DropNewest queue took a message")
				}
			}
			limit := c.out.limit
			c.out.limit = 1 // one message per batch, as with a small send buffer and large messages
			defer func() { c.out.limit = limit }()
			if ok, _ := c.fill(); !ok {
				t.Fatal("nothing to write")
			}
			written := string(c.out.buf)
			c.settle(nil, false)
			if q := ls.queue.Counts(); q.Pending > 0 && strings.Contains(written, "PONG") {
				t.Fatalf("the batch %q carries the PONG while %d message(s) queued before it still wait", written, q.Pending)
			}
		})
	}
}

// TestASUBRetiresOnlyOnceItsQueueIsClosed: a write that settles while an
// UNSUB's removeSub waits for interestMu (held by a configuration change,
// a kill switch) between marking the SUB removed and closing its queue
// does not retire it: the drops of the close are counted, and nothing is
// left pending in the totals. (It retired then, and the drops were lost.)
func TestASUBRetiresOnlyOnceItsQueueIsClosed(t *testing.T) {
	s, c := connectedServer(t, accountingPolicy("r", "r.>", 100))
	ls := listSub(c, "1", "r.x")
	if err := s.subscribe(ls); err != nil {
		t.Fatal(err)
	}
	c.writeMu.Lock()
	for _, d := range []string{"1", "2", "3"} {
		pushTo(t, ls, d)
	}
	limit := c.out.limit
	c.out.limit = 1
	if ok, _ := c.fill(); !ok { // the writer takes message 1
		t.Fatal("nothing to write")
	}
	c.out.limit = limit
	s.interestMu.Lock() // held by whatever: rebindSubscriptions, applyKill
	removed := make(chan struct{})
	go func() { // the reader's UNSUB 1
		defer close(removed)
		c.removeSub(ls, pending.ReasonUnsubscribed)
	}()
	natstest.WaitFor(t, "the SUB is marked removed", ls.removed.Load)
	_, err := c.out.toWrite.WriteTo(c.netConn)
	c.settle(err, false) // the write of message 1 returns
	c.writeMu.Unlock()
	s.interestMu.Unlock()
	<-removed
	got := s.PolicyTotals()["r"]
	if got.Arrived != 3 || got.Delivered != 1 || got.Dropped[pending.ReasonUnsubscribed] != 2 || got.Pending != 0 || got.InFlight != 0 {
		t.Fatalf("policy r's totals %+v, want 3 arrived, 1 delivered, 2 dropped as unsubscribed, none pending", got)
	}
}

// TestARetiredSUBIsNotRebound: a configuration change that listed a SUB
// before it was removed (an UNSUB, and a write that settled meanwhile,
// while the change waited on another SUB's queue) counts its messages
// once across the policies. (The write's settle retired it before its
// queue was closed, and the change then rebound it: its counts were added
// twice. A SUB now retires only after its queue is closed, which waits
// for the change's interestMu, and rebind leaves a removed SUB alone.)
func TestARetiredSUBIsNotRebound(t *testing.T) {
	s, c := connectedServer(t)
	first := listSub(c, "0", "a.x") // rebound first: where the test holds the change
	if err := s.subscribe(first); err != nil {
		t.Fatal(err)
	}
	ls := listSub(c, "1", "late.x")
	if err := s.subscribe(ls); err != nil {
		t.Fatal(err)
	}
	c.writeMu.Lock()
	pushTo(t, ls, "1")
	pushTo(t, ls, "2")
	limit := c.out.limit
	c.out.limit = 1
	if ok, _ := c.fill(); !ok { // the writer takes message 1
		t.Fatal("nothing to write")
	}
	c.out.limit = limit

	// Holding first's queue lock stops rebindSubscriptions at first's
	// SetLimits, both SUBs listed (DropAll runs its callback under the lock).
	pushTo(t, first, "x")
	locked, unlock, dropped := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(dropped)
		first.queue.DropAll(pending.ReasonKilled, func(*pending.Message) {
			close(locked)
			<-unlock
		})
	}()
	<-locked
	configured := make(chan error, 1)
	go func() { configured <- s.SetConfig(auditConfig(accountingPolicy("late", "late.>", 100))) }()
	natstest.WaitFor(t, "the change to stop at the first SUB's limits", func() bool { return goroutineAt("rebindSubscriptions", "SetLimits") })
	removed := make(chan struct{})
	go func() { // the reader's UNSUB 1, which waits for interestMu after startSettling
		defer close(removed)
		c.removeSub(ls, pending.ReasonUnsubscribed)
	}()
	natstest.WaitFor(t, "the SUB is marked removed", ls.removed.Load)
	_, err := c.out.toWrite.WriteTo(c.netConn)
	c.settle(err, false) // the write of message 1 returns: ls retires
	close(unlock)
	<-dropped
	if err := <-configured; err != nil {
		t.Fatal(err)
	}
	c.writeMu.Unlock()
	<-removed

	var all pending.Counts
	totals := s.PolicyTotals()
	for _, p := range totals {
		all = all.Plus(p)
	}
	if all.Arrived != 3 || all.Delivered != 1 || all.Pending != 0 {
		t.Fatalf("3 messages arrived (2 for late.x, 1 for a.x) and 1 was delivered, but the totals of all policies together are %+v (by policy: %+v)", all, totals)
	}
}

// TestRebindingNeverTakesCountsBack: a SUB with messages pending when a
// new Subscription comes to cover it leaves everything that arrived with
// its old policy, whose totals are Prometheus counters. (The pending
// messages' arrivals moved to the new policy, and the old one's counter
// went down.)
func TestRebindingNeverTakesCountsBack(t *testing.T) {
	s, c := connectedServer(t)
	ls := listSub(c, "1", "late.x")
	if err := s.subscribe(ls); err != nil {
		t.Fatal(err)
	}
	c.writeMu.Lock() // a stalled client: the messages stay pending
	defer c.writeMu.Unlock()
	for _, d := range []string{"1", "2", "3"} {
		pushTo(t, ls, d)
	}
	before := s.PolicyTotals()[""]
	if err := s.SetConfig(auditConfig(accountingPolicy("late", "late.>", 100))); err != nil {
		t.Fatal(err)
	}
	after := s.PolicyTotals()[""]
	if after.Arrived < before.Arrived {
		t.Fatalf("policy \"\"'s arrived counter went from %d to %d when a new Subscription came to cover its SUB", before.Arrived, after.Arrived)
	}
}

// TestASUBRegisteredAfterAChangeTakesItsLimitsToo: a configuration change
// between conn.subscribe's reading of the SUB's policy and its listing
// (which the change then does not see) gives the SUB, as it registers,
// the current limits, whether the change named a new Subscription or kept
// the name. (It kept the old limits until some later change.)
func TestASUBRegisteredAfterAChangeTakesItsLimitsToo(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before []meshconfig.SubscriptionPolicy
	}{
		{"a new Subscription", nil},
		{"the same Subscription, new limits", []meshconfig.SubscriptionPolicy{accountingPolicy("late", "late.>", 100)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c := connectedServer(t, tc.before...)
			limits, essential, name := s.subscriptionPolicy("late.x") // conn.subscribe's first step
			if err := s.SetConfig(auditConfig(accountingPolicy("late", "late.>", 7))); err != nil {
				t.Fatal(err)
			}
			ls := &localSub{conn: c, sid: "1", subject: "late.x", key: upstream.Key{Subject: "late.x"},
				queue: pending.New(limits).WithConnectionLimit(c.pendingLimit).WithBudget(c.srv.budget, essential)}
			ls.binding.Store(&subBinding{policy: name, latency: c.srv.latenciesFor(name)})
			c.mu.Lock()
			c.subs[ls.sid] = ls
			c.addToOrderLocked(ls) // order is read without mu (fill)
			c.mu.Unlock()
			if err := s.subscribe(ls); err != nil {
				t.Fatal(err)
			}
			if got := ls.queue.Limits().MaxMessages; ls.policy() != "late" || got != 7 {
				t.Fatalf("the SUB is under %q with a queue of %d messages, want late's 7", ls.policy(), got)
			}
		})
	}
}
