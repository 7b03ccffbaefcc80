package sidecar_test

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/sidecar"
	"github.com/weighstation/weighstation/sidecar/upstream"
)

// stallingBroker accepts the sidecar, answers its CONNECT and then reads
// nothing more, keeping the TCP connection up (a broker whose machine keeps
// TCP alive but whose process is stuck).
func stallingBroker(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				fmt.Fprint(c, `INFO {"server_id":"stall","version":"2.10.0","max_payload":1048576,"headers":true}`+"\r\n")
				in := bufio.NewReader(c)
				for {
					line, err := in.ReadString('\n')
					if err != nil {
						return
					}
					if strings.HasPrefix(line, "PING") {
						fmt.Fprint(c, "PONG\r\n")
						return // and read nothing more
					}
				}
			}()
		}
	}()
	return "nats://" + ln.Addr().String()
}

// TestShutdownEndsNearItsGraceWhenTheBrokerStopsReading: Shutdown delivers
// until its grace ends, then drops, closes the connections and flushes to
// the broker for at most UpstreamFlushTimeout. With a broker that reads
// nothing, an application's reader waits in a publish for room that never
// comes, and closing its socket does not wake it: the broker connection is
// given up after UpstreamFlushTimeout. (Shutdown waited until a write
// timed out or the PINGs went unanswered: 2 to 4 minutes at the defaults,
// past the pod's termination grace period.)
func TestShutdownEndsNearItsGraceWhenTheBrokerStopsReading(t *testing.T) {
	url := stallingBroker(t)
	up := natstest.DialUpstream(t, url, func(o *upstream.Options) {
		o.MaxPendingBytes = 64 << 10
		o.HandoffBacklogBytes = 16 << 10
		o.PingInterval = 10 * time.Second // a write may block 10-20 s (defaults: 2-4 min)
		o.MaxPingsOut = 2
	})
	natstest.WaitFor(t, "connected to the stalling broker", up.Connected)
	r := startRig(t, nil, up, func(o *sidecar.Options) { o.UpstreamFlushTimeout = 500 * time.Millisecond })

	app, err := net.Dial("tcp", r.side.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	if _, err := bufio.NewReader(app).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprint(app, "CONNECT {\"verbose\":false,\"protocol\":1}\r\n"); err != nil {
		t.Fatal(err)
	}
	frame := []byte("PUB pub.x 65536\r\n" + strings.Repeat("x", 65536) + "\r\n")
	var written atomic.Int64
	go func() {
		for {
			if _, err := app.Write(frame); err != nil {
				return
			}
			written.Add(1)
		}
	}()
	// The sidecar's reader of the application waits for the broker once
	// the application's writes stop going through.
	last, still := int64(-1), 0
	natstest.WaitFor(t, "the application's writes to stall", func() bool {
		if n := written.Load(); n != last {
			last, still = n, 0
		} else {
			still++
		}
		return still >= 3 && last > 0
	})

	const grace = 200 * time.Millisecond
	start := time.Now()
	done := make(chan sidecar.ShutdownSummary, 1)
	go func() { done <- r.side.Shutdown(grace) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Shutdown did not return in 30 s")
	}
	// grace, then UpstreamFlushTimeout for the readers and at most as long
	// for the flush, with room for a loaded machine; 10 s without the fix.
	if took, bound := time.Since(start), grace+2*500*time.Millisecond+2*time.Second; took > bound {
		t.Errorf("Shutdown(%s) took %s with UpstreamFlushTimeout 500ms: more than %s past its grace period", grace, took.Round(time.Millisecond), bound)
	}
}

// TestPongsOwedCountAgainstMaxControlBytes: while the broker confirms
// nothing, every PING after a publish owes a PONG; they count against
// MaxControlBytes with the rest of the connection's control replies, so a
// client that sends them faster than they can be answered is closed as a
// slow consumer (before, each owed one a timer and a broker PING, without
// bound). Below the bound the connection serves on: a refusal still
// reaches it.
func TestPongsOwedCountAgainstMaxControlBytes(t *testing.T) {
	const owed, room = 100, 200 // PONGs the test owes; bytes left for one -ERR
	up := natstest.DialUpstream(t, stallingBroker(t))
	natstest.WaitFor(t, "connected to the stalling broker", up.Connected)
	r := startRig(t, nil, up, func(o *sidecar.Options) {
		o.UpstreamFlushTimeout = time.Hour
		o.MaxControlBytes = owed*len("PONG\r\n") + room
	})
	c := r.raw(t)
	pairs := strings.Repeat("PUB pub.x 1\r\nx\r\nPING\r\n", owed)
	c.send("CONNECT {\"verbose\":false}\r\n" + pairs + "SUB $WEIGHSTATION.x 1\r\n")
	if l := c.line(); !strings.HasPrefix(l, "-ERR 'Permissions Violation for Subscription") {
		t.Fatalf("got %q, want the refusal: %d PONGs owed leave room for it", l, owed)
	}
	c.send(strings.Repeat("PUB pub.x 1\r\nx\r\nPING\r\n", room/len("PONG\r\n")+1))
	c.closedAfter("")
}
