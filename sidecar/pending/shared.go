package pending

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// Shared is a message body that several queues hold at once (a fan-out to
// local SUBs), reference-counted so that its buffer returns to a pool when
// the last holder is done with it rather than to the garbage collector.
//
// Ownership: whoever makes one holds one reference. Push takes one
// reference of the message's Body (the caller retains first) and releases
// it when it refuses or later drops the message; Take hands its reference
// to the taker, who releases it once it copied the bytes out.
type Shared struct {
	Bytes []byte
	refs  atomic.Int32
	class int // index in bodyPools, -1 when not pooled
}

// Pooled bodies come in power-of-two classes from 256 B to 1 MiB; larger
// ones are allocated and left to the collector.
const (
	minPooledBits = 8
	maxPooledBits = 20
)

var bodyPools [maxPooledBits - minPooledBits + 1]sync.Pool

// NewShared returns a body of n bytes with one reference, from a pool when
// it is of a pooled size.
func NewShared(n int) *Shared {
	b := bits.Len(uint(max(n-1, 0)))
	b = max(b, minPooledBits)
	if b > maxPooledBits {
		s := &Shared{Bytes: make([]byte, n), class: -1}
		s.refs.Store(1)
		return s
	}
	class := b - minPooledBits
	s, _ := bodyPools[class].Get().(*Shared)
	if s == nil {
		s = &Shared{Bytes: make([]byte, 1<<b), class: class}
	}
	s.Bytes = s.Bytes[:n]
	s.refs.Store(1)
	return s
}

// Retain adds a reference. Nil is allowed (a message with no shared body).
func (s *Shared) Retain() {
	if s != nil {
		s.refs.Add(1)
	}
}

// Release drops a reference; the last one returns the buffer to its pool.
// Releasing more than was retained is a bug, and panics rather than let
// two messages share a buffer.
func (s *Shared) Release() {
	if s == nil {
		return
	}
	switch n := s.refs.Add(-1); {
	case n < 0:
		panic("pending: a shared message body was released more often than retained")
	case n == 0 && s.class >= 0:
		s.Bytes = s.Bytes[:cap(s.Bytes)]
		bodyPools[s.class].Put(s)
	}
}
