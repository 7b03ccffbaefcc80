package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/weighstation/weighstation/sidecar/protocol"
)

// Msg is one message from the broker. Its slices point into the reader's
// buffer and are valid only during the handler's call: a handler copies
// what it keeps.
type Msg struct {
	Subject, Reply []byte
	// Header is the HMSG's header block, nil for a MSG.
	Header  []byte
	Payload []byte
}

// Handler receives a subscription's messages on the client's reader, in the
// order the broker sent them. It must not block: it hands the message to
// bounded queues.
type Handler func(*Msg)

// Subscription is one upstream SUB.
type Subscription struct {
	Subject, Queue string
	sid            uint64
	handler        Handler
	// draining is set (under subsMu) once Drain withdrew it: a
	// reconnection does not subscribe it again while it waits to be
	// removed.
	draining bool
	// duplicate marks a renewal's short-lived copy of a subscription
	// (refresh): what arrives for it is counted as a possible
	// duplicate.
	duplicate bool
}

// Subscribe adds an upstream subscription; the broker has it once the
// writer sent it (and again after every reconnect).
func (c *Client) Subscribe(subject, queue string, h Handler) *Subscription {
	s := &Subscription{Subject: subject, Queue: queue, sid: c.nextSID.Add(1), handler: h}
	c.subsMu.Lock()
	c.subs[s.sid] = s
	c.subsMu.Unlock()
	c.mu.Lock()
	if c.conn != nil {
		c.ctl = appendSub(c.ctl, subject, queue, s.sid)
	}
	if c.pending != nil { // a renewal's new connection subscribes it too
		c.pending.ctl = appendSub(c.pending.ctl, subject, queue, s.sid)
	}
	c.mu.Unlock()
	c.kick()
	return s
}

// Unsubscribe removes s at once: a message for it still on its way is not
// delivered.
func (c *Client) Unsubscribe(s *Subscription) {
	c.subsMu.Lock()
	delete(c.subs, s.sid)
	c.subsMu.Unlock()
	c.unsub(s)
	c.kick()
}

func (c *Client) unsub(s *Subscription) {
	c.mu.Lock()
	if c.conn != nil {
		c.ctl = appendUnsub(c.ctl, s.sid)
	}
	if c.pending != nil {
		c.pending.ctl = appendUnsub(c.pending.ctl, s.sid)
	}
	c.mu.Unlock()
}

// Drain withdraws subs from the broker and delivers what the broker sent
// them before it learnt of it: done runs once the broker confirmed the
// UNSUBs (every message before its PONG was handed to the handlers), or the
// connection was lost, and the subscriptions are then removed.
func (c *Client) Drain(subs []*Subscription, done func(error)) {
	c.subsMu.Lock()
	for _, s := range subs {
		s.draining = true
	}
	c.subsMu.Unlock()
	for _, s := range subs {
		c.unsub(s)
	}
	c.FlushAsync(func(err error) {
		c.subsMu.Lock()
		for _, s := range subs {
			delete(c.subs, s.sid)
		}
		c.subsMu.Unlock()
		done(err)
	})
}

// errStale: the broker answered none of MaxPingsOut PINGs.
var errStale = errors.New("the broker stopped answering PINGs")

// maxServerPayload bounds one frame from the broker: nats-server's largest
// max_payload. The broker enforces its own, smaller one.
const maxServerPayload = 64 << 20

// maxServerLine bounds a control line from the broker (an INFO of a large
// cluster is the longest).
const maxServerLine = 64 << 10

// readLoop parses the broker's frames in place and dispatches them, until
// the connection ends (or, for a renewal's old connection, its drain).
// It holds dispatch while it hands frames over, and lets go of it only
// while it waits for the socket (hookedReader): while a renewal reads two
// connections, their readers take turns, so that handlers and the
// beforeRead hook never run concurrently.
// It closes l.stopped when it returns, after running the beforeRead hook
// once more: what the frames before a failure produced is written out on
// this goroutine, not stranded until a reconnection's first read.
func (c *Client) readLoop(l *link) {
	defer c.wg.Done()
	defer close(l.stopped)
	var m Msg
	c.dispatch.Lock()
	l.hr.dispatching = true
	for {
		err := c.readOne(l, &m)
		if err != nil {
			c.runBeforeRead()
			c.dispatch.Unlock()
			l.err = err
			c.lost(l.conn, err)
			return
		}
	}
}

// errDrained ends the reader of a renewal's old connection once the broker
// answered its last PING (after its UNSUBs): it routes nothing more there.
var errDrained = errors.New("the connection was drained after a renewal")

func (c *Client) readOne(l *link, m *Msg) error {
	fr := l.fr
	n, err := lineLen(fr)
	if err != nil {
		return err
	}
	line := trimCR(fr.Bytes()[:n])
	switch {
	case bytes.HasPrefix(line, []byte("MSG ")), bytes.HasPrefix(line, []byte("HMSG ")):
		return c.message(l, n, m)
	case bytes.Equal(line, []byte("PING")):
		fr.Consume(n + 1)
		c.mu.Lock()
		switch {
		case c.conn == l.conn:
			c.ctl = append(c.ctl, pongLine...)
		case c.pending == l:
			l.owedPongs++ // answered once it is live
		}
		// A draining connection's PINGs go unanswered: it is closed
		// within seconds, and the broker allows two, minutes apart.
		c.mu.Unlock()
		c.kick()
	case bytes.Equal(line, []byte("PONG")):
		fr.Consume(n + 1)
		if c.pong(l) {
			return errDrained
		}
	case bytes.HasPrefix(line, []byte("INFO ")):
		info, err := parseInfo(line)
		fr.Consume(n + 1)
		if err == nil {
			c.mu.Lock()
			switch {
			case c.conn == l.conn:
				c.info.Store(info)
			case c.pending == l:
				l.info = info // the client's once it is live
			}
			c.mu.Unlock()
		}
	case bytes.HasPrefix(line, []byte("-ERR")):
		text := errText(line)
		fr.Consume(n + 1)
		// A permissions violation is the broker's answer to one SUB or
		// PUB and keeps the connection; anything else, the broker closes
		// it next.
		if strings.HasPrefix(strings.ToLower(text), "permissions violation") {
			c.opts.Log.Info("the broker refused", "error", text)
			return nil
		}
		c.opts.Log.Error(&BrokerError{Text: text}, "the broker reported an error")
	case bytes.HasPrefix(line, []byte("+OK")):
		fr.Consume(n + 1)
	default:
		return fmt.Errorf("the broker sent %q, which is not a NATS server operation", truncate(line))
	}
	return nil
}

// message parses a MSG or HMSG whose control line is n bytes long, waits
// for its body and hands it to its subscription. One that arrives on a
// renewal's old connection while the new one may carry it too is counted
// as a possible duplicate.
func (c *Client) message(l *link, n int, m *Msg) error {
	fr := l.fr
	line := trimCR(fr.Bytes()[:n])
	var args [6][2]int // offsets of the arguments in line
	hmsg := line[0] == 'H'
	count := splitArgs(line, &args)
	// MSG subject sid [reply] size; HMSG subject sid [reply] hsize size
	want := 3
	if hmsg {
		want = 4
	}
	if count != want && count != want+1 {
		return fmt.Errorf("the broker sent a malformed %q", truncate(line))
	}
	arg := func(i int) []byte { return line[args[i][0]:args[i][1]] } // args[0] is the verb
	total, ok := atoi(arg(count))
	headerLen := 0
	if hmsg {
		headerLen, ok = atoiAnd(ok, arg(count-1))
	}
	sid, sidOK := atou(arg(2))
	if !ok || !sidOK || headerLen > total {
		return fmt.Errorf("the broker sent a malformed %q", truncate(line))
	}
	if total > maxServerPayload {
		return fmt.Errorf("the broker sent a %d-byte message, over the %d bytes the sidecar reads in one (nats-server's largest max_payload)", total, maxServerPayload)
	}
	if err := fr.Ensure(n + 1 + total + 2); err != nil {
		return err
	}
	// Ensure may have moved the buffer: the offsets still hold.
	frame := fr.Bytes()
	line = frame[:n]
	body := frame[n+1 : n+1+total+2]
	if body[total] != '\r' || body[total+1] != '\n' {
		return fmt.Errorf("the broker's %d-byte message on %q is not followed by CRLF", total, arg(1))
	}
	m.Subject = line[args[1][0]:args[1][1]]
	m.Reply = nil
	if count == want+1 {
		m.Reply = line[args[3][0]:args[3][1]]
	}
	m.Header = nil
	if hmsg {
		m.Header = body[:headerLen]
	}
	m.Payload = body[headerLen:total]
	c.subsMu.RLock()
	s := c.subs[sid]
	c.subsMu.RUnlock()
	if s != nil {
		if l.overlap.Load() || s.duplicate {
			c.duplicates.Add(1)
		}
		s.handler(m)
	}
	fr.Consume(n + 1 + total + 2)
	return nil
}

// pong completes the oldest PING on l: what was written before it reached
// the broker. On a renewal's new connection it tells Renew; on its old
// one, one releases the publishes held for the switch, and the one after
// its UNSUBs ends the drain, which pong reports: the reader stops there.
func (c *Client) pong(l *link) (drained bool) {
	c.mu.Lock()
	var p ping
	switch {
	case c.conn == l.conn:
		c.pingsOut = 0
		if len(c.sent) == 0 {
			c.mu.Unlock()
			return false
		}
		p = c.sent[0]
		c.sent = c.sent[1:]
	case c.pending == l:
		c.mu.Unlock()
		select {
		case l.ponged <- struct{}{}:
		default:
		}
		return false
	case c.draining == l && len(l.sent) > 0:
		p = l.sent[0]
		l.sent = l.sent[1:]
		if p.release {
			c.releaseLocked(l)
		}
		if drained = len(l.sent) == 0 && l.unsubbed; drained {
			c.endDrainLocked(l, nil)
		}
	}
	c.mu.Unlock()
	for _, w := range p.waiters {
		w(nil)
	}
	if p.release || drained {
		c.kick() // the publishes held for the switch go on the new connection
	}
	return drained
}

func trimCR(line []byte) []byte {
	if len(line) > 0 && line[len(line)-1] == '\r' {
		return line[:len(line)-1]
	}
	return line
}

// splitArgs records the offsets of line's space-separated tokens (the verb
// first) and returns how many there are; more than fit are counted only.
func splitArgs(line []byte, args *[6][2]int) int {
	n := 0
	for i := 0; i < len(line); {
		for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
			i++
		}
		if i == len(line) {
			break
		}
		j := i
		for j < len(line) && line[j] != ' ' && line[j] != '\t' {
			j++
		}
		if n < len(args) {
			args[n] = [2]int{i, j}
		}
		n++
		i = j
	}
	return n - 1 // the verb is not an argument
}

func atoi(b []byte) (int, bool) { return digits[int](b, 10) }

func atoiAnd(ok bool, b []byte) (int, bool) {
	n, ok2 := atoi(b)
	return n, ok && ok2
}

func atou(b []byte) (uint64, bool) { return digits[uint64](b, 19) }

// digits parses b, one to most decimal digits.
func digits[T int | uint64](b []byte, most int) (T, bool) {
	if len(b) == 0 || len(b) > most {
		return 0, false
	}
	var n T
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		n = n*10 + T(ch-'0')
	}
	return n, true
}

// Read buffer sizes of the broker connection: 32 KiB while it is quiet, up
// to 256 KiB while messages stream in, and one whole frame for a larger
// message (at most a control line and maxServerPayload).
const (
	initialReadBuffer   = 32 << 10
	streamingReadBuffer = 256 << 10
)

func (c *Client) newFrames(r io.Reader, limit int) *protocol.Buffer {
	return c.framesFrom(&hookedReader{r: r, c: c}, limit)
}

func (c *Client) framesFrom(hr *hookedReader, limit int) *protocol.Buffer {
	return protocol.NewBuffer(hr, protocol.BufferSizes{Initial: initialReadBuffer, Streaming: streamingReadBuffer, Limit: maxServerLine + 2 + limit + 2})
}

// hookedReader runs the client's beforeRead hook before each read, holding
// the client's dispatch lock. Once its connection's reader runs
// (dispatching), that goroutine holds dispatch between reads and lets go
// of it only while it reads; before (the handshake), it takes it only for
// the hook.
type hookedReader struct {
	r           io.Reader
	c           *Client
	dispatching bool
}

func (h *hookedReader) Read(p []byte) (int, error) {
	if !h.dispatching {
		h.c.dispatch.Lock()
	}
	h.c.runBeforeRead()
	h.c.dispatch.Unlock()
	n, err := h.r.Read(p)
	if h.dispatching {
		h.c.dispatch.Lock()
	}
	return n, err
}

// runBeforeRead runs the beforeRead hook, if one is set.
func (c *Client) runBeforeRead() {
	if f := c.beforeRead.Load(); f != nil {
		(*f)()
	}
}

// lineLen is the next line's length, up to its '\n'.
func lineLen(fr *protocol.Buffer) (int, error) {
	n, err := fr.LineLen(maxServerLine)
	if errors.Is(err, protocol.ErrLineTooLong) {
		return 0, fmt.Errorf("the broker sent a control line over %d bytes", maxServerLine)
	}
	return n, err
}

// readLine returns the next line without its CRLF and consumes it (for the
// handshake, where nothing else is read yet).
func readLine(fr *protocol.Buffer) ([]byte, error) {
	n, err := lineLen(fr)
	if err != nil {
		return nil, err
	}
	line := bytes.Clone(trimCR(fr.Bytes()[:n]))
	fr.Consume(n + 1)
	return line, nil
}
