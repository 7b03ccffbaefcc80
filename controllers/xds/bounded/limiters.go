package bounded

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limiters are token buckets by key (a peer's address, a pod's UID), at
// most Cap of them. Past the bound the least recently used bucket is
// forgotten: its key starts again with a full bucket, so an eviction can
// give one caller at most one extra burst, and a flood of new keys cannot
// grow the map. A global limit beside it (one rate.Limiter) is what bounds
// the sum.
type Limiters[K comparable] struct {
	rate  rate.Limit
	burst int

	mu      sync.Mutex
	buckets *LRU[K, *rate.Limiter]
	evicted uint64
}

// NewLimiters returns buckets of burst tokens refilled at r per second,
// for at most capacity keys.
func NewLimiters[K comparable](r rate.Limit, burst, capacity int) *Limiters[K] {
	l := &Limiters[K]{rate: r, burst: burst, buckets: NewLRU[K, *rate.Limiter](capacity)}
	l.buckets.OnEvict = func(K, *rate.Limiter) { l.evicted++ }
	return l
}

// Allow takes a token from key's bucket at now, and reports whether there
// was one.
func (l *Limiters[K]) Allow(key K, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets.Get(key)
	if !ok {
		b = rate.NewLimiter(l.rate, l.burst)
		l.buckets.Add(key, b)
	}
	return b.AllowN(now, 1)
}

// Len is the number of keys with a bucket; Evicted how many were
// forgotten for room.
func (l *Limiters[K]) Len() (n int, evicted uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buckets.Len(), l.evicted
}
