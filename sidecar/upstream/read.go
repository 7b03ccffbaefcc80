package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
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
// the connection ends.
// It closes stopped when it returns, after running the beforeRead hook
// once more: what the frames before a failure produced is written out on
// this goroutine, not stranded until a reconnection's first read.
func (c *Client) readLoop(conn net.Conn, fr *protocol.Buffer, stopped chan<- struct{}) {
	defer c.wg.Done()
	defer close(stopped)
	var m Msg
	for {
		err := c.readOne(fr, &m)
		if err != nil {
			c.runBeforeRead()
			c.lost(conn, err)
			return
		}
	}
}

func (c *Client) readOne(fr *protocol.Buffer, m *Msg) error {
	n, err := lineLen(fr)
	if err != nil {
		return err
	}
	line := trimCR(fr.Bytes()[:n])
	switch {
	case bytes.HasPrefix(line, []byte("MSG ")), bytes.HasPrefix(line, []byte("HMSG ")):
		return c.message(fr, n, m)
	case bytes.Equal(line, []byte("PING")):
		fr.Consume(n + 1)
		c.mu.Lock()
		if c.conn != nil {
			c.ctl = append(c.ctl, pongLine...)
		}
		c.mu.Unlock()
		c.kick()
	case bytes.Equal(line, []byte("PONG")):
		fr.Consume(n + 1)
		c.pong()
	case bytes.HasPrefix(line, []byte("INFO ")):
		info, err := parseInfo(line)
		fr.Consume(n + 1)
		if err == nil {
			c.info.Store(info)
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
// for its body and hands it to its subscription.
func (c *Client) message(fr *protocol.Buffer, n int, m *Msg) error {
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
		s.handler(m)
	}
	fr.Consume(n + 1 + total + 2)
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

// Read buffer sizes of the broker connection: 32 KiB while it is quiet, up
// to 256 KiB while messages stream in, and one whole frame for a larger
// message (at most a control line and maxServerPayload).
const (
	initialReadBuffer   = 32 << 10
	streamingReadBuffer = 256 << 10
)

func (c *Client) newFrames(r io.Reader, limit int) *protocol.Buffer {
	return protocol.NewBuffer(hookedReader{r, c}, protocol.BufferSizes{Initial: initialReadBuffer, Streaming: streamingReadBuffer, Limit: maxServerLine + 2 + limit + 2})
}

// hookedReader runs the client's beforeRead hook before each read.
type hookedReader struct {
	r io.Reader
	c *Client
}

func (h hookedReader) Read(p []byte) (int, error) {
	h.c.runBeforeRead()
	return h.r.Read(p)
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
