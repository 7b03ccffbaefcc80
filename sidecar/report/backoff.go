package report

import (
	"math/rand/v2"
	"time"
)

// backoff is the xDS client's: doubling from initial up to max, with equal
// jitter (at least half the backoff), so that a fleet of sidecars that lost
// the operator together does not return together; and from initial again
// after a stream that worked.
type backoff struct {
	initial, max, next time.Duration
}

func newBackoff(initial, max time.Duration) *backoff {
	return &backoff{initial: initial, max: max, next: initial}
}

// wait is the time to wait before the next attempt, after a stream that
// worked or not.
func (b *backoff) wait(worked bool) time.Duration {
	if worked {
		b.next = b.initial
	}
	d := b.next/2 + rand.N(b.next/2+1)
	b.next = min(2*b.next, b.max)
	return d
}
