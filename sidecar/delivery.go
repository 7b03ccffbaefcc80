package sidecar

import (
	"github.com/weighstation/weighstation/sidecar/pending"
	"github.com/weighstation/weighstation/sidecar/upstream"
)

// The delivery path, from the broker's socket to the application's, in the
// order it runs. Steps 1 to 4 run on the upstream reader (upstream.Client's
// readLoop), once per message; 5 to 7 once per connection, for everything
// routed to it since the reader last read, inline on the reader when the
// connection's writer is idle, or on that writer (connwrite.go):
//
//  1. read: the upstream reader parses a MSG or HMSG in place in its read
//     buffer and hands it to deliver (upstream/read.go, message).
//  2. deliver: the reserved headers come off, and the message is copied
//     once, header, payload, subject and reply together, into a pooled
//     body that every local subscriber shares (the read buffer is reused
//     as soon as deliver returns).
//  3. route: under the router's read lock, the message goes to the local
//     SUBs behind its upstream subscription (one member of a queue group;
//     not back to an echo:false publisher; a killed SUB's is counted), each
//     Push taking the queue's lock once; each connection it reached is
//     remembered for the flush.
//  4. flush: before the upstream reader reads again, once everything it
//     read was routed, each connection remembered is written (flushInline),
//     if its writeMu is free (TryLock), else its writer is woken.
//  5. fill: under writeMu, the connection's control replies (only when some
//     are owed: conn.mu) and a whole batch of each queue, taken under one
//     acquisition of the queue's lock (pending.Queue.TakeEach), are copied
//     into one buffer (the payload's second copy; one of 16 KiB or more is
//     written from its body by reference).
//  6. write: one write (writev) of the batch, without blocking inline.
//  7. settle: each queue's share of the batch is settled under one
//     acquisition of its lock (pending.Queue.Settle); the latency
//     histograms record without a lock (latency.Recorder); the request
//     timings look at the connection's table only when it holds requests.
//
// On the common path (one SUB, the application keeping up, one message per
// read) that is seven lock acquisitions per message: the upstream reader's
// dispatch (per read) and subsMu, router.mu (read), the queue's three
// (Push, TakeEach, Settle) and writeMu (TryLock); with several messages per
// read, about three (router.mu and Push per message, the rest per read or
// batch). TestDeliveryLockAcquisitions (-tags lockcount) counts them.

// deliver is called by the upstream subscription of key for each message,
// on the upstream reader: it takes the sidecar's reserved headers off (the
// stamp, and OriginHeader, by which the router recognises a message an
// echo:false connection published), copies the message once and hands it
// to the router.
func (s *Server) deliver(key upstream.Key, m *upstream.Msg) {
	arrived := nanotime()
	header := m.Header
	var origin uint64 // the publishing connection, when it asked for no echo
	var sentUnixNanos int64
	noResponders := isNoResponders(header, m.Payload)
	if len(header) > 0 {
		// The reserved headers are ours: take them off, so the application
		// receives the headers that were published (and MSG, not HMSG, when
		// there were none). deliver runs on the upstream reader alone, so
		// its scratch space needs no lock.
		var r reserved
		header, r = stripReserved(s.deliverScratch[:0], header)
		if r.removed > 0 {
			s.deliverScratch = header[:0]
		}
		sentUnixNanos = r.sentUnixNanos
		if r.origin != nil {
			origin = originConn(s.id, r.origin)
		}
	}
	// One copy, header, payload, subject and reply together: the upstream
	// reader's buffer is reused as soon as this returns. The copy is
	// shared by every local subscriber and returns to a pool when the last
	// one wrote it. The message's subject and reply are views of it, so a
	// delivery allocates no string; they are valid while the body is
	// referenced, and what keeps one longer copies it.
	subject := key.Subject // a literal subscription's messages all carry its subject
	literal := string(m.Subject) == subject
	size := len(header) + len(m.Payload) + len(m.Reply)
	if !literal {
		size += len(m.Subject)
	}
	shared := pending.NewShared(size)
	defer shared.Release() // deliver's own reference; each queue holds one more
	body := shared.Bytes
	n := copy(body, header)
	n += copy(body[n:], m.Payload)
	dataEnd := n
	reply := bytesView(body[n : n+copy(body[n:], m.Reply)])
	n += len(reply)
	if !literal {
		subject = bytesView(body[n : n+copy(body[n:], m.Subject)])
	}
	msg := pending.Message{Subject: subject, Reply: reply, Data: body[len(header):dataEnd:dataEnd], Body: shared, ArrivedNanos: arrived,
		SentUnixNanos: sentUnixNanos, NoResponders: noResponders}
	if len(header) > 0 {
		msg.Header = body[:len(header):len(header)]
	}
	if msg.NoResponders {
		s.noRespondersReceived.Add(1)
	}
	if s.router.route(key, msg, origin) {
		// Answered after the routing lock is released: every delivery and
		// SUB waits for that lock.
		s.answerNoResponders(msg.Reply)
	}
}

// route pushes msg to key's local subscribers under the read lock, on the
// upstream reader. It reports whether msg is a request to a killed queue
// group member, which the caller answers with no responders.
func (rt *router) route(key upstream.Key, msg pending.Message, origin uint64) (answer bool) {
	rt.mu.RLock()
	defer rt.mu.RUnlock()
	r := rt.routes[key]
	var targets []*localSub
	if r != nil {
		targets = r.subs
		if key.Queue != "" && len(targets) > 0 {
			targets = pickQueueMember(targets, r.next.Add(1), origin)
		}
	}
	if len(targets) == 0 {
		rt.unrouted.Add(1)
		return false
	}
	for _, ls := range targets {
		if origin != 0 && ls.conn.id == origin {
			rt.echoSuppressed.Add(1)
			continue
		}
		if ls.killed.Load() {
			// Sent before the broker learnt the interest was withdrawn.
			ls.queue.Reject(pending.ReasonKilled)
			answer = answer || (key.Queue != "" && msg.Reply != "")
			continue
		}
		msg.Body.Retain() // the queue's reference (Push releases it if it refuses)
		ls.queue.Push(msg)
		if !ls.conn.flushQueued {
			ls.conn.flushQueued = true
			rt.toFlush = append(rt.toFlush, ls.conn)
		}
	}
	return answer
}

// flush writes what route queued since the upstream reader's last read,
// inline where a connection's writer is idle (connwrite.go). It runs on
// the upstream reader before each read (upstream.Client.SetBeforeRead).
func (rt *router) flush() {
	for i, c := range rt.toFlush {
		c.flushQueued = false
		c.flushInline()
		rt.toFlush[i] = nil
	}
	rt.toFlush = rt.toFlush[:0]
}
