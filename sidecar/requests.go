package sidecar

import (
	"sync/atomic"
	"time"
)

// Request latency: for a request the application makes (a PUB with a reply
// subject), the time from its arrival in the sidecar to the write of the
// first reply back to the application. Both ends are on this sidecar's
// monotonic clock, so it is exactly what the caller experiences.
const (
	// maxOutstandingRequests bounds the requests one connection is timed
	// for, and maxOutstandingBytes those of all connections together, by
	// the bytes of their reply subjects (up to 1,024 bytes each, the
	// application's choice); past either, new requests are not timed (and
	// counted as untimed), never refused. 8 MiB times 65,536 requests with
	// nats.go's reply subjects.
	maxOutstandingRequests = 10_000
	maxOutstandingBytes    = 8 << 20
	// requestTimeout is how long a request waits for its reply before it
	// stops being timed (nats.go's default request timeout is shorter).
	requestTimeout = time.Minute
)

// outstanding is a connection's table of requests waiting for replies.
type outstanding struct {
	mu      mutex[requestsRank]
	byReply subjectMap[int64] // reply subject -> arrival (nanotime)
	// size is byReply's length, for pending to read without mu on every
	// write to the application.
	size     atomic.Int64
	untimed  *atomic.Uint64 // the sidecar's count, for its metrics
	lastSwep int64
	// bytes is the entryBytes of byReply's entries; allBytes the sidecar's
	// sum of every connection's, which maxOutstandingBytes bounds.
	bytes    int64
	allBytes *atomic.Int64
}

func (o *outstanding) start(reply string, arrived int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	defer o.sized()
	if _, ok := o.byReply.get(reply); ok {
		o.byReply.set(reply, arrived) // the same reply subject again: timed from now
		return
	}
	cost := entryBytes(len(reply))
	if o.byReply.len() >= maxOutstandingRequests || o.allBytes.Load()+cost > maxOutstandingBytes {
		o.sweep(arrived)
		if o.byReply.len() >= maxOutstandingRequests || o.allBytes.Load()+cost > maxOutstandingBytes {
			o.untimed.Add(1)
			return
		}
	}
	o.byReply.set(reply, arrived)
	o.charge(cost)
}

// charge counts n more bytes of entries (less, when negative).
func (o *outstanding) charge(n int64) {
	o.bytes += n
	o.allBytes.Add(n)
}

// finish returns when the request answered on subject arrived, once.
func (o *outstanding) finish(subject string) (int64, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	defer o.sized()
	arrived, ok := o.byReply.take(subject)
	if ok {
		o.charge(-entryBytes(len(subject)))
	}
	return arrived, ok
}

// drop forgets every request, when the connection closes.
func (o *outstanding) drop() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.byReply = subjectMap[int64]{}
	o.charge(-o.bytes)
	o.sized()
}

// sized publishes byReply's length (o.mu is held).
func (o *outstanding) sized() { o.size.Store(int64(o.byReply.len())) }

// pending reports whether any request waits for its reply, without the
// lock: a write to the application looks for replies only then.
func (o *outstanding) pending() bool { return o.size.Load() > 0 }

// sweep forgets requests older than requestTimeout, at most once a second.
func (o *outstanding) sweep(now int64) {
	if now-o.lastSwep < int64(time.Second) {
		return
	}
	o.lastSwep = now
	o.charge(-o.byReply.retain(func(arrived int64) (int64, bool) {
		return arrived, now-arrived <= int64(requestTimeout)
	}))
}
