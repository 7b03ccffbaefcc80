package upstream

import (
	"bytes"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/weighstation/weighstation/internal/wake"
	"github.com/weighstation/weighstation/sidecar/rawsock"
)

var (
	pingLine = []byte("PING\r\n")
	pongLine = []byte("PONG\r\n")
	// headerStart is the version line of a header block the sidecar makes
	// when the application's message had none.
	headerStart = []byte("NATS/1.0\r\n")
	crlf        = []byte("\r\n")
)

// maxSpareBuffer is the largest outbound buffer kept for reuse after a
// write: a burst of large messages grows the buffers, and they are let go
// when the burst is written rather than held for ever.
const maxSpareBuffer = 1 << 20

// Publish queues one message for the broker; WriteQueued (or the writer)
// sends it. header is a complete header block ("NATS/1.0\r\n...\r\n") or
// nil; extra are header lines ("Key: value\r\n") inserted after its version
// line, a block being made for them when header is nil. So a stamp is
// added without decoding the application's headers. The slices are copied
// before Publish returns.
//
// While the broker is connected and MaxPendingBytes wait for the socket,
// Publish writes them itself, or waits for the goroutine that is writing
// them: either way its caller stops reading its application, and TCP
// pushes back. It holds no lock of the caller's while it writes or waits;
// callers must not either. The size is checked against max_payload after
// that, against the broker then connected. While the broker is away, the message is held
// within OutageBufferBytes, or refused with ErrOutageBufferFull.
func (c *Client) Publish(subject, reply, header, extra, payload []byte) error {
	return c.publish(subject, reply, header, extra, payload, true)
}

// PublishNoWait is Publish for callers that must never wait (the reader's
// own answers): it returns ErrPendingFull rather than waiting for room.
func (c *Client) PublishNoWait(subject, reply, header, extra, payload []byte) error {
	err := c.publish(subject, reply, header, extra, payload, false)
	c.kick()
	return err
}

func (c *Client) publish(subject, reply, header, extra, payload []byte, wait bool) error {
	headerLen := len(header) + len(extra)
	if header == nil && extra != nil {
		headerLen = len(headerStart) + len(extra) + len(crlf)
	}
	size := headerLen + len(payload)
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if c.closed {
			return ErrClosed
		}
		if c.conn == nil {
			if len(c.out)+size+len(subject)+len(reply)+32 > c.opts.OutageBufferBytes {
				return fmt.Errorf("%w (%d bytes held: the sidecar's OutageBufferBytes)", ErrOutageBufferFull, c.opts.OutageBufferBytes)
			}
			c.heldMax = max(c.heldMax, size)
			break
		}
		if len(c.out) < c.opts.MaxPendingBytes {
			break
		}
		if !wait {
			return fmt.Errorf("%w (%d bytes wait for the socket: MaxPendingBytes)", ErrPendingFull, c.opts.MaxPendingBytes)
		}
		if !c.writing && !c.held {
			// Nobody is writing what fills the queue (its publishers
			// write when they would read, the writer goroutine when
			// woken): write it here rather than wait for a wake-up.
			c.writeLocked(&c.callerWrites)
			continue
		}
		c.room.Wait() // for the writer, or for a renewal's drain (held)
	}
	if info := c.info.Load(); info != nil && int64(size) > info.MaxPayload {
		return fmt.Errorf("%w: %d bytes of headers and payload, the broker's max_payload is %d", ErrMaxPayload, size, info.MaxPayload)
	}
	c.out = appendFrame(c.out, subject, reply, header, extra, payload, headerLen)
	c.outMsgs++
	return nil
}

// appendFrame appends a PUB, or an HPUB when there are headers.
func appendFrame(dst, subject, reply, header, extra, payload []byte, headerLen int) []byte {
	if headerLen == 0 {
		dst = append(dst, "PUB "...)
	} else {
		dst = append(dst, "HPUB "...)
	}
	dst = append(dst, subject...)
	dst = append(dst, ' ')
	if len(reply) > 0 {
		dst = append(dst, reply...)
		dst = append(dst, ' ')
	}
	if headerLen > 0 {
		dst = strconv.AppendInt(dst, int64(headerLen), 10)
		dst = append(dst, ' ')
	}
	dst = strconv.AppendInt(dst, int64(headerLen+len(payload)), 10)
	dst = append(dst, crlf...)
	switch {
	case header == nil && extra != nil:
		dst = append(dst, headerStart...)
		dst = append(dst, extra...)
		dst = append(dst, crlf...)
	case header != nil:
		split := versionLineEnd(header)
		dst = append(dst, header[:split]...)
		dst = append(dst, extra...)
		dst = append(dst, header[split:]...)
	}
	dst = append(dst, payload...)
	return append(dst, crlf...)
}

// versionLineEnd is where a header block's first line ends (after its
// CRLF), where inserted lines go.
func versionLineEnd(header []byte) int {
	for i := 0; i+1 < len(header); i++ {
		if header[i] == '\r' && header[i+1] == '\n' {
			return i + 2
		}
	}
	return len(header)
}

func appendSub(dst []byte, subject, queue string, sid uint64) []byte {
	dst = append(dst, "SUB "...)
	dst = append(dst, subject...)
	dst = append(dst, ' ')
	if queue != "" {
		dst = append(dst, queue...)
		dst = append(dst, ' ')
	}
	dst = strconv.AppendUint(dst, sid, 10)
	return append(dst, crlf...)
}

func appendUnsub(dst []byte, sid uint64) []byte {
	dst = append(dst, "UNSUB "...)
	dst = strconv.AppendUint(dst, sid, 10)
	return append(dst, crlf...)
}

// WriteQueued writes what is queued now, on the caller's goroutine, unless
// another goroutine is writing (it then writes this too). An application
// connection calls it when its read buffer holds no further command, so
// that a burst of publishes goes up in one write, and a lone one at once.
func (c *Client) WriteQueued() {
	c.mu.Lock()
	c.writeLocked(&c.callerWrites)
	c.mu.Unlock()
}

// WriteSoon has the writer goroutine write what is queued, so that the
// caller can go on at once (a reader that is behind its application reads
// again while the writer writes). When the writer is already writing, it
// writes this too before it sleeps.
//
// A caller that finds HandoffBacklogBytes or more queued does not go on,
// though: it waits for a write in progress, or writes itself when none
// is. Otherwise a reader that outran the writer (which takes a wake-up to
// start) would queue up to MaxPendingBytes, in buffers too large to reuse.
func (c *Client) WriteSoon() {
	c.handoffs.Add(1)
	c.kick()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.out) < c.opts.HandoffBacklogBytes {
		return
	}
	c.handoffsHeld.Add(1)
	for len(c.out) >= c.opts.HandoffBacklogBytes && c.conn != nil && !c.closed {
		if c.writing || c.held {
			c.room.Wait()
		} else {
			c.writeLocked(&c.callerWrites)
		}
	}
}

// FlushAsync calls done once the broker confirmed everything queued before
// it (a PING and its PONG), or with an error when the connection is lost
// first. done runs on the client's reader; it must not block.
func (c *Client) FlushAsync(done func(error)) {
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		done(ErrClosed)
		return
	case c.conn == nil:
		c.mu.Unlock()
		done(ErrNotConnected)
		return
	}
	c.waiting = append(c.waiting, done)
	c.pingWanted = true
	c.mu.Unlock()
	c.kick()
}

// Flush waits until the broker confirmed everything queued before it, at
// most timeout.
func (c *Client) Flush(timeout time.Duration) error {
	confirmed := make(chan error, 1)
	c.FlushAsync(func(err error) { confirmed <- err })
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-confirmed:
		return err
	case <-t.C:
		return ErrFlushTimeout
	}
}

// kick wakes the writer.
func (c *Client) kick() { wake.Poke(c.wake) }

// writeLocked writes what is queued, unless another goroutine is writing
// (which then writes it too). Called with mu held; it releases mu while the
// socket is written. One writev carries the control lines, the publishes
// and, when one is due, a PING that asks the broker to confirm them; each
// is counted in writes (callerWrites or writerWrites).
//
// After its first write it writes again only if another goroutine asked
// for a write meanwhile (and left it to this one), not merely because more
// was queued: whoever queues asks for a write afterwards (WriteQueued,
// WriteSoon, kick), so nothing is left behind, and a writer that took
// whatever a running reader had just queued would write a message or two
// per system call while that reader kept queuing.
//
// From a renewal's switch until the broker confirmed the last publishes
// of the old connection (held), only control lines are written: the
// publishes and the PINGs that would confirm them wait, so that no
// publisher's message overtakes its earlier ones.
func (c *Client) writeLocked(writes *atomic.Uint64) {
	if c.writing {
		c.deferred = true // the goroutine writing now writes again for us
	}
	for again := true; again && c.conn != nil && !c.writing && (len(c.ctl) > 0 || !c.held && (len(c.out) > 0 || c.pingWanted)); {
		c.deferred = false
		conn, raw := c.conn, c.connWriter
		ctl := c.ctl
		c.ctl, c.spareCtl = c.spareCtl[:0], nil
		var out []byte
		msgs, tookOut := 0, !c.held
		if tookOut {
			out, msgs = c.out, c.outMsgs
			c.out, c.outMsgs = c.spareOut[:0], 0
			c.spareOut = nil
		}
		now := time.Now()
		confirm := tookOut && (c.pingWanted || (c.unconfirmed+msgs > 0 && len(c.sent) == 0 && now.Sub(c.lastPing) >= c.opts.ConfirmInterval))
		if confirm {
			c.sent = append(c.sent, ping{confirms: c.unconfirmed + msgs, waiters: c.waiting})
			c.unconfirmed, c.waiting, c.pingWanted, c.lastPing = 0, nil, false, now
		} else {
			c.unconfirmed += msgs
		}
		c.writing = true
		c.mu.Unlock()
		writes.Add(1)

		// The writer's own iovec: only the goroutine that set writing
		// uses it, and a field does not escape per write as a local would.
		c.iov = append(c.iovArray[:0], ctl, out)
		if confirm {
			c.iov = append(c.iov, pingLine)
		}
		// First without blocking, as a raw system call (package rawsock:
		// no wake-up of the runtime's monitor per write); what the socket
		// did not take, with net.Conn, which waits for room.
		var err error
		if raw != nil {
			rawsock.Consume(&c.iov, raw.WriteNow(c.iov))
		}
		if len(c.iov) > 0 {
			err = c.writeBlocking(conn, now)
		}
		clear(c.iovArray[:]) // no reference to the buffers it wrote

		c.mu.Lock()
		c.writing = false
		again = c.deferred // asked for while this write was under way
		c.spareCtl = reusable(ctl)
		if tookOut {
			c.spareOut = reusable(out)
		}
		c.room.Broadcast()
		if err != nil {
			c.mu.Unlock()
			c.lost(conn, err)
			c.mu.Lock()
		}
	}
	if c.conn != nil && c.unconfirmed > 0 && !c.confirmArmed {
		c.confirmArmed = true // the writer's timer confirms them if no later write does
		c.kick()
	}
}

// writeBlocking writes c.iov with net.Conn, which waits for room, within
// the time a silent broker is given (PingInterval × MaxPingsOut): a
// writer blocked in the write cannot count PINGs, and a broker whose
// machine keeps TCP alive but reads nothing would hold it, and every
// publisher behind it, for ever.
//
// The deadline is renewed only when half of it has passed (a write that
// blocks is given between half and all of it): a deadline set and cleared
// around every write that blocks cost a timer's update each, and a burst
// blocks once every few dozen messages. Only the goroutine that set
// writing calls it.
func (c *Client) writeBlocking(conn net.Conn, now time.Time) error {
	limit := c.opts.PingInterval * time.Duration(c.opts.MaxPingsOut)
	if conn != c.deadlineOn || now.Sub(c.deadlineSet) > limit/2 {
		_ = conn.SetWriteDeadline(now.Add(limit))
		c.deadlineOn, c.deadlineSet = conn, now
	}
	_, err := c.iov.WriteTo(conn) // it consumes c.iov, not the array
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return fmt.Errorf("the broker took no more of a write for %s to %s (PingInterval × MaxPingsOut): %w", limit/2, limit, err)
	}
	return err
}

func reusable(b []byte) []byte {
	if cap(b) > maxSpareBuffer {
		return nil
	}
	return b[:0]
}

// writeLoop writes what others queued without writing (control lines,
// answers from the reader, flushes), asks the broker to confirm messages
// left unconfirmed, and checks that an idle connection is alive.
func (c *Client) writeLoop() {
	defer c.wg.Done()
	alive := time.NewTicker(c.opts.PingInterval)
	defer alive.Stop()
	confirm := time.NewTimer(c.opts.ConfirmInterval)
	defer confirm.Stop()
	armed := true // the timer runs
	for {
		select {
		case <-c.done:
			return
		case <-c.wake:
		case <-confirm.C:
			c.mu.Lock()
			c.confirmArmed, armed = false, false
			if c.conn != nil && c.unconfirmed > 0 && len(c.sent) == 0 {
				c.pingWanted = true
			}
			c.mu.Unlock()
		case <-alive.C:
			c.mu.Lock()
			conn := c.conn
			if conn != nil && c.pingsOut >= c.opts.MaxPingsOut {
				c.mu.Unlock()
				c.lost(conn, errStale)
				continue
			}
			if conn != nil {
				c.pingsOut++
				c.pingWanted = true
			}
			c.mu.Unlock()
		}
		c.mu.Lock()
		c.writeLocked(&c.writerWrites)
		if c.confirmArmed && !armed {
			armed = true
			confirm.Reset(c.opts.ConfirmInterval)
		}
		c.mu.Unlock()
	}
}

// keepHeld keeps the oldest of held publishes (PUB and HPUB frames this
// client wrote) that fit in limit bytes, and returns them and how many
// were dropped.
func keepHeld(held []byte, limit int) ([]byte, int) {
	n, dropped := 0, 0
	for rest := held; len(rest) > 0; {
		frame, _ := heldFrame(rest)
		if dropped == 0 && n+frame <= limit {
			n += frame // in order: nothing after a dropped one is kept
		} else {
			dropped++
		}
		rest = rest[frame:]
	}
	return held[:n], dropped
}

// heldFrame measures the publish frame held begins with (one this client
// wrote: its line's last argument is the size of what follows): its
// length, and that size.
func heldFrame(held []byte) (frame, size int) {
	eol := bytes.IndexByte(held, '\n')
	line := held[:eol-1]
	size, _ = atoi(line[bytes.LastIndexByte(line, ' ')+1:])
	return eol + 1 + size + 2, size
}

// dropOversize removes from held publishes (PUB and HPUB frames this
// client wrote) those whose size exceeds maxPayload: a broker refuses them
// by closing the connection. It returns what is kept and how many were
// dropped.
func dropOversize(held []byte, maxPayload int) ([]byte, int) {
	kept := held[:0:0]
	dropped := 0
	for len(held) > 0 {
		n, size := heldFrame(held)
		frame := held[:n]
		held = held[n:]
		if size > maxPayload {
			dropped++
			continue
		}
		kept = append(kept, frame...)
	}
	return kept, dropped
}
