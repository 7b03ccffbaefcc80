package protocol_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/weighstation/weighstation/sidecar/protocol"
)

var testLimits = protocol.Limits{MaxControlLine: 64, MaxPayload: 16}

// parsed is a comparable summary of a command.
type parsed struct {
	op                                    protocol.Op
	subject, reply, queue, sid, body, opt string
	headerSize, maxMsgs                   int
}

func summary(c *protocol.Command) parsed {
	return parsed{c.Op, string(c.Subject), string(c.Reply), string(c.Queue), string(c.SID), string(c.Body), string(c.Options), c.HeaderSize, c.MaxMsgs}
}

func TestReaderParsesEveryCommand(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  parsed
	}{
		{"pub", "PUB orders.eu 5\r\nhello\r\n", parsed{op: protocol.OpPub, subject: "orders.eu", body: "hello"}},
		{"pub with reply", "PUB orders.eu _INBOX.a.b 5\r\nhello\r\n", parsed{op: protocol.OpPub, subject: "orders.eu", reply: "_INBOX.a.b", body: "hello"}},
		{"empty pub", "PUB a 0\r\n\r\n", parsed{op: protocol.OpPub, subject: "a"}},
		{"hpub", "HPUB a 12 14\r\nNATS/1.0\r\n\r\nhi\r\n", parsed{op: protocol.OpHPub, subject: "a", body: "NATS/1.0\r\n\r\nhi", headerSize: 12}},
		{"hpub with reply", "HPUB a r 12 12\r\nNATS/1.0\r\n\r\n\r\n", parsed{op: protocol.OpHPub, subject: "a", reply: "r", body: "NATS/1.0\r\n\r\n", headerSize: 12}},
		{"sub", "SUB orders.* 7\r\n", parsed{op: protocol.OpSub, subject: "orders.*", sid: "7"}},
		{"sub with queue", "SUB orders.* billing 7\r\n", parsed{op: protocol.OpSub, subject: "orders.*", queue: "billing", sid: "7"}},
		{"unsub", "UNSUB 7\r\n", parsed{op: protocol.OpUnsub, sid: "7"}},
		{"unsub with max", "UNSUB 7 10\r\n", parsed{op: protocol.OpUnsub, sid: "7", maxMsgs: 10}},
		{"ping", "PING\r\n", parsed{op: protocol.OpPing}},
		{"pong", "PONG\r\n", parsed{op: protocol.OpPong}},
		{"connect", `CONNECT {"verbose":false,"headers":true}` + "\r\n", parsed{op: protocol.OpConnect, opt: `{"verbose":false,"headers":true}`}},
		{"lower-case verb", "pub a 1\r\nx\r\n", parsed{op: protocol.OpPub, subject: "a", body: "x"}},
		{"tabs and extra spaces", "SUB\t a \t q\t 1 \r\n", parsed{op: protocol.OpSub, subject: "a", queue: "q", sid: "1"}},
		{"LF only", "PING\n", parsed{op: protocol.OpPing}},
		{"payload at the limit", "PUB a 16\r\n0123456789abcdef\r\n", parsed{op: protocol.OpPub, subject: "a", body: "0123456789abcdef"}},
		{"payload holding CRLF", "PUB a 4\r\n\r\n\r\n\r\n", parsed{op: protocol.OpPub, subject: "a", body: "\r\n\r\n"}},
		{"control line at the limit", "SUB " + strings.Repeat("a", 58) + " 1\r\n", parsed{op: protocol.OpSub, subject: strings.Repeat("a", 58), sid: "1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// One byte at a time, so that every read boundary is crossed.
			r := protocol.NewReader(iotest.OneByteReader(strings.NewReader(tc.input)), testLimits)
			var cmd protocol.Command
			if err := r.Next(&cmd); err != nil {
				t.Fatalf("Next: %v", err)
			}
			if got := summary(&cmd); got != tc.want {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
			if err := r.Next(&cmd); err != io.EOF {
				t.Fatalf("after the command: %v, want io.EOF", err)
			}
		})
	}
}

// TestControlLineLimitIsOnTheArguments: a command whose arguments are
// max_control_line bytes long is taken, whatever its verb and the spaces
// after it, as nats-server takes it.
func TestControlLineLimitIsOnTheArguments(t *testing.T) {
	args := strings.Repeat("a", testLimits.MaxControlLine-2) + " 1" // max_control_line bytes
	for _, input := range []string{"PUB " + args + "\r\nx\r\n", "SUB " + args + "\r\n", "pub \t " + args + "\r\nx\r\n"} {
		r := protocol.NewReader(strings.NewReader(input), testLimits)
		var cmd protocol.Command
		if err := r.Next(&cmd); err != nil {
			t.Fatalf("%.12q… with %d bytes of arguments (max_control_line %d): %v", input, len(args), testLimits.MaxControlLine, err)
		}
	}
}

// TestControlLineBoundsByCommand: under the defaults, what goes on to the
// broker (PUB, HPUB, SUB) has UpstreamLineRoom less than nats-server's
// 4,096 bytes of arguments, for what the sidecar adds there; CONNECT,
// which stays in the sidecar, has all of them, as from nats-server.
func TestControlLineBoundsByCommand(t *testing.T) {
	forwarded := protocol.DefaultLimits.MaxControlLine - protocol.UpstreamLineRoom
	connect := func(n int) string { // CONNECT with n bytes of options
		return "CONNECT " + `{"jwt":"` + strings.Repeat("e", n-len(`{"jwt":""}`)) + `"}` + "\r\n"
	}
	pub := func(n int) string { return "PUB " + strings.Repeat("s", n-2) + " 1\r\nx\r\n" }
	hpub := func(n int) string { return "HPUB " + strings.Repeat("s", n-4) + " 0 1\r\nx\r\n" }
	sub := func(n int) string { return "SUB " + strings.Repeat("s", n-2) + " 1\r\n" }
	for _, tc := range []struct {
		name, input string
		limit       int // 0: taken
	}{
		{"CONNECT at nats-server's bound", connect(4096), 0},
		{"CONNECT past it", connect(4097), 4096},
		{"PUB at its bound", pub(forwarded), 0},
		{"PUB past it", pub(forwarded + 1), forwarded},
		{"HPUB past it", hpub(forwarded + 1), forwarded},
		{"SUB at its bound", sub(forwarded), 0},
		{"SUB past it", sub(forwarded + 1), forwarded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := protocol.NewReader(strings.NewReader(tc.input), protocol.DefaultLimits)
			var cmd protocol.Command
			err := r.Next(&cmd)
			switch want := fmt.Sprintf("Maximum Control Line Exceeded (max_control_line %d)", tc.limit); {
			case tc.limit == 0 && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.limit != 0 && (!errors.Is(err, protocol.ErrControlLineTooLong) || !strings.Contains(err.Error(), want)):
				t.Fatalf("got %v, want %q", err, want)
			}
		})
	}
}

func TestReaderRefusesWithTheRule(t *testing.T) {
	tests := []struct {
		name  string
		input string
		kind  error
		text  string
	}{
		{"unknown verb", "PUBLISH a 1\r\nx\r\n", protocol.ErrUnknownOperation, "Unknown Protocol Operation"},
		{"ping with an argument", "PING now\r\n", protocol.ErrUnknownOperation, "Unknown Protocol Operation"},
		{"pub without a size", "PUB a\r\n", protocol.ErrMalformed, "PUB takes a subject"},
		{"pub with too many arguments", "PUB a b c 1\r\nx\r\n", protocol.ErrMalformed, "got 4 arguments"},
		{"negative size", "PUB a -1\r\n", protocol.ErrMalformed, "not a decimal number"},
		{"absurd size", "PUB a 99999999999\r\n", protocol.ErrMalformed, "1 to 10 digits"},
		{"payload over max_payload", "PUB a 17\r\n0123456789abcdefg\r\n", protocol.ErrPayloadTooLarge, "Maximum Payload Violation"},
		{"hpub total over max_payload", "HPUB a 12 17\r\n", protocol.ErrPayloadTooLarge, "Maximum Payload Violation"},
		{"hpub header larger than total", "HPUB a 5 3\r\nabc\r\n", protocol.ErrMalformed, "header size 5 exceeds its total size 3"},
		{"payload without CRLF", "PUB a 1\r\nxy\r\n", protocol.ErrMalformed, "not followed by CRLF"},
		// max_control_line bounds the arguments, as nats-server's does: 65
		// bytes of them here.
		{"control line over the limit", "SUB " + strings.Repeat("a", 63) + " 1\r\n", protocol.ErrControlLineTooLong, "Maximum Control Line Exceeded (max_control_line 64)"},
		{"control line over the limit, LF only", "SUB " + strings.Repeat("a", 63) + " 1\n", protocol.ErrControlLineTooLong, "Maximum Control Line Exceeded"},
		{"control line over the limit after tabs", "PUB\t\t" + strings.Repeat("a", 63) + " 1\r\n", protocol.ErrControlLineTooLong, "Maximum Control Line Exceeded"},
		{"endless line", strings.Repeat("x", 1000), protocol.ErrControlLineTooLong, "Maximum Control Line Exceeded"},
		{"unsub with a bad count", "UNSUB 1 many\r\n", protocol.ErrMalformed, "UNSUB message count"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := protocol.NewReader(strings.NewReader(tc.input), testLimits)
			var cmd protocol.Command
			err := r.Next(&cmd)
			var perr *protocol.Error
			if !errors.Is(err, tc.kind) || !errors.As(err, &perr) || !perr.Close || !strings.Contains(perr.Text, tc.text) {
				t.Fatalf("Next = %v, want %v with text containing %q (closing)", err, tc.kind, tc.text)
			}
		})
	}
}

func TestReaderReportsTruncation(t *testing.T) {
	for _, input := range []string{"PUB a 5\r\nhel", "SUB a", "PUB a 5\r\nhello"} {
		r := protocol.NewReader(strings.NewReader(input), testLimits)
		var cmd protocol.Command
		if err := r.Next(&cmd); err != io.ErrUnexpectedEOF {
			t.Errorf("%q: Next = %v, want io.ErrUnexpectedEOF", input, err)
		}
	}
}

// endless repeats one chunk forever.
type endless struct {
	chunk []byte
	off   int
}

func (e *endless) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], e.chunk[e.off:])
		n += c
		e.off = (e.off + c) % len(e.chunk)
	}
	return n, nil
}

func TestReaderDoesNotAllocatePerMessage(t *testing.T) {
	payload := bytes.Repeat([]byte("x"), 1024)
	msg := append([]byte("PUB orders.eu.created _INBOX.abc.1 1024\r\n"), payload...)
	msg = append(msg, "\r\n"...)
	r := protocol.NewReader(&endless{chunk: msg}, protocol.DefaultLimits)
	var cmd protocol.Command
	if err := r.Next(&cmd); err != nil { // grows the body buffer once
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if err := r.Next(&cmd); err != nil || len(cmd.Body) != 1024 {
			t.Fatalf("Next: %v, body %d", err, len(cmd.Body))
		}
	})
	if allocs != 0 {
		t.Fatalf("Next allocates %.1f times per message, want 0", allocs)
	}
}

// FuzzReader feeds arbitrary bytes to the reader: it must never panic, never
// return a body over MaxPayload or a header larger than its body, and only
// fail with a *protocol.Error or an I/O error.
func FuzzReader(f *testing.F) {
	for _, seed := range []string{
		"PUB a 5\r\nhello\r\n", "HPUB a r 12 17\r\nNATS/1.0\r\n\r\nhello\r\n", "SUB a q 1\r\nUNSUB 1 5\r\n",
		"PING\r\nPONG\r\n", "CONNECT {}\r\n", "PUB a 99999999999\r\n", "\r\n\r\n", "HPUB a 9 3\r\nabc\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := protocol.NewReader(bytes.NewReader(data), testLimits)
		var cmd protocol.Command
		for range 1000 {
			err := r.Next(&cmd)
			if err != nil {
				var perr *protocol.Error
				if !errors.As(err, &perr) && err != io.EOF && err != io.ErrUnexpectedEOF {
					t.Fatalf("unexpected error type %T: %v", err, err)
				}
				return
			}
			if len(cmd.Body) > testLimits.MaxPayload || cmd.HeaderSize > len(cmd.Body) {
				t.Fatalf("body %d bytes, header %d: over the limits", len(cmd.Body), cmd.HeaderSize)
			}
			if (cmd.Op == protocol.OpPub || cmd.Op == protocol.OpHPub || cmd.Op == protocol.OpSub) && len(cmd.Subject) == 0 {
				t.Fatalf("%v without a subject", cmd.Op)
			}
		}
	})
}

// TestReaderBufferFollowsTheLoad: a 1 MiB payload split into one-byte
// reads arrives whole, the buffer growing to hold it and never past one
// frame; a stream of small commands grows it to the streaming size at most;
// quiet reads return it to its initial size.
func TestReaderBufferFollowsTheLoad(t *testing.T) {
	limits := protocol.Limits{MaxControlLine: 4096, MaxPayload: 1 << 20}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	var wire bytes.Buffer
	wire.WriteString("PUB big 1048576\r\n")
	wire.Write(big)
	wire.WriteString("\r\n")
	small := "PUB s 100\r\n" + strings.Repeat("x", 100) + "\r\n"
	for range 10_000 {
		wire.WriteString(small)
	}
	for range 2 * protocol.IdleReads {
		wire.WriteString("PING\r\n")
	}
	// The big frame one byte at a time; then the stream as fast as it is
	// asked for; then the PINGs one at a time, as a quiet client sends them.
	bigFrame := len("PUB big 1048576\r\n") + len(big) + 2
	streamEnd := bigFrame + 10_000*len(small)
	r := protocol.NewReader(&phased{data: wire.Bytes(), oneByteUntil: bigFrame, wholeUntil: streamEnd}, limits)
	var cmd protocol.Command
	if err := r.Next(&cmd); err != nil || !bytes.Equal(cmd.Body, big) || string(cmd.Subject) != "big" {
		t.Fatalf("the 1 MiB message: %v, subject %q, %d bytes", err, cmd.Subject, len(cmd.Body))
	}
	if size, limit := r.BufferSize(), 16+limits.MaxControlLine+2+limits.MaxPayload+2; size < 1<<20 || size > limit { // 16: the verb and its spaces
		t.Fatalf("buffer %d bytes after the 1 MiB message, want at least 1 MiB and at most one frame (%d)", size, limit)
	}
	for i := range 10_000 {
		if err := r.Next(&cmd); err != nil || len(cmd.Body) != 100 {
			t.Fatalf("small message %d: %v", i, err)
		}
	}
	for range 2 * protocol.IdleReads {
		if err := r.Next(&cmd); err != nil || cmd.Op != protocol.OpPing {
			t.Fatalf("PING: %v %v", err, cmd.Op)
		}
	}
	if size := r.BufferSize(); size != protocol.InitialReadBuffer {
		t.Fatalf("buffer %d bytes after quiet reads, want %d", size, protocol.InitialReadBuffer)
	}

	streaming := protocol.NewReader(&phased{data: bytes.Repeat([]byte(small), 10_000), wholeUntil: 10_000 * len(small)}, limits)
	largest := 0
	for range 10_000 {
		if err := streaming.Next(&cmd); err != nil {
			t.Fatal(err)
		}
		largest = max(largest, streaming.BufferSize())
	}
	if largest != protocol.StreamingReadBuffer {
		t.Fatalf("a stream of small commands grew the buffer to %d, want %d", largest, protocol.StreamingReadBuffer)
	}
}

// phased reads one byte at a time before oneByteUntil, then as much as is
// asked for until wholeUntil, then one line at a time.
type phased struct {
	data                     []byte
	off                      int
	oneByteUntil, wholeUntil int
}

func (p *phased) Read(b []byte) (int, error) {
	if p.off == len(p.data) {
		return 0, io.EOF
	}
	end := len(p.data)
	switch {
	case p.off < p.oneByteUntil:
		end = p.off + 1
	case p.off < p.wholeUntil:
		end = p.wholeUntil
	default:
		end = p.off + bytes.IndexByte(p.data[p.off:], '\n') + 1
	}
	n := copy(b, p.data[p.off:end])
	p.off += n
	return n, nil
}

// TestReaderReadsIntoRoomNotSlivers: under a stream of 1 KiB commands that
// arrive in segments of 60,000 bytes (a read returns what has arrived),
// each read is offered at least a quarter of the buffer, so that a sidecar
// that is behind makes few, large system calls: a partial command left
// near the buffer's end is moved to its front first, rather than a read
// being made for the few KiB of room after it.
func TestReaderReadsIntoRoomNotSlivers(t *testing.T) {
	limits := protocol.Limits{MaxControlLine: 4096, MaxPayload: 1 << 20}
	const frames = 5000
	var wire bytes.Buffer
	for i := range frames { // each its own subject, so a stale one shows
		fmt.Fprintf(&wire, "PUB s.%d 1000\r\n%s\r\n", i, strings.Repeat("x", 1000))
	}
	data := wire.Bytes()
	rec := &roomRecorder{phased: phased{data: data, wholeUntil: len(data)}}
	r := protocol.NewReader(rec, limits)
	rec.bufferSize = r.BufferSize
	var cmd protocol.Command
	for i := range frames {
		// The subject too: a command whose frame moved in the buffer
		// while its body was read has its line's slices taken again.
		if err := r.Next(&cmd); err != nil || len(cmd.Body) != 1000 || string(cmd.Subject) != fmt.Sprintf("s.%d", i) {
			t.Fatalf("command %d: %v, subject %q, %d bytes", i, err, cmd.Subject, len(cmd.Body))
		}
	}
	if rec.reads < len(data)/protocol.StreamingReadBuffer {
		t.Fatalf("%d reads for %d bytes: the recorder saw too few", rec.reads, len(data))
	}
	if rec.slivers > 0 {
		t.Fatalf("%d of %d reads were offered less than a quarter of the buffer (the smallest %d bytes)", rec.slivers, rec.reads, rec.smallest)
	}
}

// roomRecorder counts the reads offered less than a quarter of the
// reader's buffer.
type roomRecorder struct {
	phased
	bufferSize     func() int
	reads, slivers int
	smallest       int
}

func (r *roomRecorder) Read(b []byte) (int, error) {
	r.reads++
	if len(b) < r.bufferSize()/4 {
		r.slivers++
		if r.smallest == 0 || len(b) < r.smallest {
			r.smallest = len(b)
		}
	}
	const segment = 60_000
	return r.phased.Read(b[:min(len(b), segment-r.off%segment)])
}
