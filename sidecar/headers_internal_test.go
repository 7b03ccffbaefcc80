package sidecar

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestValidHeaderAndStripping: validHeader takes what nats.go decodes the
// same way the sidecar scans it, and for every block it takes, nats.go
// finds no reserved header in what stripReserved leaves. (A bare LF passed
// validHeader; nats.go ends a line there, and a reserved header hidden
// after one reached the consumer.)
func TestValidHeaderAndStripping(t *testing.T) {
	for _, tc := range []struct {
		block string
		valid bool
	}{
		{"NATS/1.0\r\n\r\n", true},
		{"NATS/1.0\r\nX-App: 1\r\n\r\n", true},
		{"NATS/1.0 503\r\n\r\n", true},
		{"NATS/1.0\r\nX-App: 1\r\nWeighstation-Sent: 5\r\n\r\n", true},
		{"NATS/1.0\r\nweighstation-origin: x.1\r\nX-App:\r\n\r\n", true},
		{"NATS/1.0\r\nX-App: 1\nWeighstation-Sent: 5\r\n\r\n", false},
		{"NATS/1.0\nweighstation-origin: forged.1\r\n\r\n", false},
		{"NATS/1.0\r\nX-App: 1\rWeighstation-Sent: 5\r\n\r\n", false},
		{"NATS/1.0\r\nX-App: a\r\n\n", false},
		{"NATS/1.1\r\n\r\n", false},
		{"NATS/1.0\r\nX-App: 1\r\n", false},
		{"NATS/1.0\r\nX App: 1\r\n\r\n", false},
		{"NATS/1.0\r\n: 1\r\n\r\n", false},
		{"NATS/1.0\r\nno colon\r\n\r\n", false},
	} {
		if got := validHeader([]byte(tc.block)); got != tc.valid {
			t.Errorf("validHeader(%q) = %v, want %v", tc.block, got, tc.valid)
			continue
		}
		if !tc.valid {
			continue
		}
		out, _ := stripReserved(nil, []byte(tc.block))
		if len(out) == 0 {
			continue // nothing left: the message goes up as a MSG
		}
		decoded, err := nats.DecodeHeadersMsg(out)
		if err != nil {
			t.Errorf("stripReserved(%q) = %q, which nats.go cannot decode: %v", tc.block, out, err)
			continue
		}
		for k := range decoded {
			if strings.EqualFold(k, StampHeader) || strings.EqualFold(k, OriginHeader) {
				t.Errorf("stripReserved(%q) = %q: nats.go decodes the reserved header %q", tc.block, out, k)
			}
		}
	}
}
