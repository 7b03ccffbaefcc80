package sidecar_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/sidecar"
	"github.com/weighstation/weighstation/sidecar/protocol"
)

// bodyOf is a PUB frame of a body of size bytes.
func bodyOf(subject string, size int) string {
	return fmt.Sprintf("PUB %s %d\r\n%s\r\n", subject, size, strings.Repeat("b", size))
}

// outsideOrder records, outside the pod, the subjects that arrive on >, in
// order.
type outsideOrder struct {
	mu       sync.Mutex
	subjects []string
}

func (o *outsideOrder) add(m *nats.Msg) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.subjects = append(o.subjects, m.Subject)
}

func (o *outsideOrder) all() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.subjects...)
}

func (r *rig) watchOutside(t *testing.T) *outsideOrder {
	t.Helper()
	outside := r.direct(t)
	o := &outsideOrder{}
	if _, err := outside.Subscribe(">", o.add); err != nil {
		t.Fatal(err)
	}
	flush(t, outside)
	return o
}

// TestBodyWithoutRoomInTheMemoryBudgetIsRefusedAndTheConnectionKept: the
// read buffers are charged to -memory-budget, so a body it has no room for
// is skipped unread and refused with a Permissions Violation that names the
// limit; the connection goes on with its next command.
func TestBodyWithoutRoomInTheMemoryBudgetIsRefusedAndTheConnectionKept(t *testing.T) {
	const budget = 512 << 10
	r := newRig(t, func(o *sidecar.Options) { o.MemoryBudget, o.ReadBudgetWait = budget, 0 })
	got := r.watchOutside(t)
	c := r.raw(t)
	c.send("CONNECT {\"verbose\":false}\r\n" + bodyOf("big.x", 600_000) + bodyOf("small.x", 5) + "PING\r\n")
	want := fmt.Sprintf(`-ERR 'Permissions Violation for Publish to "big.x": its body of 600000 bytes found no room in the sidecar's memory budget (-memory-budget %d bytes, shared by the read buffers and the pending messages) within -read-budget-wait 0s'`, budget)
	if l := c.line(); l != want {
		t.Fatalf("got %q,\nwant %q", l, want)
	}
	if l := c.line(); l != "PONG" {
		t.Fatalf("got %q, want PONG: the connection goes on", l)
	}
	// small.x is the sentinel: it left after big.x would have.
	natstest.WaitFor(t, "the publish after the refused body arrives", func() bool { return len(got.all()) == 1 })
	if s := got.all(); s[0] != "small.x" {
		t.Fatalf("outside got %v, want only small.x", s)
	}
	if n := r.side.BodiesRefused(); n != 1 {
		t.Fatalf("BodiesRefused = %d, want 1", n)
	}
	if held := r.side.ReadBufferBytes(); held > protocol.StreamingReadBuffer || held > r.side.BudgetUsed() {
		t.Fatalf("read buffers hold %d bytes (budget used %d) once the connection is idle; want at most %d, within the budget", held, r.side.BudgetUsed(), protocol.StreamingReadBuffer)
	}
}

// TestBodyWaitsForRoomInTheMemoryBudget: a body that does not fit while
// another connection's body holds the budget waits for it (within
// -read-budget-wait) instead of being refused: it is read, and forwarded,
// only after the first one.
func TestBodyWaitsForRoomInTheMemoryBudget(t *testing.T) {
	const budget, size = 1 << 20, 600_000 // two bodies do not fit at once
	r := newRig(t, func(o *sidecar.Options) { o.MemoryBudget, o.ReadBudgetWait = budget, time.Minute })
	got := r.watchOutside(t)
	first, second := r.raw(t), r.raw(t)
	frame := bodyOf("first", size)
	first.send("CONNECT {\"verbose\":false}\r\n" + frame[:len(frame)-3]) // all but the body's last byte and its CRLF
	natstest.WaitFor(t, "the first body holds the budget", func() bool { return r.side.ReadBufferBytes() >= size })
	second.send("CONNECT {\"verbose\":false}\r\n" + bodyOf("second", size) + "PING\r\n")
	natstest.WaitFor(t, "the second body waits for room", func() bool { return r.side.ReadBudgetWaiting() == 1 })
	first.send(frame[len(frame)-3:] + "PING\r\n")
	for _, c := range []*rawClient{first, second} {
		if l := c.line(); l != "PONG" {
			t.Fatalf("got %q, want PONG and no refusal", l)
		}
	}
	natstest.WaitFor(t, "both bodies arrive", func() bool { return len(got.all()) == 2 })
	if s := got.all(); s[0] != "first" || s[1] != "second" {
		t.Fatalf("outside got %v, want first then second: the second waited for the first's room", s)
	}
	if refused, waits := r.side.BodiesRefused(), r.side.ReadBudgetWaits(); refused != 0 || waits != 1 {
		t.Fatalf("BodiesRefused = %d, ReadBudgetWaits = %d; want 0 and 1", refused, waits)
	}
	if used := r.side.BudgetUsed(); used > 2*protocol.StreamingReadBuffer {
		t.Fatalf("budget used %d once both are idle, want at most their streaming buffers", used)
	}
}

// TestSubscriptionsAreChargedToTheMemoryBudget: what a SUB holds is
// charged to -memory-budget, so a client's SUBs past it are refused (a
// Permissions Violation naming the limit, the connection kept, counted),
// and an UNSUB gives its room back.
func TestSubscriptionsAreChargedToTheMemoryBudget(t *testing.T) {
	const budget = 3*1024 + 512 // three SUBs of short subjects, not four
	r := newRig(t, func(o *sidecar.Options) { o.MemoryBudget = budget })
	c := r.raw(t)
	c.send("CONNECT {\"verbose\":false}\r\nSUB a 1\r\nSUB b 2\r\nSUB c 3\r\nSUB d 4\r\nPING\r\n")
	want := fmt.Sprintf(`-ERR 'Permissions Violation for Subscription to "d": the sidecar's memory budget has no room for another subscription (-memory-budget %d bytes, shared with the pending messages and the read buffers)'`, budget)
	if l := c.line(); l != want {
		t.Fatalf("got %q,\nwant %q", l, want)
	}
	if l := c.line(); l != "PONG" {
		t.Fatalf("got %q, want PONG", l)
	}
	if _, memory := r.side.SubscriptionsRefused(); memory != 1 {
		t.Fatalf("SUBs refused for memory: %d, want 1", memory)
	}
	c.send("UNSUB 1\r\nSUB d 4\r\nPING\r\n")
	if l := c.line(); l != "PONG" {
		t.Fatalf("got %q, want PONG: the UNSUB made room", l)
	}
	if n := len(r.side.Stats()); n != 3 {
		t.Fatalf("%d SUBs, want 3", n)
	}
	if _, memory := r.side.SubscriptionsRefused(); memory != 1 {
		t.Fatalf("SUBs refused for memory: %d, want still 1", memory)
	}
}
