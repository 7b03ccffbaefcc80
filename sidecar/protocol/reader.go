package protocol

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Op is a client command.
type Op uint8

const (
	OpConnect Op = iota + 1
	OpPub
	OpHPub
	OpSub
	OpUnsub
	OpPing
	OpPong
)

func (o Op) String() string {
	switch o {
	case OpConnect:
		return "CONNECT"
	case OpPub:
		return "PUB"
	case OpHPub:
		return "HPUB"
	case OpSub:
		return "SUB"
	case OpUnsub:
		return "UNSUB"
	case OpPing:
		return "PING"
	case OpPong:
		return "PONG"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Command is one parsed client command. Its byte slices point into the
// Reader's buffers: they are valid until the next call to Next, and a
// caller that keeps them must copy them.
type Command struct {
	Op Op
	// Subject and Reply: PUB, HPUB, SUB (no Reply for SUB).
	Subject, Reply []byte
	// Queue: SUB's queue group, if any.
	Queue []byte
	// SID: SUB and UNSUB.
	SID []byte
	// MaxMsgs: UNSUB's optional limit (0 when absent).
	MaxMsgs int
	// HeaderSize: HPUB's header length; Body holds the headers, then the
	// payload (PUB: the payload only).
	HeaderSize int
	Body       []byte
	// Options: CONNECT's JSON.
	Options []byte

	// bodySize is PUB's or HPUB's body length, which parse learnt from the
	// line and Next then reads (hasBody).
	bodySize int
	hasBody  bool
}

// Header returns HPUB's headers and Payload the rest of the body.
func (c *Command) Header() []byte  { return c.Body[:c.HeaderSize] }
func (c *Command) Payload() []byte { return c.Body[c.HeaderSize:] }

// Reader parses client commands from a stream, in place: see Buffer for
// its memory, which Limits bound (one control line and one payload at
// most).
type Reader struct {
	buf    *Buffer
	limits Limits
	// refused holds the subject and reply of a body refused for want of
	// memory (BodyRefused): the buffer they were read into is reused as the
	// body is skipped.
	refused []byte
}

// BodyRefused is Next's error for a PUB or HPUB whose body its read
// buffer's memory budget had no room for (ChargeTo): the body was skipped
// unread, and cmd holds the command's Op, Subject and Reply (no Body), so
// that the caller can refuse the publish and go on reading the
// connection's next command.
type BodyRefused struct {
	Size   int
	Budget *BudgetError
}

func (e *BodyRefused) Error() string {
	return fmt.Sprintf("a body of %d bytes was skipped unread: %v", e.Size, e.Budget)
}

// ChargeTo takes the read buffer's memory past InitialReadBuffer from m
// from here on (Buffer.ChargeTo): a body m has no room for is skipped and
// refused (BodyRefused) rather than read. Call it before the first Next.
func (r *Reader) ChargeTo(m Memory) { r.buf.ChargeTo(m) }

// Release gives back the read buffer's memory; the Reader is not used
// again.
func (r *Reader) Release() { r.buf.Release() }

// Read buffer sizes of a client connection: 4 KiB while it is quiet, up to
// 64 KiB while it streams, and one whole frame for a larger message.
const (
	InitialReadBuffer   = 4 << 10
	StreamingReadBuffer = 64 << 10
)

// NewReader reads commands from r within limits.
func NewReader(r io.Reader, limits Limits) *Reader {
	return &Reader{
		buf: NewBuffer(r, BufferSizes{Initial: InitialReadBuffer, Streaming: StreamingReadBuffer,
			Limit: verbRoom + limits.MaxControlLine + 2 + limits.MaxPayload + 2}),
		limits: limits,
	}
}

// Buffered is how many bytes of a command not yet returned are buffered.
func (r *Reader) Buffered() int { return len(r.buf.Bytes()) }

// BufferSize is the read buffer's current size.
func (r *Reader) BufferSize() int { return r.buf.Size() }

// Next reads the next command into cmd. A *Error means the client broke the
// protocol or a limit; a *BodyRefused, that a body was skipped for want of
// memory (the connection may go on); other errors are I/O errors (io.EOF:
// the client left).
func (r *Reader) Next(cmd *Command) error {
	*cmd = Command{}
	n, err := r.buf.LineLen(verbRoom + r.limits.MaxControlLine + 1) // +1: the line's CR
	switch {
	case errors.Is(err, ErrLineTooLong):
		_, limit := r.argumentsAndLimit(r.buf.Bytes()) // the verb is among what was read
		return controlLineTooLong(limit)
	case errors.Is(err, io.EOF) && len(r.buf.Bytes()) > 0:
		return io.ErrUnexpectedEOF
	case err != nil:
		return err
	}
	line := controlLine(r.buf.Bytes(), n)
	// A line no longer than the smallest bound is within it; only a long
	// one is measured by its verb.
	if len(line) > r.limits.MaxControlLine-r.limits.ForwardedLineRoom {
		if args, limit := r.argumentsAndLimit(line); len(args) > limit {
			return controlLineTooLong(limit)
		}
	}
	if err := r.parse(line, cmd); err != nil {
		return err
	}
	if !cmd.hasBody {
		r.buf.Consume(n + 1)
		return nil
	}
	// The body: wait for all of it. Waiting may have moved the line (to
	// the front of the buffer, or into a larger one); then its slices are
	// taken again from where it is now. A frame that was already whole, as
	// under load, is parsed once.
	size := cmd.bodySize
	lineAt := &r.buf.Bytes()[0] // the line starts the buffered bytes, and its '\n' is there
	if err := r.buf.Ensure(n + 1 + size + 2); err != nil {
		var budget *BudgetError
		if errors.As(err, &budget) {
			return r.skipBody(n, cmd, budget)
		}
		return err
	}
	frame := r.buf.Bytes()
	if frame[n+1+size] != '\r' || frame[n+1+size+1] != '\n' {
		return malformed("%s body of %d bytes is not followed by CRLF", cmd.Op, size)
	}
	if &frame[0] != lineAt {
		if err := r.parse(controlLine(frame, n), cmd); err != nil {
			return err
		}
	}
	cmd.Body = frame[n+1 : n+1+size]
	r.buf.Consume(n + 1 + size + 2)
	return nil
}

// skipBody skips the body of the command whose line of n bytes starts the
// buffered bytes, keeping a copy of its subject and reply in cmd, and
// returns BodyRefused. A body not followed by CRLF is the client's protocol
// error, as if it had been read.
func (r *Reader) skipBody(n int, cmd *Command, budget *BudgetError) error {
	// Ensure may have moved the line: parse it where it is now.
	if err := r.parse(controlLine(r.buf.Bytes(), n), cmd); err != nil {
		return err
	}
	size := cmd.bodySize
	r.refused = append(append(r.refused[:0], cmd.Subject...), cmd.Reply...)
	cmd.Subject, cmd.Reply = r.refused[:len(cmd.Subject)], r.refused[len(cmd.Subject):]
	r.buf.Consume(n + 1)
	last, err := r.buf.Skip(size + 2)
	if err != nil {
		return err
	}
	if last != [2]byte{'\r', '\n'} {
		return malformed("%s body of %d bytes is not followed by CRLF", cmd.Op, size)
	}
	cmd.HeaderSize, cmd.bodySize, cmd.hasBody = 0, 0, false
	return &BodyRefused{Size: size, Budget: budget}
}

// argumentsAndLimit returns what follows a control line's verb and the
// spaces after it, which max_control_line bounds, and the bound for its
// verb: less ForwardedLineRoom for what goes on to the broker.
func (r *Reader) argumentsAndLimit(line []byte) ([]byte, int) {
	verb, rest := cutToken(line)
	limit := r.limits.MaxControlLine
	if bytes.EqualFold(verb, []byte("PUB")) || bytes.EqualFold(verb, []byte("HPUB")) || bytes.EqualFold(verb, []byte("SUB")) {
		limit -= r.limits.ForwardedLineRoom
	}
	return bytes.TrimLeft(rest, " \t"), limit
}

// controlLine is the line of the n bytes before the '\n' at the start of
// buffered, without its CR.
func controlLine(buffered []byte, n int) []byte {
	return bytes.TrimSuffix(buffered[:n], []byte{'\r'})
}

func (r *Reader) parse(line []byte, cmd *Command) error {
	verb, rest := cutToken(line)
	var args [maxArgs][]byte
	switch {
	case bytes.EqualFold(verb, []byte("PUB")):
		n := split(rest, &args)
		if n != 2 && n != 3 {
			return malformed("PUB takes a subject, an optional reply subject and a size, got %d arguments", n)
		}
		cmd.Op, cmd.Subject = OpPub, args[0]
		if n == 3 {
			cmd.Reply = args[1]
		}
		size, err := r.size("PUB", args[n-1])
		if err != nil {
			return err
		}
		cmd.bodySize, cmd.hasBody = size, true
		return nil
	case bytes.EqualFold(verb, []byte("HPUB")):
		n := split(rest, &args)
		if n != 3 && n != 4 {
			return malformed("HPUB takes a subject, an optional reply subject, a header size and a total size, got %d arguments", n)
		}
		cmd.Op, cmd.Subject = OpHPub, args[0]
		if n == 4 {
			cmd.Reply = args[1]
		}
		headerSize, err := parseSize(args[n-2])
		if err != nil {
			return malformed("HPUB header size %q: %v", args[n-2], err)
		}
		total, err := r.size("HPUB", args[n-1])
		if err != nil {
			return err
		}
		if headerSize > total {
			return malformed("HPUB header size %d exceeds its total size %d", headerSize, total)
		}
		cmd.HeaderSize = headerSize
		cmd.bodySize, cmd.hasBody = total, true
		return nil
	case bytes.EqualFold(verb, []byte("SUB")):
		n := split(rest, &args)
		if n != 2 && n != 3 {
			return malformed("SUB takes a subject, an optional queue group and a sid, got %d arguments", n)
		}
		cmd.Op, cmd.Subject, cmd.SID = OpSub, args[0], args[n-1]
		if n == 3 {
			cmd.Queue = args[1]
		}
		return nil
	case bytes.EqualFold(verb, []byte("UNSUB")):
		n := split(rest, &args)
		if n != 1 && n != 2 {
			return malformed("UNSUB takes a sid and an optional message count, got %d arguments", n)
		}
		cmd.Op, cmd.SID = OpUnsub, args[0]
		if n == 2 {
			max, err := parseSize(args[1])
			if err != nil {
				return malformed("UNSUB message count %q: %v", args[1], err)
			}
			cmd.MaxMsgs = max
		}
		return nil
	case bytes.EqualFold(verb, []byte("PING")) && len(bytes.TrimSpace(rest)) == 0:
		cmd.Op = OpPing
		return nil
	case bytes.EqualFold(verb, []byte("PONG")) && len(bytes.TrimSpace(rest)) == 0:
		cmd.Op = OpPong
		return nil
	case bytes.EqualFold(verb, []byte("CONNECT")):
		cmd.Op, cmd.Options = OpConnect, bytes.TrimSpace(rest)
		return nil
	}
	return unknownOperation()
}

// size parses a body size and holds it to MaxPayload.
func (r *Reader) size(op string, arg []byte) (int, error) {
	size, err := parseSize(arg)
	if err != nil {
		return 0, malformed("%s size %q: %v", op, arg, err)
	}
	if size > r.limits.MaxPayload {
		return 0, payloadTooLarge(size, r.limits.MaxPayload)
	}
	return size, nil
}

// parseSize parses a non-negative decimal that fits comfortably in an int.
func parseSize(b []byte) (int, error) {
	if len(b) == 0 || len(b) > 10 {
		return 0, errors.New("not a size of 1 to 10 digits")
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, errors.New("not a decimal number")
		}
		n = n*10 + int(c-'0')
	}
	return n, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' }

// cutToken returns the first space-separated token and what follows it.
func cutToken(b []byte) (token, rest []byte) {
	i := 0
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	j := i
	for j < len(b) && !isSpace(b[j]) {
		j++
	}
	return b[i:j], b[j:]
}

// split fills args with the space-separated tokens of b and returns how many
// there are; past len(args) it keeps counting without storing.
func split(b []byte, args *[maxArgs][]byte) int {
	n := 0
	for {
		var tok []byte
		tok, b = cutToken(b)
		if len(tok) == 0 {
			return n
		}
		if n < len(args) {
			args[n] = tok
		}
		n++
	}
}
