package protocol_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
	"strings"
	"testing"

	"github.com/weighstation/weighstation/sidecar/protocol"
)

// budgetMemory is a protocol.Memory of limit bytes that counts what it
// lends and refuses.
type budgetMemory struct {
	limit, held, peak         int
	refusedNeeded, refusedFor int // refusals of growth a frame needed, and of growth for speed
}

func (m *budgetMemory) Get(size int, needed bool) []byte {
	if m.held+size > m.limit {
		if needed {
			m.refusedNeeded++
		} else {
			m.refusedFor++
		}
		return nil
	}
	m.held += size
	m.peak = max(m.peak, m.held)
	return make([]byte, size)
}

func (m *budgetMemory) Put(buf []byte) { m.held -= len(buf) }

// TestReaderChargesLargeBodiesAndGivesThemBack: a body larger than the
// streaming buffer is read into memory from the Memory, which has it back
// once the body is consumed (before the reader waits for more), and
// everything on Release.
func TestReaderChargesLargeBodiesAndGivesThemBack(t *testing.T) {
	const size = 300_000
	wire := "PUB big 300000\r\n" + strings.Repeat("x", size) + "\r\nPUB small 5\r\nhello\r\n"
	mem := &budgetMemory{limit: 1 << 20}
	r := protocol.NewReader(&chunky{data: []byte(wire), rng: rand.New(rand.NewSource(1))}, protocol.DefaultLimits)
	r.ChargeTo(mem)
	var cmd protocol.Command
	if err := r.Next(&cmd); err != nil || len(cmd.Body) != size {
		t.Fatalf("Next: %v, body %d bytes; want %d", err, len(cmd.Body), size)
	}
	if mem.held < size || mem.held > size+protocol.StreamingReadBuffer {
		t.Fatalf("the Memory lent %d bytes for a %d-byte frame", mem.held, size)
	}
	if err := r.Next(&cmd); err != nil || string(cmd.Body) != "hello" {
		t.Fatalf("Next: %v, body %q", err, cmd.Body)
	}
	if mem.held > protocol.StreamingReadBuffer {
		t.Fatalf("after the large frame was consumed the reader holds %d bytes of the Memory, want at most the streaming size %d", mem.held, protocol.StreamingReadBuffer)
	}
	r.Release()
	if mem.held != 0 {
		t.Fatalf("after Release the Memory still lends %d bytes", mem.held)
	}
}

// TestReaderSkipsABodyItsMemoryRefuses: a body the Memory has no room for
// is skipped unread, as a *BodyRefused naming its size, with the command's
// subject and reply; the commands after it are read as usual. A skipped
// body that is not followed by CRLF is the client's protocol error.
func TestReaderSkipsABodyItsMemoryRefuses(t *testing.T) {
	big := strings.Repeat("y", 200_000)
	tests := []struct {
		name, wire     string
		subject, reply string
		size           int
	}{
		{"pub", "PUB orders.eu 200000\r\n" + big + "\r\nPUB next 2\r\nok\r\n", "orders.eu", "", 200_000},
		{"pub with reply", "PUB orders.eu _INBOX.a.1 200000\r\n" + big + "\r\nPUB next 2\r\nok\r\n", "orders.eu", "_INBOX.a.1", 200_000},
		{"hpub", "HPUB orders.eu 12 200000\r\nNATS/1.0\r\n\r\n" + big[12:] + "\r\nPUB next 2\r\nok\r\n", "orders.eu", "", 200_000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mem := &budgetMemory{limit: 100_000} // the streaming buffer fits, the frame does not
			r := protocol.NewReader(&chunky{data: []byte(tc.wire), rng: rand.New(rand.NewSource(2))}, protocol.DefaultLimits)
			r.ChargeTo(mem)
			var cmd protocol.Command
			err := r.Next(&cmd)
			var refused *protocol.BodyRefused
			if !errors.As(err, &refused) || refused.Size != tc.size {
				t.Fatalf("Next = %v, want a *BodyRefused of %d bytes", err, tc.size)
			}
			if string(cmd.Subject) != tc.subject || string(cmd.Reply) != tc.reply || cmd.Body != nil {
				t.Fatalf("refused command: subject %q reply %q body %d bytes; want %q, %q, none", cmd.Subject, cmd.Reply, len(cmd.Body), tc.subject, tc.reply)
			}
			if mem.refusedNeeded == 0 || mem.peak > mem.limit {
				t.Fatalf("Memory: %+v", mem)
			}
			if err := r.Next(&cmd); err != nil || string(cmd.Subject) != "next" || string(cmd.Body) != "ok" {
				t.Fatalf("the command after the skipped body: %v, %q %q", err, cmd.Subject, cmd.Body)
			}
			r.Release()
			if mem.held != 0 {
				t.Fatalf("after Release the Memory still lends %d bytes", mem.held)
			}
		})
	}
	t.Run("no CRLF after the body", func(t *testing.T) {
		mem := &budgetMemory{limit: 0}
		r := protocol.NewReader(strings.NewReader("PUB a 100000\r\n"+strings.Repeat("z", 100_002)), protocol.DefaultLimits)
		r.ChargeTo(mem)
		var cmd protocol.Command
		var perr *protocol.Error
		if err := r.Next(&cmd); !errors.As(err, &perr) || !errors.Is(err, protocol.ErrMalformed) || !perr.Close {
			t.Fatalf("Next = %v, want the malformed-body error that closes", err)
		}
	})
	t.Run("truncated body", func(t *testing.T) {
		r := protocol.NewReader(strings.NewReader("PUB a 100000\r\nzz"), protocol.DefaultLimits)
		r.ChargeTo(&budgetMemory{limit: 0})
		var cmd protocol.Command
		if err := r.Next(&cmd); err != io.ErrUnexpectedEOF {
			t.Fatalf("Next = %v, want io.ErrUnexpectedEOF", err)
		}
	})
}

// TestReaderWithoutRoomForSpeedStaysSmall: when the Memory refuses every
// byte, a stream of small commands is still read, in the initial buffer.
func TestReaderWithoutRoomForSpeedStaysSmall(t *testing.T) {
	var wire bytes.Buffer
	for range 1000 {
		wire.WriteString("PUB s 100\r\n" + strings.Repeat("x", 100) + "\r\n")
	}
	mem := &budgetMemory{limit: 0}
	r := protocol.NewReader(&wire, protocol.DefaultLimits)
	r.ChargeTo(mem)
	var cmd protocol.Command
	for i := range 1000 {
		if err := r.Next(&cmd); err != nil || len(cmd.Body) != 100 {
			t.Fatalf("command %d: %v, body %d bytes", i, err, len(cmd.Body))
		}
	}
	if r.BufferSize() != protocol.InitialReadBuffer || mem.refusedFor == 0 || mem.refusedNeeded != 0 {
		t.Fatalf("buffer %d bytes, Memory %+v: want the initial %d bytes, growth for speed refused, none needed", r.BufferSize(), mem, protocol.InitialReadBuffer)
	}
}
