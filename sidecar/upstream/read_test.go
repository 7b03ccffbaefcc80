package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/weighstation/weighstation/sidecar/protocol"
)

// stream is what a broker might send: messages with and without reply and
// headers, a PING, an INFO and a 1 MiB payload, whose deliveries are
// recorded as "subject|reply|header|payload".
func stream() (wire string, want []string) {
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	var b strings.Builder
	add := func(frame, delivered string) {
		b.WriteString(frame)
		if delivered != "" {
			want = append(want, delivered)
		}
	}
	add("MSG a.b 1 5\r\nhello\r\n", "a.b|||hello")
	add("MSG a.b 1 _INBOX.x 0\r\n\r\n", "a.b|_INBOX.x||")
	add("PING\r\n", "")
	add("HMSG h 2 22 25\r\nNATS/1.0\r\nK: value\r\n\r\nabc\r\n", "h||NATS/1.0\r\nK: value\r\n\r\n|abc")
	add("INFO {\"server_id\":\"x\",\"version\":\"9.9.9\",\"headers\":true,\"max_payload\":2097152}\r\n", "")
	add("HMSG h 2 r.1 16 16\r\nNATS/1.0 503\r\n\r\n\r\n", "h|r.1|NATS/1.0 503\r\n\r\n|")
	add(fmt.Sprintf("MSG big 1 %d\r\n%s\r\n", len(big), big), "big|||"+big)
	add("MSG gone 99 1\r\nx\r\n", "") // no subscription has sid 99
	add("MSG a.b 1 5\r\nafter\r\n", "a.b|||after")
	return b.String(), want
}

func readerClient(t *testing.T) (*Client, *[]string) {
	t.Helper()
	var got []string
	record := func(m *Msg) {
		got = append(got, string(m.Subject)+"|"+string(m.Reply)+"|"+string(m.Header)+"|"+string(m.Payload))
	}
	c := &Client{subs: map[uint64]*Subscription{1: {sid: 1, handler: record}, 2: {sid: 2, handler: record}}, wake: make(chan struct{}, 1)}
	local, remote := net.Pipe() // a live connection, which the PONG is for; nothing is written to it here
	t.Cleanup(func() { _ = local.Close(); _ = remote.Close() })
	c.conn = local
	return c, &got
}

// TestFramesAcrossReads: frames split at every byte, at halves, and read
// whole parse the same, a 1 MiB payload included; the buffer grows for it
// and shrinks back once reads are small again.
func TestFramesAcrossReads(t *testing.T) {
	wire, want := stream()
	for _, tt := range []struct {
		name string
		r    func(io.Reader) io.Reader
	}{
		{"one byte per read", iotest.OneByteReader},
		{"half of what is asked per read", iotest.HalfReader},
		{"whole reads", func(r io.Reader) io.Reader { return r }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, got := readerClient(t)
			fr := c.newFrames(tt.r(strings.NewReader(wire)), maxServerPayload)
			var m Msg
			var err error
			grew := false
			for err == nil {
				err = c.readOne(&link{conn: c.conn, fr: fr}, &m)
				grew = grew || fr.Size() > initialReadBuffer
			}
			if err != io.EOF {
				t.Fatalf("reading the stream: %v", err)
			}
			if len(*got) != len(want) {
				t.Fatalf("%d messages delivered, want %d", len(*got), len(want))
			}
			for i := range want {
				if (*got)[i] != want[i] {
					t.Errorf("message %d: %.80q, want %.80q", i, (*got)[i], want[i])
				}
			}
			if !grew {
				t.Error("the buffer never grew for the 1 MiB message")
			}
			if !bytes.Contains(c.ctl, pongLine) {
				t.Error("the broker's PING was not answered")
			}
			if v := c.info.Load(); v == nil || v.Version != "9.9.9" {
				t.Errorf("the INFO sent on the connection was not taken: %+v", v)
			}
		})
	}
}

// TestReadBufferShrinksWhenIdle: after a large frame, small reads return
// the buffer to its first size.
func TestReadBufferShrinksWhenIdle(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	wire := fmt.Sprintf("MSG big 1 %d\r\n%s\r\n", len(big), big) + strings.Repeat("MSG a.b 1 1\r\nx\r\n", 2*protocol.IdleReads)
	c, got := readerClient(t)
	fr := c.newFrames(iotest.OneByteReader(strings.NewReader(wire)), maxServerPayload)
	var m Msg
	var err error
	largest := 0
	for err == nil {
		err = c.readOne(&link{conn: c.conn, fr: fr}, &m)
		largest = max(largest, fr.Size())
	}
	if err != io.EOF || len(*got) != 1+2*protocol.IdleReads {
		t.Fatalf("%d messages, error %v", len(*got), err)
	}
	if largest <= 1<<20 || fr.Size() != initialReadBuffer {
		t.Fatalf("buffer grew to %d and ended at %d, want over 1 MiB and then %d", largest, fr.Size(), initialReadBuffer)
	}
}

// TestMalformedServerFrames: what is not the NATS protocol ends the
// connection with an error that says what came, never a panic.
func TestMalformedServerFrames(t *testing.T) {
	for _, tt := range []struct{ name, wire, want string }{
		{"unknown operation", "HELLO\r\n", "not a NATS server operation"},
		{"MSG without a size", "MSG a 1\r\n", "malformed"},
		{"size not a number", "MSG a 1 x\r\nx\r\n", "malformed"},
		{"header larger than the message", "HMSG a 1 9 3\r\nabc\r\n", "malformed"},
		{"body not followed by CRLF", "MSG a 1 1\r\nxyz", "not followed by CRLF"},
		{"truncated body", "MSG a 1 10\r\nabc", "unexpected EOF"},
		{"control line too long", strings.Repeat("x", maxServerLine+10), "control line over"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := readerClient(t)
			fr := c.newFrames(strings.NewReader(tt.wire), maxServerPayload)
			var m Msg
			err := c.readOne(&link{conn: c.conn, fr: fr}, &m)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one with %q", err, tt.want)
			}
		})
	}
}

// FuzzServerFrames: no input makes the reader panic or deliver a message
// whose parts are not in the input.
func FuzzServerFrames(f *testing.F) {
	wire, _ := stream()
	f.Add([]byte(wire[:200]))
	f.Add([]byte("HMSG h 2 22 25\r\nNATS/1.0\r\nK: value\r\n\r\nabc\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		c, _ := readerClient(t)
		c.subs[1].handler = func(m *Msg) {
			if !bytes.Contains(in, m.Payload) || !bytes.Contains(in, m.Subject) {
				t.Fatalf("delivered parts that are not in the input")
			}
		}
		fr := c.newFrames(iotest.HalfReader(bytes.NewReader(in)), 1<<16)
		var m Msg
		for c.readOne(&link{conn: c.conn, fr: fr}, &m) == nil {
		}
	})
}

// chunkReader returns one chunk per Read.
type chunkReader struct{ chunks []string }

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.chunks[0])
	r.chunks[0] = r.chunks[0][n:]
	if r.chunks[0] == "" {
		r.chunks = r.chunks[1:]
	}
	return n, nil
}

// TestBeforeReadSeesEveryFrameReadSoFar: the hook runs before each read,
// once every whole frame of the earlier reads was handed over, and a frame
// split across reads is handed over only after the read that completes it.
func TestBeforeReadSeesEveryFrameReadSoFar(t *testing.T) {
	c, got := readerClient(t)
	var seen []int
	c.SetBeforeRead(func() { seen = append(seen, len(*got)) })
	r := &chunkReader{chunks: []string{
		"MSG a 1 1\r\nx\r\nMSG b 1 1\r\ny\r\n", // two frames
		"MSG c 1 3\r\nab",                      // one frame begun
		"c\r\nPING\r\nMSG d 2 0\r\n\r\n",       // its end, a PING, one more
	}}
	fr := c.newFrames(r, maxServerPayload)
	var m Msg
	var err error
	for err == nil {
		err = c.readOne(&link{conn: c.conn, fr: fr}, &m)
	}
	if !errors.Is(err, io.EOF) {
		t.Fatalf("read ended with %v, want EOF", err)
	}
	if want := []int{0, 2, 2, 4}; !slices.Equal(seen, want) {
		t.Fatalf("messages handed over at each read: %v, want %v", seen, want)
	}
}
