package system_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/weighstation/weighstation/sidecar"
)

// slowConsumer is an application that reads its sidecar's socket with the
// NATS protocol by hand, one message at a time, and works on each message
// for a fixed time before it reads the next. A stock client would not do:
// nats.go reads its socket eagerly into its own pending buffer (and drops
// at its own limit), so behind it no queue would form in the sidecar.
//
// It times every message from the send time `weighstation bench` writes
// into the payload (package loadgen: intended send time, actual send time
// and sequence number, little-endian Unix nanoseconds, in the first 24
// bytes) to the moment it read the message: the outside measurement that
// the sidecars' own must agree with.
type slowConsumer struct {
	name string
	conn *net.TCPConn
	in   *bufio.Reader
	work time.Duration
	done chan struct{}

	mu sync.Mutex
	// fromSent is read time minus the bench's actual send time (the
	// sidecars' stamps are taken a moment later); fromIntended is read time
	// minus the intended send time of the bench's schedule. Microseconds.
	fromSent, fromIntended *hdrhistogram.Histogram
	got                    int64 // messages read
	bench                  int64 // of them, the bench's (not sentinels)
	stamped                int64 // messages that still carried a sidecar's stamp header
	short                  int64 // payloads too short to carry send times
	negative               int64 // read before their send time (never, on one clock)
	worked                 time.Duration
	// reads are when it read each message, in order, and fromSentMicros
	// each one's time from its send time.
	reads          []time.Time
	fromSentMicros []int64
	err            error
}

// sentinelSeq marks a test's own sentinel messages, which carry the bench's
// payload layout so that they are timed like the rest.
const sentinelSeq = math.MaxUint64

// benchPayload is a payload in the bench's layout, sent now.
func benchPayload(size int, seq uint64) []byte {
	p := make([]byte, size)
	now := uint64(time.Now().UnixNano())
	binary.LittleEndian.PutUint64(p[0:], now)
	binary.LittleEndian.PutUint64(p[8:], now)
	binary.LittleEndian.PutUint64(p[16:], seq)
	return p
}

// startSlowConsumer connects to the pod's sidecar with a receive buffer of
// recvBuffer bytes (set before connecting), subscribes to subject with sid
// 1, and works for work on each message it reads.
func startSlowConsumer(t *testing.T, p *pod, subject string, recvBuffer int, work time.Duration) *slowConsumer {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, recvBuffer)
		}); err != nil {
			return err
		}
		return serr
	}}
	nc, err := d.DialContext(context.Background(), "tcp", p.side.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := &slowConsumer{
		name: p.name, conn: nc.(*net.TCPConn),
		// The smallest buffer bufio allows: nothing of the next message
		// waits in this process, only in the kernel and the sidecar.
		in:   bufio.NewReaderSize(nc, 16),
		work: work, done: make(chan struct{}),
		fromSent: hdrhistogram.New(1, 60_000_000, 3), fromIntended: hdrhistogram.New(1, 60_000_000, 3),
	}
	t.Cleanup(func() { _ = c.conn.Close(); <-c.done })
	_ = c.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if line, err := c.in.ReadString('\n'); err != nil || !strings.HasPrefix(line, "INFO ") {
		close(c.done)
		t.Fatalf("%s: the sidecar's greeting: %q, %v", p.name, line, err)
	}
	// headers: true, so that a stamp the consuming sidecar failed to strip
	// would arrive (as HMSG) and be counted.
	if _, err := fmt.Fprintf(c.conn, "CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,\"protocol\":1,\"name\":%q}\r\nSUB %s 1\r\nPING\r\n", p.name, subject); err != nil {
		close(c.done)
		t.Fatal(err)
	}
	if line, err := c.in.ReadString('\n'); err != nil || line != "PONG\r\n" {
		close(c.done)
		t.Fatalf("%s: after SUB: %q, %v", p.name, line, err)
	}
	_ = c.conn.SetDeadline(time.Time{})
	go c.run()
	return c
}

func (c *slowConsumer) run() {
	defer close(c.done)
	for {
		line, err := c.in.ReadString('\n')
		if err != nil {
			c.fail(err)
			return
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			c.fail(fmt.Errorf("empty line"))
			return
		}
		var hdrLen, total int
		switch f[0] {
		case "PING":
			if _, err := io.WriteString(c.conn, "PONG\r\n"); err != nil {
				c.fail(err)
				return
			}
			continue
		case "PONG", "+OK":
			continue
		case "MSG": // MSG <subject> <sid> [reply] <size>
			total, err = strconv.Atoi(f[len(f)-1])
		case "HMSG": // HMSG <subject> <sid> [reply] <header size> <total size>
			if hdrLen, err = strconv.Atoi(f[len(f)-2]); err == nil {
				total, err = strconv.Atoi(f[len(f)-1])
			}
		default:
			c.fail(fmt.Errorf("unexpected %q", strings.TrimSpace(line)))
			return
		}
		if err != nil || len(f) < 4 || hdrLen > total {
			c.fail(fmt.Errorf("malformed %q", strings.TrimSpace(line)))
			return
		}
		body := make([]byte, total+2)
		if _, err := io.ReadFull(c.in, body); err != nil {
			c.fail(err)
			return
		}
		now := time.Now()
		c.record(now, body[:hdrLen], body[hdrLen:total])
		// The consumer's work on the message; the next one waits meanwhile
		// in the kernel's buffers and behind them in the sidecar.
		start := time.Now()
		time.Sleep(c.work)
		worked := time.Since(start)
		c.mu.Lock()
		c.worked += worked
		c.mu.Unlock()
	}
}

func (c *slowConsumer) record(now time.Time, header, payload []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got++
	if bytes.Contains(bytes.ToLower(header), []byte(strings.ToLower(sidecar.StampHeader))) {
		c.stamped++
	}
	if len(payload) < 24 {
		c.short++
		return
	}
	intended := int64(binary.LittleEndian.Uint64(payload[0:]))
	sent := int64(binary.LittleEndian.Uint64(payload[8:]))
	if binary.LittleEndian.Uint64(payload[16:]) != sentinelSeq {
		c.bench++
	}
	for i, m := range []struct {
		h    *hdrhistogram.Histogram
		from int64
	}{{c.fromSent, sent}, {c.fromIntended, intended}} {
		us := (now.UnixNano() - m.from) / 1e3
		if us < 0 {
			c.negative++
		}
		us = min(max(us, 1), 60_000_000)
		_ = m.h.RecordValue(us)
		if i == 0 {
			c.reads, c.fromSentMicros = append(c.reads, now), append(c.fromSentMicros, us)
		}
	}
}

func (c *slowConsumer) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil && !isClosed(err) {
		c.err = err
	}
}

func isClosed(err error) bool {
	return err == io.EOF || strings.Contains(err.Error(), "use of closed network connection")
}

// slowConsumerStats is a copy of what a slowConsumer measured.
type slowConsumerStats struct {
	got, bench, stamped, short, negative int64
	fromSent, fromIntended               *hdrhistogram.Histogram
	// work is the mean time the consumer spent on one message.
	work time.Duration
	// reads and fromSentMicros are per message, in order (timed messages
	// only).
	reads          []time.Time
	fromSentMicros []int64
	err            error
}

// heldAbove bounds how long the messages that decide the quantile q of h
// (from the send time; h is this consumer's distribution or one it was
// merged into) waited in the kernel buffers, when those hold at most held
// messages: when message i entered the kernel, message i-held had been
// read (else the kernel would have held one more), so it waited there at
// most reads[i] - reads[i-held], the time the consumer took for the held
// messages before it. It returns the longest such time among this
// consumer's messages at or over the quantile, and how many there are.
// Those waited long in the sidecar, so the consumer was busy throughout:
// the time is its work (a 5 ms sleep, and however late it woke from it),
// not its idling.
func (s slowConsumerStats) heldAbove(h *hdrhistogram.Histogram, q float64, held int) (time.Duration, int) {
	at := h.ValueAtQuantile(q) // the highest value of its bucket
	var longest time.Duration
	var n int
	for i, us := range s.fromSentMicros {
		if us < at && !h.ValuesAreEquivalent(us, at) {
			continue
		}
		n++
		longest = max(longest, s.reads[i].Sub(s.reads[max(i-held, 0)]))
	}
	return longest, n
}

func (c *slowConsumer) stats() slowConsumerStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := slowConsumerStats{
		got: c.got, bench: c.bench, stamped: c.stamped, short: c.short, negative: c.negative,
		fromSent: hdrhistogram.Import(c.fromSent.Export()), fromIntended: hdrhistogram.Import(c.fromIntended.Export()), err: c.err,
		reads: append([]time.Time(nil), c.reads...), fromSentMicros: append([]int64(nil), c.fromSentMicros...),
	}
	if c.got > 0 {
		st.work = c.worked / time.Duration(c.got)
	}
	return st
}

// kernelBuffers returns the kernel buffers between the sidecar and the
// consumer as the kernel reports them (getsockopt, which includes Linux's
// doubling): the sidecar's SO_SNDBUF on its end of the connection and the
// consumer's SO_RCVBUF. The sidecar runs in this process, so its end is
// found among this process's descriptors by its addresses.
func (c *slowConsumer) kernelBuffers(p *pod) (sendBuffer, recvBuffer int, err error) {
	rc, err := c.conn.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		recvBuffer, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
	}); err != nil {
		return 0, 0, err
	}
	if serr != nil {
		return 0, 0, serr
	}
	sendBuffer, err = socketOption(p.side.Addr(), c.conn.LocalAddr(), syscall.SO_SNDBUF)
	return sendBuffer, recvBuffer, err
}

// socketOption reads a SOL_SOCKET option of this process's TCP socket whose
// local address is local and whose peer is peer.
func socketOption(local, peer net.Addr, opt int) (int, error) {
	la, pa := local.(*net.TCPAddr), peer.(*net.TCPAddr)
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || !strings.HasPrefix(target, "socket:") {
			continue
		}
		sn, err := syscall.Getsockname(fd)
		if err != nil || !sameAddr(sn, la) {
			continue
		}
		pn, err := syscall.Getpeername(fd)
		if err != nil || !sameAddr(pn, pa) {
			continue
		}
		return syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, opt)
	}
	return 0, fmt.Errorf("no socket of this process from %s to %s", local, peer)
}

func sameAddr(sa syscall.Sockaddr, a *net.TCPAddr) bool {
	switch s := sa.(type) {
	case *syscall.SockaddrInet4:
		return s.Port == a.Port && net.IP(s.Addr[:]).Equal(a.IP)
	case *syscall.SockaddrInet6:
		return s.Port == a.Port && net.IP(s.Addr[:]).Equal(a.IP)
	}
	return false
}
