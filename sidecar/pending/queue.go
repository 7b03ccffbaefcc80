// Package pending holds the messages that wait in the sidecar for one local
// subscription: a bounded FIFO per subscription, so that an application
// that stops reading fills only its own queues, never memory without bound.
// Every message that arrives is accounted for exactly once: delivered,
// dropped with a reason, in flight to the socket, or still pending.
package pending

import (
	"fmt"
	"sync/atomic"
)

// Overflow is what a full queue does with the next message.
type Overflow uint8

const (
	// DropNewest refuses the arriving message.
	DropNewest Overflow = iota
	// DropOldest evicts the message that waited longest to make room.
	DropOldest
)

// Reason says why a message was dropped.
type Reason uint8

const (
	// ReasonOverflow: the queue was full (by messages or bytes).
	ReasonOverflow Reason = iota
	// ReasonClosed: the connection closed before the message was written.
	ReasonClosed
	// ReasonUnsubscribed: the application unsubscribed (or reached its
	// UNSUB message count) while the message waited.
	ReasonUnsubscribed
	// ReasonShed: a non-essential subscription's message, dropped to keep
	// the sidecar within its memory budget.
	ReasonShed
	// ReasonBudget: an essential subscription's message, dropped because
	// the memory budget was exhausted with nothing non-essential to shed.
	ReasonBudget
	// ReasonConnection: the connection's own limit on pending bytes, across
	// all its subscriptions, was reached.
	ReasonConnection
	// ReasonUnsupported: a status message (no responders) the client did
	// not ask for in CONNECT and could not read.
	ReasonUnsupported
	// ReasonKilled: the subscription's kill switch is engaged (by hand or
	// tripped): what waited was dropped at once, and what arrived before
	// the broker learnt that its interest was withdrawn is dropped too.
	ReasonKilled
	// ReasonShutdown: the sidecar was stopping (the pod terminates) and its
	// drain grace period ended before the application took the message.
	ReasonShutdown
	numReasons
)

func (r Reason) String() string {
	switch r {
	case ReasonOverflow:
		return "overflow"
	case ReasonClosed:
		return "closed"
	case ReasonUnsubscribed:
		return "unsubscribed"
	case ReasonShed:
		return "shed"
	case ReasonBudget:
		return "budget"
	case ReasonConnection:
		return "connection"
	case ReasonUnsupported:
		return "unsupported"
	case ReasonKilled:
		return "killed"
	case ReasonShutdown:
		return "shutdown"
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Limits bound one queue. Both must be at least 1.
type Limits struct {
	MaxMessages int
	MaxBytes    int64
	Overflow    Overflow
}

// Message is one message waiting for delivery. Size is what counts against
// MaxBytes (headers and payload).
type Message struct {
	Subject string
	Reply   string
	Header  []byte
	Data    []byte
	// ArrivedNanos is when the message entered the sidecar (monotonic), for
	// the dwell-time histogram.
	ArrivedNanos int64
	// SentUnixNanos is the publishing sidecar's stamp (wall clock), for the
	// end-to-end histogram; 0 when the message was not stamped.
	SentUnixNanos int64
	// NoResponders marks the broker's 503 status answer to a request.
	NoResponders bool
	// Body, when not nil, holds Header and Data, and the bytes Subject
	// and Reply view: the queue holds one reference to it while the
	// message is pending (see Shared). Whoever keeps Subject or Reply past
	// its Release must copy them.
	Body *Shared
}

// Size is the message's weight against MaxBytes.
func (m *Message) Size() int64 { return int64(len(m.Header) + len(m.Data)) }

// Counts is a snapshot of a queue's accounting. At any instant
// Arrived == Delivered + sum(Dropped) + InFlight + Pending.
type Counts struct {
	Arrived      uint64
	Delivered    uint64
	Dropped      [numReasons]uint64
	InFlight     uint64
	Pending      uint64
	PendingBytes int64
}

// Plus is c with d's counts added, field by field: the totals of two
// queues, or of one queue's spells.
func (c Counts) Plus(d Counts) Counts {
	c.Arrived += d.Arrived
	c.Delivered += d.Delivered
	for i := range c.Dropped {
		c.Dropped[i] += d.Dropped[i]
	}
	c.InFlight += d.InFlight
	c.Pending += d.Pending
	c.PendingBytes += d.PendingBytes
	return c
}

// Since is what a queue counted after base, an earlier snapshot of it:
// the arrivals, deliveries and drops since, and what c holds now (in
// flight and pending, which are not counts of events).
func (c Counts) Since(base Counts) Counts {
	c.Arrived -= base.Arrived
	c.Delivered -= base.Delivered
	for i := range c.Dropped {
		c.Dropped[i] -= base.Dropped[i]
	}
	return c
}

// Events is c without what is held now (in flight, pending): only the
// counts of arrivals, deliveries and drops, which only grow.
func (c Counts) Events() Counts {
	c.InFlight, c.Pending, c.PendingBytes = 0, 0, 0
	return c
}

// Balanced reports whether the accounting identity holds.
func (c Counts) Balanced() bool {
	dropped := uint64(0)
	for _, d := range c.Dropped {
		dropped += d
	}
	return c.Arrived == c.Delivered+dropped+c.InFlight+c.Pending
}

// Queue is a bounded FIFO with exact accounting. It is safe for one
// producer (the upstream) and one consumer (the connection's writer) at
// once, or more: every method takes its mutex, held only for O(1) work.
type Queue struct {
	budget    *Budget // nil: no sidecar-wide budget
	essential atomic.Bool
	conn      *Budget // nil: no per-connection limit; never shed

	mu     mutex
	closed bool
	limits Limits
	ring   []Message // grows by doubling up to MaxMessages, never beyond
	head   int
	counts Counts
	// left counts the messages that left the ring, by any way (taken,
	// evicted, shed, dropped): the position of its head in the FIFO of
	// every message it ever held (Position).
	left uint64

	// lateReason (under mu) counts what arrives after Close, and what was
	// in flight then and is not written: closed, or shutdown when the
	// sidecar's shutdown closed the queue (at shutdown everything
	// undelivered is lost to it, whichever step it was at).
	lateReason Reason
}

// New returns an empty queue; it panics on limits below 1, which the
// configuration's validation refuses first.
func New(limits Limits) *Queue {
	if limits.MaxMessages < 1 || limits.MaxBytes < 1 {
		panic(fmt.Sprintf("pending: limits must be at least 1, got %+v", limits))
	}
	return &Queue{limits: limits}
}

// WithBudget makes the queue hold its bytes against a sidecar-wide budget;
// call it before the queue is used. Close the queue to leave the budget.
func (q *Queue) WithBudget(b *Budget, essential bool) *Queue {
	q.budget = b
	q.essential.Store(essential)
	b.register(q, essential)
	return q
}

// WithConnectionLimit makes the queue hold its bytes against its
// connection's limit too (shared by all the connection's queues); call it
// before the queue is used.
func (q *Queue) WithConnectionLimit(b *Budget) *Queue {
	q.conn = b
	return q
}

// SetLimits changes the queue's limits and whether it is essential, for a
// configuration change. A smaller limit admits nothing new until the queue
// has drained below it; nothing already queued is dropped for it.
func (q *Queue) SetLimits(limits Limits, essential bool) {
	if limits.MaxMessages < 1 || limits.MaxBytes < 1 {
		return // refused by the configuration's validation first
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.limits = limits
	// Under q.mu (the budget's lock is a leaf), so that a Close, which
	// leaves the budget for good, is not undone by a late change.
	if q.budget != nil && !q.closed && essential != q.essential.Load() {
		q.budget.unregister(q)
		q.essential.Store(essential)
		q.budget.register(q, essential)
	}
}

// Close leaves the budget and drops whatever is still pending, for reason;
// a message pushed afterwards, or in flight and then not written, is
// counted as dropped (closed, or shutdown when reason is ReasonShutdown),
// never held. A second Close keeps the first one's reason for what comes
// late.
func (q *Queue) Close(reason Reason) int {
	q.mu.Lock()
	if q.budget != nil {
		q.budget.unregister(q)
	}
	if !q.closed {
		q.closed = true
		q.lateReason = ReasonClosed
		if reason == ReasonShutdown {
			q.lateReason = ReasonShutdown
		}
	}
	q.mu.Unlock()
	return q.DropAll(reason, nil)
}

// Push offers a message and reports whether it was queued. It takes one
// reference to m.Body, which it releases if it refuses m or drops it later. Under
// DropOldest it may evict older messages to make room (counted as
// overflow); a message larger than MaxBytes on its own is always refused.
// With a budget, the bytes are reserved first (see Budget).
func (q *Queue) Push(m Message) bool {
	size := m.Size()
	// The budgets are reserved before the queue's own lock: shedding for
	// the sidecar budget locks other queues, and a queue never holds its
	// lock while it takes another's.
	if q.conn != nil && !q.conn.reserve(size) {
		q.refuse(size, ReasonConnection)
		m.Body.Release()
		return false
	}
	if q.budget != nil && !q.budget.reserve(size) && !q.makeRoom(size) {
		if q.conn != nil {
			q.conn.release(size)
		}
		m.Body.Release()
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.counts.Arrived++
	if reason, refused := q.refusesLocked(size); refused {
		q.counts.Dropped[reason]++
		q.releaseBudget(size)
		m.Body.Release()
		return false
	}
	q.evictForLocked(size) // DropOldest: refusesLocked took DropNewest's refusal
	q.pushLocked(m)
	return true
}

// makeRoom is Push's answer to a budget without size bytes to spare: an
// essential queue has non-essential queues' oldest messages shed, and a
// queue that may be shed is refused. Before it sheds anyone's, an
// essential queue refuses what it would refuse anyway (full under
// DropNewest, over MaxBytes, closed) and, under DropOldest, evicts its own
// oldest: the budget sheds others only for what that does not free (it
// shed them for nothing). It reports whether the budget holds size bytes
// for the message now; if not, it counted the message dropped.
func (q *Queue) makeRoom(size int64) bool {
	essential := q.essential.Load()
	if essential {
		q.mu.Lock()
		_, refused := q.refusesLocked(size)
		if !refused {
			q.evictForLocked(size)
		}
		q.mu.Unlock()
		if !refused && (q.budget.reserve(size) || q.budget.shedFor(size)) {
			return true
		}
	}
	reason := ReasonShed // refuse counts the queue's own reason, if it has one
	if essential {
		reason = ReasonBudget
	}
	q.refuse(size, reason)
	return false
}

// refuse counts an arrival a budget refused: for the queue's own reason
// when it would have refused it anyway (closed, over MaxBytes, full under
// DropNewest), so that a closed queue's late arrivals count as closed (or
// shutdown) and a full queue's as overflow, whatever the budgets held;
// else for the budget's reason.
func (q *Queue) refuse(size int64, budgetReason Reason) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.counts.Arrived++
	if reason, refused := q.refusesLocked(size); refused {
		q.counts.Dropped[reason]++
		return
	}
	q.counts.Dropped[budgetReason]++
}

// evictForLocked drops the oldest messages, counted as overflow, until one
// of size bytes fits (DropOldest: refusesLocked refuses it under
// DropNewest, and one larger than MaxBytes).
func (q *Queue) evictForLocked(size int64) {
	for q.counts.Pending > 0 && q.full(size) {
		old := q.popLocked()
		old.Body.Release()
		q.counts.Dropped[ReasonOverflow]++
	}
}

// Reject counts an arrival that is dropped without being offered, for
// reason (the subscription is killed).
func (q *Queue) Reject(reason Reason) { q.countDrop(reason) }

// countDrop counts an arrival dropped before it reached the queue.
func (q *Queue) countDrop(reason Reason) {
	q.mu.Lock()
	q.counts.Arrived++
	q.counts.Dropped[reason]++
	q.mu.Unlock()
}

func (q *Queue) releaseBudget(n int64) {
	if q.budget != nil {
		q.budget.release(n)
	}
	if q.conn != nil {
		q.conn.release(n)
	}
}

// shedOldest drops the oldest pending message for the budget and reports
// whether there was one.
func (q *Queue) shedOldest() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.counts.Pending == 0 {
		return false
	}
	m := q.popLocked()
	m.Body.Release()
	q.counts.Dropped[ReasonShed]++
	return true
}

// refusesLocked reports whether the queue refuses a message of size bytes
// whatever room the budgets have, and why: it is closed, the message is
// larger than MaxBytes on its own, or it is full under DropNewest.
func (q *Queue) refusesLocked(size int64) (Reason, bool) {
	switch {
	case q.closed:
		return q.lateReason, true
	case size > q.limits.MaxBytes, q.limits.Overflow == DropNewest && q.full(size):
		return ReasonOverflow, true
	}
	return 0, false
}

func (q *Queue) full(size int64) bool {
	return int(q.counts.Pending) >= q.limits.MaxMessages || q.counts.PendingBytes+size > q.limits.MaxBytes
}

func (q *Queue) pushLocked(m Message) {
	n := int(q.counts.Pending)
	if n == len(q.ring) {
		q.grow()
	}
	q.ring[(q.head+n)%len(q.ring)] = m
	q.counts.Pending++
	q.counts.PendingBytes += m.Size()
}

func (q *Queue) grow() {
	size := min(max(2*len(q.ring), 8), q.limits.MaxMessages)
	size = max(size, int(q.counts.Pending)) // after a limit was lowered
	ring := make([]Message, size)
	n := int(q.counts.Pending)
	for i := range n {
		ring[i] = q.ring[(q.head+i)%len(q.ring)]
	}
	q.ring, q.head = ring, 0
}

func (q *Queue) popLocked() Message {
	m := q.ring[q.head]
	q.ring[q.head] = Message{} // let the payload be collected
	q.head = (q.head + 1) % len(q.ring)
	q.counts.Pending--
	q.counts.PendingBytes -= m.Size()
	q.left++
	q.releaseBudget(m.Size())
	return m
}

// Position is how many messages ever left the queue (taken, evicted, shed
// or dropped), and the position the newest one now pending will have left
// at: a message held now is gone once left reaches until. Messages refused
// on arrival never enter, and move neither.
func (q *Queue) Position() (left, until uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.left, q.left + q.counts.Pending
}

// Take removes the oldest message for writing; it is in flight until Done.
// The caller gets the queue's reference to its Body, and releases it once
// it copied the bytes out.
func (q *Queue) Take() (Message, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.counts.Pending == 0 {
		return Message{}, false
	}
	q.counts.InFlight++
	return q.popLocked(), true
}

// Verdict is what TakeEach's caller does with the oldest pending message.
type Verdict uint8

const (
	// Take takes it for writing: it is in flight until Settle.
	Take Verdict = iota
	// Stop leaves it, and what follows it, pending.
	Stop
	// Discard drops it, with the reason TakeEach was given, and goes on.
	Discard
)

// TakeEach takes a batch under one acquisition of the queue's lock: it
// shows each pending message, oldest first, to each, which copies what it
// needs of it (its Body is the queue's until each returns Take, and then
// the caller's to release), until each says Stop or the queue is empty.
// A message each discards is dropped for reason and its Body released.
// each runs under the queue's lock: it must not call back into the queue.
// It returns how many messages it took, in flight until Settle.
func (q *Queue) TakeEach(reason Reason, each func(*Message) Verdict) (taken int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.counts.Pending > 0 {
		m := &q.ring[q.head]
		switch each(m) {
		case Stop:
			return taken
		case Discard:
			m := q.popLocked()
			m.Body.Release()
			q.counts.Dropped[reason]++
			continue
		}
		q.popLocked()
		q.counts.InFlight++
		taken++
	}
	return taken
}

// Settle settles n messages from Take or TakeEach at once, as Done does
// one.
func (q *Queue) Settle(n int, delivered bool) {
	if n == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.counts.InFlight -= uint64(n)
	switch {
	case delivered:
		q.counts.Delivered += uint64(n)
	case q.closed:
		q.counts.Dropped[q.lateReason] += uint64(n)
	default:
		q.counts.Dropped[ReasonClosed] += uint64(n)
	}
}

// Done settles a message from Take: delivered, or dropped because the
// connection closed before it was written (closed; shutdown when the
// sidecar's shutdown closed the queue first).
func (q *Queue) Done(delivered bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.counts.InFlight--
	switch {
	case delivered:
		q.counts.Delivered++
	case q.closed:
		q.counts.Dropped[q.lateReason]++
	default:
		q.counts.Dropped[ReasonClosed]++
	}
}

// Discard settles a message from Take as dropped for reason, instead of
// writing it.
func (q *Queue) Discard(reason Reason) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.counts.InFlight--
	q.counts.Dropped[reason]++
}

// DropAll empties the queue with a reason (the connection closed, the
// subscription was removed or killed) and returns how many messages it
// dropped. each, when not nil, sees every dropped message (under the
// queue's lock: it must not call back into the queue).
func (q *Queue) DropAll(reason Reason, each func(*Message)) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := int(q.counts.Pending)
	for q.counts.Pending > 0 {
		m := q.popLocked()
		if each != nil {
			each(&m)
		}
		m.Body.Release()
	}
	q.counts.Dropped[reason] += uint64(n)
	return n
}

// Limits returns the queue's current limits.
func (q *Queue) Limits() Limits {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.limits
}

// Counts returns a consistent snapshot of the accounting.
func (q *Queue) Counts() Counts {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.counts
}
