package sidecar

import (
	"github.com/weighstation/weighstation/sidecar/pending"
	"github.com/weighstation/weighstation/sidecar/upstream"
)

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
