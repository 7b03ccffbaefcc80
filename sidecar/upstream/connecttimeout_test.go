//go:build linux

package upstream_test

import (
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/weighstation/weighstation/sidecar/upstream"
)

// unansweredAddress is a loopback address whose SYNs nothing answers, as a
// deleted broker pod's address that a Service still routes to: a listener
// with a backlog of 0 whose accept queue is full, so that the kernel drops
// further SYNs.
func unansweredAddress(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	for filled := 0; ; filled++ {
		c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
		if err != nil {
			if filled == 0 {
				t.Fatalf("no connection reached the listener: %v", err)
			}
			return addr // the queue is full: this connect was not answered
		}
		t.Cleanup(func() { _ = c.Close() })
		if filled > 16 {
			t.Skip("the kernel answers connects beyond a full accept queue here")
		}
	}
}

// A connection attempt to an address that does not answer gives up after
// ConnectTimeout, not DialTimeout, so that the next attempt (a new SYN,
// which the Service may route to a live broker) comes soon.
func TestAnUnansweredConnectEndsAfterConnectTimeout(t *testing.T) {
	addr := unansweredAddress(t)
	for _, tc := range []struct {
		name           string
		connectTimeout time.Duration
		atLeast        time.Duration
		within         time.Duration
	}{
		{"the default", upstream.ConnectTimeout, upstream.ConnectTimeout, upstream.ConnectTimeout + time.Second},
		{"unset: DialTimeout", 0, 2 * time.Second, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := upstream.DefaultOptions
			opts.URL = "nats://" + addr
			opts.DialTimeout = 2 * time.Second
			opts.ConnectTimeout = tc.connectTimeout
			// Dial returns once its first attempt has ended, connected or
			// not (the client goes on trying).
			start := time.Now()
			c, err := upstream.Dial(opts)
			took := time.Since(start)
			if err != nil {
				t.Fatalf("Dial: %v", err)
			}
			defer c.Close()
			if c.Connected() {
				t.Fatalf("connected to %s, which answers nothing", addr)
			}
			if took < tc.atLeast || took > tc.within {
				t.Errorf("the first attempt gave up after %s, want between %s and %s", took, tc.atLeast, tc.within)
			}
		})
	}
}
