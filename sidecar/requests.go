package sidecar

import (
	"sync"
	"sync/atomic"
	"time"
)

// Request latency: for a request the application makes (a PUB with a reply
// subject), the time from its arrival in the sidecar to the write of the
// first reply back to the application. Both ends are on this sidecar's
// monotonic clock, so it is exactly what the caller experiences.
const (
	// maxOutstandingRequests bounds the requests one connection is timed
	// for; past it, new requests are not timed (and counted as untimed),
	// never refused.
	maxOutstandingRequests = 10_000
	// requestTimeout is how long a request waits for its reply before it
	// stops being timed (nats.go's default request timeout is shorter).
	requestTimeout = time.Minute
)

// outstanding is a connection's table of requests waiting for replies.
type outstanding struct {
	mu       sync.Mutex
	byReply  subjectMap[int64] // reply subject -> arrival (nanotime)
	untimed  *atomic.Uint64    // the sidecar's count, for its metrics
	lastSwep int64
}

func (o *outstanding) start(reply string, arrived int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.byReply.len() >= maxOutstandingRequests {
		o.sweep(arrived)
		if o.byReply.len() >= maxOutstandingRequests {
			o.untimed.Add(1)
			return
		}
	}
	o.byReply.set(reply, arrived)
}

// finish returns when the request answered on subject arrived, once.
func (o *outstanding) finish(subject string) (int64, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.byReply.take(subject)
}

func (o *outstanding) pending() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.byReply.len() > 0
}

// sweep forgets requests older than requestTimeout, at most once a second.
func (o *outstanding) sweep(now int64) {
	if now-o.lastSwep < int64(time.Second) {
		return
	}
	o.lastSwep = now
	o.byReply.retain(func(arrived int64) (int64, bool) {
		return arrived, now-arrived <= int64(requestTimeout)
	})
}
