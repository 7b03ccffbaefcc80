package protocol_test

import (
	"testing"
	"time"

	"github.com/weighstation/weighstation/sidecar/protocol"
)

// msg is a whole MSG or HMSG: its head, the payload and the CRLF after it,
// as the sidecar's writer appends them.
func msg(subject, sid, reply string, header, payload []byte) []byte {
	dst := protocol.AppendMsgHead(nil, subject, sid, reply, header, len(payload))
	dst = append(dst, payload...)
	return append(dst, "\r\n"...)
}

func TestAppendServerMessages(t *testing.T) {
	tests := []struct {
		name string
		got  []byte
		want string
	}{
		{"msg", msg("orders.eu", "7", "", nil, []byte("hello")), "MSG orders.eu 7 5\r\nhello\r\n"},
		{"msg with reply", msg("a", "1", "_INBOX.x.y", nil, nil), "MSG a 1 _INBOX.x.y 0\r\n\r\n"},
		{"hmsg", msg("a", "1", "", []byte("NATS/1.0\r\n\r\n"), []byte("hi")), "HMSG a 1 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"},
		{"err", protocol.AppendErr(nil, "Maximum Payload Violation"), "-ERR 'Maximum Payload Violation'\r\n"},
		{"info", protocol.AppendInfo(nil, []byte(`{"max_payload":1024}`)), "INFO {\"max_payload\":1024}\r\n"},
	}
	for _, tc := range tests {
		if string(tc.got) != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

func TestErrorCoalescer(t *testing.T) {
	c := protocol.NewErrorCoalescer(time.Second, 2)
	t0 := time.Unix(1000, 0)
	steps := []struct {
		key  string
		at   time.Duration
		want bool
	}{
		{"a", 0, true},
		{"a", 500 * time.Millisecond, false}, // within the interval
		{"b", 600 * time.Millisecond, true},
		{"c", 700 * time.Millisecond, false}, // two keys remembered, both recent: bounded memory
		{"a", 1100 * time.Millisecond, true}, // the interval passed
		{"c", 1700 * time.Millisecond, true}, // "b" is old enough to forget
	}
	for i, s := range steps {
		if got := c.Allow(s.key, t0.Add(s.at)); got != s.want {
			t.Fatalf("step %d: Allow(%q) = %v, want %v", i, s.key, got, s.want)
		}
	}
	if c.Suppressed() != 2 {
		t.Fatalf("suppressed %d, want 2", c.Suppressed())
	}
}
