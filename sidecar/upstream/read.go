package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
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
	c.mu.Unlock()
}

// Drain withdraws subs from the broker and delivers what the broker sent
// them before it learnt of it: done runs once the broker confirmed the
// UNSUBs (every message before its PONG was handed to the handlers), or the
// connection was lost, and the subscriptions are then removed.
func (c *Client) Drain(subs []*Subscription, done func(error)) {
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
// the connection ends.
func (c *Client) readLoop(conn net.Conn, fr *frames) {
	defer c.wg.Done()
	var m Msg
	for {
		err := c.readOne(fr, &m)
		if err != nil {
			c.lost(conn, err)
			return
		}
	}
}

func (c *Client) readOne(fr *frames, m *Msg) error {
	n, err := fr.lineLen()
	if err != nil {
		return err
	}
	line := trimCR(fr.buf[fr.start : fr.start+n])
	switch {
	case bytes.HasPrefix(line, []byte("MSG ")), bytes.HasPrefix(line, []byte("HMSG ")):
		return c.message(fr, n, m)
	case bytes.Equal(line, []byte("PING")):
		fr.consume(n + 1)
		c.mu.Lock()
		if c.conn != nil {
			c.ctl = append(c.ctl, pongLine...)
		}
		c.mu.Unlock()
		c.kick()
	case bytes.Equal(line, []byte("PONG")):
		fr.consume(n + 1)
		c.pong()
	case bytes.HasPrefix(line, []byte("INFO ")):
		info, err := parseInfo(line)
		fr.consume(n + 1)
		if err == nil {
			c.info.Store(info)
		}
	case bytes.HasPrefix(line, []byte("-ERR")):
		text := errText(line)
		fr.consume(n + 1)
		// A permissions violation is the broker's answer to one SUB or
		// PUB and keeps the connection; anything else, the broker closes
		// it next.
		if strings.HasPrefix(strings.ToLower(text), "permissions violation") {
			c.opts.Log.Info("the broker refused", "error", text)
			return nil
		}
		c.opts.Log.Error(&BrokerError{Text: text}, "the broker reported an error")
	case bytes.HasPrefix(line, []byte("+OK")):
		fr.consume(n + 1)
	default:
		return fmt.Errorf("the broker sent %q, which is not a NATS server operation", truncate(line))
	}
	return nil
}

// message parses a MSG or HMSG whose control line is n bytes long, waits
// for its body and hands it to its subscription.
func (c *Client) message(fr *frames, n int, m *Msg) error {
	line := trimCR(fr.buf[fr.start : fr.start+n])
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
	if !ok || !sidOK || headerLen > total || total > maxServerPayload {
		return fmt.Errorf("the broker sent a malformed %q", truncate(line))
	}
	if err := fr.ensure(n + 1 + total + 2); err != nil {
		return err
	}
	// ensure may have moved the buffer: the offsets still hold.
	line = fr.buf[fr.start : fr.start+n]
	body := fr.buf[fr.start+n+1 : fr.start+n+1+total+2]
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
		s.handler(m)
	}
	fr.consume(n + 1 + total + 2)
	return nil
}

// pong completes the oldest PING: what was written before it reached the
// broker.
func (c *Client) pong() {
	c.mu.Lock()
	c.pingsOut = 0
	if len(c.sent) == 0 {
		c.mu.Unlock()
		return
	}
	p := c.sent[0]
	c.sent = c.sent[1:]
	c.mu.Unlock()
	for _, w := range p.waiters {
		w(nil)
	}
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

func atoi(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 10 {
		return 0, false
	}
	n := 0
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		n = n*10 + int(ch-'0')
	}
	return n, true
}

func atoiAnd(ok bool, b []byte) (int, bool) {
	n, ok2 := atoi(b)
	return n, ok && ok2
}

func atou(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var n uint64
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		n = n*10 + uint64(ch-'0')
	}
	return n, true
}

// frames is the reader's buffer: frames are parsed where they were read.
// It grows to hold the largest frame that arrives (up to limit) and shrinks
// back to its first size after idleShrink reads that used little of it, so
// a burst of large messages does not hold memory for ever.
type frames struct {
	r          io.Reader
	buf        []byte
	start, end int
	limit      int
	small      int
	idle       int // consecutive small reads into a grown buffer
}

const (
	initialReadBuffer = 32 << 10
	idleShrink        = 64
)

func newFrames(r io.Reader, limit int) *frames {
	return &frames{r: r, buf: make([]byte, initialReadBuffer), limit: limit + maxServerLine, small: initialReadBuffer}
}

// lineLen returns the length of the next line up to its '\n' (exclusive),
// reading as needed.
func (f *frames) lineLen() (int, error) {
	scanned := 0
	for {
		if i := bytes.IndexByte(f.buf[f.start+scanned:f.end], '\n'); i >= 0 {
			return scanned + i, nil
		}
		scanned = f.end - f.start
		if scanned > maxServerLine {
			return 0, fmt.Errorf("the broker sent a control line over %d bytes", maxServerLine)
		}
		if err := f.more(scanned + 1); err != nil {
			return 0, err
		}
	}
}

// line returns the next line without its CRLF and consumes it (for the
// handshake, where nothing else is read).
func (f *frames) line() ([]byte, error) {
	n, err := f.lineLen()
	if err != nil {
		return nil, err
	}
	line := trimCR(f.buf[f.start : f.start+n])
	f.consume(n + 1)
	return line, nil
}

// ensure reads until n bytes from start are buffered.
func (f *frames) ensure(n int) error {
	for f.end-f.start < n {
		if err := f.more(n); err != nil {
			if errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

func (f *frames) consume(n int) {
	f.start += n
	if f.start == f.end {
		f.start, f.end = 0, 0
	}
}

// more reads at least one byte, first making room for a frame of want
// bytes from start: moving the partial frame to the front, or growing.
func (f *frames) more(want int) error {
	if want > f.limit {
		return fmt.Errorf("the broker sent a frame of %d bytes, over %d", want, f.limit)
	}
	if f.start+want > len(f.buf) || f.end == len(f.buf) {
		size := len(f.buf)
		for size < want {
			size *= 2
		}
		if size > len(f.buf) {
			grown := make([]byte, min(size, f.limit))
			f.end = copy(grown, f.buf[f.start:f.end])
			f.buf, f.start = grown, 0
			f.idle = 0
		} else {
			f.end = copy(f.buf, f.buf[f.start:f.end])
			f.start = 0
		}
	}
	if f.start == f.end && len(f.buf) > f.small {
		if f.idle++; f.idle > idleShrink {
			f.buf, f.start, f.end, f.idle = make([]byte, f.small), 0, 0, 0
		}
	}
	n, err := f.r.Read(f.buf[f.end:])
	f.end += n
	if n >= f.small {
		f.idle = 0
	}
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}
