package pending

import (
	"sync/atomic"
	"time"
)

// Budget bounds the bytes that all of a sidecar's queues hold together.
// When a message would exceed it, non-essential subscriptions are shed
// first: a non-essential queue drops the arriving message (ReasonShed),
// and an essential queue makes room by shedding the oldest messages of
// non-essential queues. Only when none is left to shed does an essential
// queue drop (ReasonBudget).
//
// Memory outside the queues may be charged to it too (Acquire, TryReserve,
// Release): the application connections' read buffers, so that what a
// client announces cannot grow the sidecar past its budget.
//
// Lock order: a queue never holds its own lock while it sheds another
// queue; shedding takes one queue's lock at a time. wakeMu is taken alone.
type Budget struct {
	max  int64
	used atomic.Int64

	mu        mutex
	sheddable map[*Queue]struct{} // the non-essential queues

	// waiters counts the Acquire calls waiting for room; release wakes
	// them (closes wake) only when there are any, so that the queues'
	// releases, one per message, cost one atomic load more.
	waiters atomic.Int32
	wakeMu  mutex
	wake    chan struct{}
	// waits counts the Acquire calls that had to wait.
	waits atomic.Uint64
}

// NewBudget returns a budget of max bytes.
func NewBudget(max int64) *Budget {
	return &Budget{max: max, sheddable: map[*Queue]struct{}{}, wake: make(chan struct{})}
}

// TryReserve charges n bytes of memory outside the queues if they fit
// now, shedding nothing: for memory that is worth having but not needed
// (a read buffer growing for speed).
func (b *Budget) TryReserve(n int64) bool { return b.reserve(n) }

// Acquire charges n bytes of memory outside the queues, as an essential
// queue would: if they do not fit, non-essential queues' oldest messages
// are shed, and if that is not enough, it waits for bytes to be released,
// up to wait or until cancel is closed. It reports whether it charged them.
func (b *Budget) Acquire(n int64, wait time.Duration, cancel <-chan struct{}) bool {
	if b.reserve(n) || b.shedFor(n) {
		return true
	}
	if n > b.max || wait <= 0 {
		return false
	}
	// Registered before the next attempt: a release after it sees the
	// waiter and closes the channel taken before the attempt, so that no
	// wake-up is lost between a failed attempt and the wait.
	b.waits.Add(1)
	b.waiters.Add(1)
	defer b.waiters.Add(-1)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		b.wakeMu.Lock()
		wake := b.wake
		b.wakeMu.Unlock()
		if b.reserve(n) || b.shedFor(n) {
			return true
		}
		select {
		case <-wake:
		case <-timer.C:
			return false
		case <-cancel:
			return false
		}
	}
}

// Waiting is how many Acquire calls wait for room now; Waits how many
// ever had to wait.
func (b *Budget) Waiting() int  { return int(b.waiters.Load()) }
func (b *Budget) Waits() uint64 { return b.waits.Load() }

// Release gives back n bytes that TryReserve or Acquire charged.
func (b *Budget) Release(n int64) { b.release(n) }

// Used is the bytes held now.
func (b *Budget) Used() int64 { return b.used.Load() }

// Max is the budget.
func (b *Budget) Max() int64 { return b.max }

func (b *Budget) reserve(n int64) bool {
	for {
		used := b.used.Load()
		if used+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

func (b *Budget) release(n int64) {
	b.used.Add(-n)
	if b.waiters.Load() > 0 {
		b.wakeMu.Lock()
		close(b.wake)
		b.wake = make(chan struct{})
		b.wakeMu.Unlock()
	}
}

func (b *Budget) register(q *Queue, essential bool) {
	if essential {
		return
	}
	b.mu.Lock()
	b.sheddable[q] = struct{}{}
	b.mu.Unlock()
}

func (b *Budget) unregister(q *Queue) {
	b.mu.Lock()
	delete(b.sheddable, q)
	b.mu.Unlock()
}

// shedFor drops the oldest messages of non-essential queues until n bytes
// can be reserved, and reserves them; it reports whether it could.
func (b *Budget) shedFor(n int64) bool {
	if n > b.max {
		return false // no shedding makes room for it
	}
	b.mu.Lock()
	victims := make([]*Queue, 0, len(b.sheddable))
	for q := range b.sheddable {
		victims = append(victims, q)
	}
	b.mu.Unlock()
	for _, q := range victims {
		for {
			if b.reserve(n) {
				return true
			}
			if !q.shedOldest() {
				break // this one is empty; try the next
			}
		}
	}
	return b.reserve(n)
}
