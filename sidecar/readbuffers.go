package sidecar

import (
	"sync/atomic"
	"time"

	"github.com/weighstation/weighstation/sidecar/pending"
	"github.com/weighstation/weighstation/sidecar/protocol"
)

// Read buffers. A connection's reader parses commands where it read them
// (protocol.Buffer): 4 KiB while the client is quiet, up to 64 KiB while it
// streams, and one frame's size for a body larger than that, up to
// max_payload. Everything past the first 4 KiB comes from readBuffers and
// is charged to the memory budget that the pending messages share, so that
// a client that announces 1 MiB bodies on each of its 256 connections
// cannot take the sidecar past it: growth for speed is taken only when
// there is room, and a body waits for room (shedding non-essential queues
// first, as an essential queue does) up to ReadBudgetWait, after which it
// is skipped unread and the publish refused.
//
// Frame buffers (past 64 KiB) are kept for reuse, up to
// maxPooledReadBuffers, uncharged while they wait: a frame's buffer is let
// go as soon as the frame is consumed, and the next large body, on this
// connection or another, takes it, so that a flood of large bodies is not
// an allocation each, which would outrun the garbage collector.
const (
	// maxPooledReadBuffers bounds the frame buffers kept for reuse (part
	// of the sidecar's fixed overhead, docs/sidecar.md).
	maxPooledReadBuffers = 4 << 20
	// readBufferClass is the granularity of frame buffers past 64 KiB, so
	// that frames of nearly the same size share buffers.
	readBufferClass = protocol.StreamingReadBuffer
)

// readBuffers provides the application connections' read buffers past
// their initial size.
type readBuffers struct {
	budget *pending.Budget
	wait   time.Duration

	// charged is the bytes of read buffers in use, charged to budget.
	charged atomic.Int64

	mu     mutex[readBuffersRank]
	free   map[int][][]byte // frame buffers kept for reuse, by size
	pooled int              // their bytes
}

func newReadBuffers(budget *pending.Budget, wait time.Duration) *readBuffers {
	return &readBuffers{budget: budget, wait: wait, free: map[int][][]byte{}}
}

// sizeFor rounds a buffer's size up to its class: a power of two up to
// StreamingReadBuffer (the buffer doubles there), and whole multiples of
// readBufferClass past it.
func sizeFor(size int) int {
	if size <= protocol.StreamingReadBuffer {
		n := protocol.InitialReadBuffer
		for n < size {
			n *= 2
		}
		return n
	}
	return (size + readBufferClass - 1) / readBufferClass * readBufferClass
}

// get charges and returns a buffer of at least size bytes, or nil; see
// protocol.Memory. A needed one may wait up to wait, or until cancel.
func (rb *readBuffers) get(size int, needed bool, cancel <-chan struct{}) []byte {
	size = sizeFor(size)
	var ok bool
	if needed {
		ok = rb.budget.Acquire(int64(size), rb.wait, cancel)
	} else {
		ok = rb.budget.TryReserve(int64(size))
	}
	if !ok {
		return nil
	}
	rb.charged.Add(int64(size))
	if size > protocol.StreamingReadBuffer {
		rb.mu.Lock()
		if list := rb.free[size]; len(list) > 0 {
			buf := list[len(list)-1]
			list[len(list)-1] = nil
			rb.free[size] = list[:len(list)-1]
			rb.pooled -= size
			rb.mu.Unlock()
			return buf
		}
		rb.mu.Unlock()
	}
	return make([]byte, size)
}

// put gives back a buffer get returned: its charge at once, and the buffer
// itself to the pool when it is a frame buffer and there is room.
func (rb *readBuffers) put(buf []byte) {
	size := len(buf)
	rb.charged.Add(-int64(size))
	if size > protocol.StreamingReadBuffer {
		rb.mu.Lock()
		if rb.pooled+size <= maxPooledReadBuffers {
			rb.free[size] = append(rb.free[size], buf)
			rb.pooled += size
		}
		rb.mu.Unlock()
	}
	// After the pool took it: a reader waiting for room, woken by the
	// release, finds the buffer there.
	rb.budget.Release(int64(size))
}

// connReadMemory is one connection's protocol.Memory: its waits end when
// the connection closes.
type connReadMemory struct{ c *conn }

func (m connReadMemory) Get(size int, needed bool) []byte {
	return m.c.srv.readBuffers.get(size, needed, m.c.done)
}

func (m connReadMemory) Put(buf []byte) { m.c.srv.readBuffers.put(buf) }

// ReadBufferBytes is what the application connections' read buffers hold
// past their initial size (protocol.InitialReadBuffer each), charged to the
// memory budget.
func (s *Server) ReadBufferBytes() int64 { return s.readBuffers.charged.Load() }

// ReadBudgetWaiting is how many connections wait now for room in the
// memory budget for a body; ReadBudgetWaits how many bodies ever waited.
func (s *Server) ReadBudgetWaiting() int  { return s.budget.Waiting() }
func (s *Server) ReadBudgetWaits() uint64 { return s.budget.Waits() }
