package protocol_test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand"
	"strings"
	"testing"

	"github.com/weighstation/weighstation/sidecar/protocol"
)

// chunky reads its data in pieces of 1 to 300 bytes, at random.
type chunky struct {
	data []byte
	rng  *rand.Rand
}

func (c *chunky) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(c.data), 1+c.rng.Intn(300))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// TestReaderTakesCommandsInRandomPieces: PUB, HPUB (tab-separated), SUB
// (LF only) and PING, payloads up to 199 KB, read in random pieces: every
// field and body as sent, and the buffer within one frame's bound.
func TestReaderTakesCommandsInRandomPieces(t *testing.T) {
	limits := protocol.Limits{MaxControlLine: 200, MaxPayload: 200000}
	rng := rand.New(rand.NewSource(1))
	for iter := 0; iter < 60; iter++ {
		var wire bytes.Buffer
		var want []string
		for i := 0; i < 200; i++ {
			size := rng.Intn(8900)
			if rng.Intn(20) == 0 {
				size = rng.Intn(199000)
			}
			subj := fmt.Sprintf("s.%d.%d", iter, i)
			switch rng.Intn(4) {
			case 0:
				fmt.Fprintf(&wire, "PUB %s r.%d %d\r\n%s\r\n", subj, i, size, strings.Repeat("x", size))
				want = append(want, fmt.Sprintf("PUB %s r.%d %d", subj, i, size))
			case 1:
				h := "NATS/1.0\r\nA: b\r\n\r\n"
				fmt.Fprintf(&wire, "HPUB\t%s\t%d\t%d\r\n%s%s\r\n", subj, len(h), len(h)+size, h, strings.Repeat("y", size))
				want = append(want, fmt.Sprintf("HPUB %s  %d", subj, len(h)+size))
			case 2:
				fmt.Fprintf(&wire, "SUB %s q %d\n", subj, i)
				want = append(want, fmt.Sprintf("SUB %s q %d", subj, i))
			case 3:
				wire.WriteString("PING\r\n")
				want = append(want, "PING")
			}
		}
		r := protocol.NewReader(&chunky{data: wire.Bytes(), rng: rng}, limits)
		var cmd protocol.Command
		for i, w := range want {
			if err := r.Next(&cmd); err != nil {
				t.Fatalf("iter %d cmd %d: %v", iter, i, err)
			}
			var got string
			switch cmd.Op {
			case protocol.OpPub:
				got = fmt.Sprintf("PUB %s %s %d", cmd.Subject, cmd.Reply, len(cmd.Body))
				if bytes.Count(cmd.Body, []byte("x")) != len(cmd.Body) {
					t.Fatalf("iter %d cmd %d: the PUB body is not what was sent", iter, i)
				}
			case protocol.OpHPub:
				got = fmt.Sprintf("HPUB %s %s %d", cmd.Subject, cmd.Reply, len(cmd.Body))
				if string(cmd.Header()) != "NATS/1.0\r\nA: b\r\n\r\n" {
					t.Fatalf("iter %d cmd %d: the HPUB header is %q", iter, i, cmd.Header())
				}
			case protocol.OpSub:
				got = fmt.Sprintf("SUB %s %s %s", cmd.Subject, cmd.Queue, cmd.SID)
			case protocol.OpPing:
				got = "PING"
			}
			if got != w {
				t.Fatalf("iter %d cmd %d: got %q want %q", iter, i, got, w)
			}
			if bound := max(16+limits.MaxControlLine+2+limits.MaxPayload+2, protocol.StreamingReadBuffer); r.BufferSize() > bound { // 16: the verb and its spaces
				t.Fatalf("buffer %d bytes, over its bound %d", r.BufferSize(), bound)
			}
		}
		if err := r.Next(&cmd); err != io.EOF {
			t.Fatal(err)
		}
	}
}
