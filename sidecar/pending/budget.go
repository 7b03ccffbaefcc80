package pending

import (
	"sync"
	"sync/atomic"
)

// Budget bounds the bytes that all of a sidecar's queues hold together.
// When a message would exceed it, non-essential subscriptions are shed
// first: a non-essential queue drops the arriving message (ReasonShed),
// and an essential queue makes room by shedding the oldest messages of
// non-essential queues. Only when none is left to shed does an essential
// queue drop (ReasonBudget).
//
// Lock order: a queue never holds its own lock while it sheds another
// queue; shedding takes one queue's lock at a time.
type Budget struct {
	max  int64
	used atomic.Int64

	mu        sync.Mutex
	sheddable map[*Queue]struct{} // the non-essential queues
}

// NewBudget returns a budget of max bytes.
func NewBudget(max int64) *Budget {
	return &Budget{max: max, sheddable: map[*Queue]struct{}{}}
}

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

func (b *Budget) release(n int64) { b.used.Add(-n) }

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
