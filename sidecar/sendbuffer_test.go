package sidecar_test

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/sidecar"
)

// TestAppSendBufferKeepsTheQueueInTheSidecar: an application that stops
// reading holds, with -app-send-buffer, only about that buffer and its own
// receive buffer in the kernel; the rest waits in the sidecar's queue (or
// is dropped there and counted), where its limits and latency apply.
func TestAppSendBufferKeepsTheQueueInTheSidecar(t *testing.T) {
	const sendBuffer, recvBuffer, size, messages = 8 << 10, 4 << 10, 1 << 10, 1500
	r := newRig(t, func(o *sidecar.Options) { o.AppSendBuffer = sendBuffer })

	// A raw socket, so that no client library reads eagerly behind the
	// test's back: it subscribes, then never reads again.
	conn, err := net.Dial("tcp", r.side.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.(*net.TCPConn).SetReadBuffer(recvBuffer); err != nil {
		t.Fatal(err)
	}
	in := bufio.NewReader(conn)
	if _, err := in.ReadString('\n'); err != nil { // INFO
		t.Fatal(err)
	}
	if _, err := fmt.Fprint(conn, "CONNECT {\"verbose\":false,\"protocol\":1}\r\nSUB stuck 1\r\nPING\r\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := in.ReadString('\n'); err != nil || !strings.HasPrefix(line, "PONG") {
		t.Fatalf("after SUB: %q, %v", line, err)
	}

	out := r.direct(t)
	payload := []byte(strings.Repeat("x", size))
	for range messages {
		if err := out.Publish("stuck", payload); err != nil {
			t.Fatal(err)
		}
	}
	flush(t, out)
	var st sidecar.SubscriptionStats
	natstest.WaitFor(t, "every message reached the sidecar", func() bool {
		for _, s := range r.side.Stats() {
			if s.Key.Subject == "stuck" {
				st = s
				return s.Counts.Arrived == messages
			}
		}
		return false
	})
	// Linux doubles SO_SNDBUF and SO_RCVBUF for its bookkeeping; a
	// message is its payload plus a MSG line. Twice that again is the
	// margin for what the writer hands the kernel in one batch.
	kernel := 2*(2*sendBuffer+2*recvBuffer) + sidecar.DefaultOptions.WriteBatchBytes
	if written := int(st.Counts.Delivered) * (size + 32); written > kernel {
		t.Fatalf("%d messages (%d bytes) went into the socket of an application that reads nothing; want at most %d bytes with -app-send-buffer %d (counts %+v)",
			st.Counts.Delivered, written, kernel, sendBuffer, st.Counts)
	}
	// The writer's batch, taken from the queue and written at once, is no
	// larger than the send buffer: its messages are measured when the
	// write returns, so a batch the kernel cannot take would be measured
	// late, while the application already read its first messages.
	if batch := int(st.Counts.InFlight); batch > sendBuffer/size+1 {
		t.Fatalf("%d messages (%d bytes) in flight in one write; want at most what -app-send-buffer %d holds, and one more (counts %+v)",
			batch, batch*(size+32), sendBuffer, st.Counts)
	}
	if held := st.Counts.Pending + st.Counts.InFlight; held == 0 {
		t.Fatalf("nothing waits in the sidecar (counts %+v): the kernel took it all", st.Counts)
	}
}
