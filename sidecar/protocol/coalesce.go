package protocol

import (
	"strings"
	"time"
)

// ErrorCoalescer decides which of a connection's -ERR replies are sent: at
// most one per key (for example a refused subject) per interval. The rest
// are counted, not sent. Stock clients queue every -ERR they receive without
// limit, so a publisher refused in a tight loop would otherwise grow its own
// client's memory without bound.
//
// It remembers at most maxKeys keys, of ErrorKeyBytes bytes each on
// average (a subject may be 1,024 bytes long); when that many were all
// refused within the interval, further new keys are suppressed too (and
// counted), so its own memory is bounded. It is not safe for concurrent
// use: each connection owns one.
type ErrorCoalescer struct {
	interval           time.Duration
	maxKeys            int
	keyBytes, maxBytes int
	lastSent           map[string]time.Time
	suppressed         uint64
}

// Default coalescing: one -ERR per subject per second, remembering up to
// 1,024 subjects per connection, 64 KiB of them (about 150 KiB with the
// map, at worst).
const (
	DefaultErrorInterval = time.Second
	DefaultErrorKeys     = 1024
	// ErrorKeyBytes is the average key length a coalescer keeps room for:
	// maxKeys of them bound the bytes of its keys.
	ErrorKeyBytes = 64
)

// NewErrorCoalescer returns a coalescer allowing one error per key per
// interval, remembering at most maxKeys keys of maxKeys*ErrorKeyBytes
// bytes.
func NewErrorCoalescer(interval time.Duration, maxKeys int) *ErrorCoalescer {
	return &ErrorCoalescer{interval: interval, maxKeys: maxKeys, maxBytes: maxKeys * ErrorKeyBytes, lastSent: make(map[string]time.Time)}
}

// Allow reports whether an error for key may be sent now; if not, it counts
// it as suppressed. key may be a view of a buffer the caller reuses: it is
// copied when it is kept.
func (c *ErrorCoalescer) Allow(key string, now time.Time) bool {
	if last, ok := c.lastSent[key]; ok {
		if now.Sub(last) < c.interval {
			c.suppressed++
			return false
		}
		c.lastSent[strings.Clone(key)] = now // a map assignment keeps the new key
		return true
	}
	if len(c.lastSent) >= c.maxKeys || c.keyBytes+len(key) > c.maxBytes {
		c.forgetOlderThan(now.Add(-c.interval))
		if len(c.lastSent) >= c.maxKeys || c.keyBytes+len(key) > c.maxBytes {
			c.suppressed++
			return false
		}
	}
	c.lastSent[strings.Clone(key)] = now
	c.keyBytes += len(key)
	return true
}

// Suppressed is the number of errors not sent.
func (c *ErrorCoalescer) Suppressed() uint64 { return c.suppressed }

func (c *ErrorCoalescer) forgetOlderThan(cutoff time.Time) {
	for k, t := range c.lastSent {
		if t.Before(cutoff) {
			delete(c.lastSent, k)
			c.keyBytes -= len(k)
		}
	}
}
