package sidecar

import (
	"net"
	"time"

	"github.com/weighstation/weighstation/sidecar/pending"
	"github.com/weighstation/weighstation/sidecar/protocol"
	"github.com/weighstation/weighstation/sidecar/rawsock"
)

// A connection's writes. Whoever holds conn.writeMu gathers control replies
// and queued messages into one batch, writes it and settles every message
// it took as delivered or dropped. Two goroutines may hold it:
//
//   - the upstream reader, inline: once it has routed everything it read
//     and before it waits for more, it writes each connection it delivered
//     to whose writer is idle, without blocking (nats-server's read loop
//     flushes its clients the same way). A write that would block, or
//     completes only in part, is left to the connection's writer;
//   - the connection's writer goroutine, woken for control replies, for
//     what an inline write left, and for messages that arrive while the
//     writer holds the lock.
//
// So a message moves from the broker's socket to the application's in one
// goroutine when the application keeps up, with no hand-off between
// goroutines, and a slow application still never stalls the reader.
//
// The lock order, writeMu's place in it included, is lockorder.go's table.

// Payloads of referencedPayload bytes or more are written by reference,
// at most maxReferenced in one write.
const (
	referencedPayload = 16 << 10
	maxReferenced     = 16
)

// batch is one write's content and what settles it once written (under
// conn.writeMu).
type batch struct {
	limit int // bytes in one write
	// buf holds the lines and the payloads under referencedPayload; a large
	// payload is written from its pooled body, by reference: toWrite is
	// buf's segments and the payloads between them, one writev, so a
	// payload is copied once in this sidecar (into the body), not twice.
	buf      []byte
	iovArray [2*maxReferenced + 1][]byte
	// bodies are the taken messages' bodies, held until the write settles:
	// a message's subject and reply are views of its body (deliver.go),
	// and settling reads them.
	bodies []*pending.Shared
	// toWrite is what is left to write; not empty while a write that was
	// begun inline waits for the writer goroutine to finish it.
	toWrite net.Buffers
	// unsubscribeDue are SUBs that reached their UNSUB count in an inline
	// write, for the writer goroutine to remove (settle).
	unsubscribeDue []*localSub
	tookFrom       []taken
	timings        []timing
	// nonBlocking writes inline; nil where the connection has no file
	// descriptor, and then every write is the writer goroutine's.
	nonBlocking *rawsock.Writer
}

type taken struct {
	ls *localSub
	n  int
}

type timing struct {
	ls                  *localSub
	subject, reply      string
	arrived, sentUnixNs int64
}

// newBatch sizes a connection's batches. A message counts as delivered, and
// its latency is taken, when the write that carries it returns. With a
// bounded send buffer, a batch is no larger than that buffer: a bigger one
// would wait in this writer, its first messages long read by the
// application while the write blocks for the rest, and all of it would be
// measured late.
//
// The batch's buffer grows as the connection's writes need it, not to its
// limit at once: a connection that only publishes, or only receives small
// messages, holds a few KiB rather than 64 (16 MiB for 256 connections,
// uncharged, which was most of the sidecar's fixed overhead).
func newBatch(opts *Options, nc net.Conn) batch {
	limit := opts.WriteBatchBytes
	if b := opts.AppSendBuffer; b > 0 && b < limit {
		limit = b
	}
	b := batch{limit: limit}
	b.nonBlocking = rawsock.NewWriter(nc, len(b.iovArray))
	return b
}

func (c *conn) wakeWriter() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// writer is the connection's writer goroutine.
func (c *conn) writer() {
	for {
		select {
		case <-c.wake:
		case <-c.done:
			c.settleLeftovers()
			return
		}
		for {
			more, err := c.writeBatch()
			if err != nil {
				c.close()
				// An inline write may have taken messages between this
				// write's failure and the close.
				c.settleLeftovers()
				return
			}
			if !more {
				break
			}
		}
	}
}

// settleLeftovers settles what the connection's writes leave once it is
// closed (done): an inline write may have left a batch unfinished, and
// what it took was not delivered. Once done is closed no inline write
// begins (flushInline checks it under writeMu).
func (c *conn) settleLeftovers() {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if len(c.out.toWrite) > 0 {
		c.settle(net.ErrClosed, false)
	}
	// SUBs that reached their count are unsubscribed, not closed.
	c.removeUnsubscribeDue()
}

// removeUnsubscribeDue removes the SUBs an inline write found at their
// UNSUB count, counting what they still held as unsubscribed. writeMu is
// held.
func (c *conn) removeUnsubscribeDue() {
	for i, ls := range c.out.unsubscribeDue {
		c.removeSub(ls, pending.ReasonUnsubscribed)
		c.out.unsubscribeDue[i] = nil
	}
	c.out.unsubscribeDue = c.out.unsubscribeDue[:0]
}

// writeBatch finishes a batch an inline write left, or gathers and writes
// the next one. It reports whether there may be more to write: only when
// the batch stopped at its limit, or finished an inline write's (whatever
// is queued later wakes the writer: the router's flush finds writeMu held,
// and control replies wake it themselves).
func (c *conn) writeBatch() (more bool, err error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.removeUnsubscribeDue()
	full := true // the rest of an inline write: there may be more behind it
	if len(c.out.toWrite) == 0 {
		var ok bool
		if ok, full = c.fill(); !ok {
			return false, nil
		}
	}
	_, err = c.out.toWrite.WriteTo(c.netConn)
	c.srv.writerWrites.Add(1)
	c.settle(err, false)
	return full && err == nil, err
}

// flushInline writes what is queued for c without blocking, on the
// upstream reader's goroutine. Whatever it cannot write now is left to the
// writer goroutine, which it wakes.
func (c *conn) flushInline() {
	if c.out.nonBlocking == nil || !c.writeMu.TryLock() {
		c.wakeWriter() // the writer holds the lock: it goes round once more
		return
	}
	defer c.writeMu.Unlock()
	select {
	case <-c.done:
		return // closing: the writer settles what is left
	default:
	}
	if len(c.out.toWrite) > 0 {
		c.wakeWriter() // an earlier inline write is the writer's to finish
		return
	}
	ok, full := c.fill()
	if !ok {
		return
	}
	n := c.out.nonBlocking.WriteNow(c.out.toWrite)
	if n == 0 {
		c.wakeWriter() // a full socket: the writer waits for room
		return
	}
	c.srv.inlineWrites.Add(1)
	rawsock.Consume(&c.out.toWrite, n)
	if len(c.out.toWrite) > 0 {
		c.wakeWriter() // the rest, blocking, from the writer
		return
	}
	c.settle(nil, true)
	if full {
		c.wakeWriter() // the batch stopped at its limit: the writer takes the rest
	}
}

// fill gathers the control replies and queued messages into c.out, up to
// its limit. It reports whether there is anything to write, and whether it
// stopped at the limit (perhaps with nothing left: the writer then finds
// none).
func (c *conn) fill() (ok, full bool) {
	b := &c.out
	b.buf, b.tookFrom, b.timings = b.buf[:0], b.tookFrom[:0], b.timings[:0]
	iov := b.iovArray[:0]
	segment, referenced, referencedBytes := 0, 0, 0
	holding := false // a PONG held for messages (the writer is woken again for one held later)
	if c.controlOwed.Load() {
		c.mu.Lock()
		b.buf = append(b.buf, c.control...)
		c.control = c.control[:0]
		holding = len(c.heldPongs) > 0
		c.controlOwed.Store(holding)
		c.mu.Unlock()
	}
	noResponders := c.noResponders.Load()
	for _, ls := range c.subsInOrder() {
		left := int64(-1) // what its UNSUB count leaves; -1: no count
		if max := ls.maxMsgs.Load(); max > 0 {
			if left = max - ls.delivered.Load(); left <= 0 {
				continue
			}
		}
		n := 0
		// A whole batch under one acquisition of the queue's lock: each
		// message's line and payload are copied into buf as it is taken.
		ls.queue.TakeEach(pending.ReasonUnsupported, func(m *pending.Message) pending.Verdict {
			if int64(n) == left || ls.removed.Load() {
				return pending.Stop
			}
			if len(b.buf)+referencedBytes >= b.limit || referenced >= maxReferenced {
				full = true
				return pending.Stop
			}
			if m.NoResponders && !noResponders {
				return pending.Discard // a status this client did not ask for and cannot read
			}
			b.buf = c.appendMsgHead(b.buf, ls, m)
			if len(m.Data) >= referencedPayload && m.Body != nil {
				iov = append(iov, b.buf[segment:], m.Data)
				segment = len(b.buf)
				referenced++
				referencedBytes += len(m.Data)
			} else {
				b.buf = append(b.buf, m.Data...)
			}
			b.buf = append(b.buf, "\r\n"...)
			if m.Body != nil {
				b.bodies = append(b.bodies, m.Body) // released once settled
			}
			b.timings = append(b.timings, timing{ls, m.Subject, m.Reply, m.ArrivedNanos, m.SentUnixNanos})
			n++
			return pending.Take
		})
		if n > 0 {
			b.tookFrom = append(b.tookFrom, taken{ls, n})
		}
		if full {
			break
		}
	}
	// PONGs held for what was queued before them, once it all left its
	// queues: in this write, after its messages.
	if holding {
		c.mu.Lock()
		for len(c.heldPongs) > 0 && c.heldPongs[0].passed() {
			b.buf = append(b.buf, protocol.Pong...)
			c.heldPongs[0] = heldPong{}
			c.heldPongs = c.heldPongs[1:]
		}
		c.controlOwed.Store(len(c.control) > 0 || len(c.heldPongs) > 0)
		c.mu.Unlock()
	}
	if len(b.buf) == 0 {
		return false, full
	}
	// A segment may point into an earlier array of buf, if an append grew
	// it: that array still holds the bytes the segment names.
	b.toWrite = append(iov, b.buf[segment:])
	// A request is remembered before the write that carries it: a fast
	// application's reply can reach this sidecar's reader before the write
	// returns, and would then find no request to answer (its reply refused
	// by the ACL, and the request counted as unanswered, which trips the
	// automatic kill switch of a healthy responder). Its answer is timed
	// from just before the write.
	beforeWrite := nanotime()
	for _, tm := range b.timings {
		if tm.reply != "" {
			c.srv.answerable.delivered(tm.reply, tm.ls.policy(), beforeWrite)
		}
	}
	return true, full
}

// settle accounts for a batch once its write returned: each message it
// took counts as delivered (err nil) or dropped, with its latencies. On the
// upstream reader (inline), a SUB that reached its UNSUB count is left to
// the writer goroutine to remove: removing takes the interest and routing
// locks and writes an UNSUB upstream, none of which may stall the reader.
func (c *conn) settle(err error, inline bool) {
	b := &c.out
	defer func() {
		// Last: the timings read the bodies' subjects and replies.
		for i, body := range b.bodies {
			body.Release()
			b.bodies[i] = nil
		}
		b.bodies = b.bodies[:0]
	}()
	clear(b.iovArray[:])
	b.toWrite = nil
	if err != nil {
		for _, tm := range b.timings {
			if tm.reply != "" {
				c.srv.answerable.answered(tm.reply) // never delivered: nothing to answer
			}
		}
	} else {
		// Response time from the message's arrival in this sidecar
		// (dwell) and from the publishing sidecar's stamp (end to end),
		// both at the moment of the write.
		writtenMono, writtenWall := nanotime(), time.Now().UnixNano()
		timeReplies := c.requests.pending()
		for _, tm := range b.timings {
			if timeReplies {
				if started, ok := c.requests.finish(tm.subject); ok {
					c.srv.requestLatency.Record(time.Duration(writtenMono - started))
				}
			}
			l := tm.ls.latency()
			l.Dwell.Record(time.Duration(writtenMono - tm.arrived))
			if tm.sentUnixNs != 0 {
				l.EndToEnd.Record(time.Duration(writtenWall - tm.sentUnixNs))
			}
		}
	}
	for _, t := range b.tookFrom {
		t.ls.queue.Settle(t.n, err == nil) // the whole batch's, under one lock
		if err == nil {
			delivered := t.ls.delivered.Add(int64(t.n))
			if max := t.ls.maxMsgs.Load(); max > 0 && delivered >= max {
				if inline {
					b.unsubscribeDue = append(b.unsubscribeDue, t.ls)
					c.wakeWriter()
				} else {
					c.removeSub(t.ls, pending.ReasonUnsubscribed)
				}
			}
		}
		t.ls.retireWhenSettled() // if it was removed while these were in flight
	}
	clear(b.timings) // no strings or subscriptions kept alive by the scratch
	b.timings, b.tookFrom = b.timings[:0], b.tookFrom[:0]
}

// appendMsgHead writes a message's line, as MSG, or as HMSG with its
// header block to a client that declared headers; fill writes the payload.
func (c *conn) appendMsgHead(dst []byte, ls *localSub, m *pending.Message) []byte {
	var header []byte
	if len(m.Header) > 0 && c.headers.Load() {
		header = m.Header
	}
	prefix, subject := ls.inbox.appSubject(m.Subject) // a message in the pod's inbox space, under the application's inbox prefix
	return protocol.AppendMsgHeadPrefixed(dst, prefix, subject, ls.sid, m.Reply, header, len(m.Data))
}
