package upstream_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/sidecar/upstream"
)

// relay is a TCP relay between the client and the broker that the test can
// cut (every connection reset at once, what it held lost) and slow down
// (it reads the client 1 KiB at a time, so the client's megabyte writes
// fill the socket and complete in parts).
type relay struct {
	ln     net.Listener
	target string
	slow   bool

	mu    sync.Mutex
	conns []net.Conn

	// gate is held while the relay is paused (pause): it reads nothing
	// more from the client, so the client's writes stall once the kernel's
	// buffers are full.
	gate sync.Mutex
}

// gatedReader waits at the relay's gate before each read.
type gatedReader struct {
	r    io.Reader
	gate *sync.Mutex
}

func (g gatedReader) Read(p []byte) (int, error) {
	g.gate.Lock()
	g.gate.Unlock() //nolint:staticcheck // an empty critical section: waiting for the gate is the point
	return g.r.Read(p)
}

func (r *relay) pause()  { r.gate.Lock() }
func (r *relay) resume() { r.gate.Unlock() }

func startRelay(t *testing.T, target string, slow bool) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target, slow: slow}
	t.Cleanup(func() { _ = ln.Close(); r.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			// A small receive buffer, so that a paused relay stalls the
			// client's writes after little more than its send buffer.
			_ = c.(*net.TCPConn).SetReadBuffer(64 << 10)
			chunk := 64 << 10
			if slow {
				chunk = 1 << 10
			}
			r.mu.Lock()
			r.conns = append(r.conns, c, up)
			r.mu.Unlock()
			go func() {
				_, _ = io.CopyBuffer(struct{ io.Writer }{up}, gatedReader{c, &r.gate}, make([]byte, chunk))
				_ = up.Close()
			}()
			go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	return r
}

func (r *relay) url() string { return "nats://" + r.ln.Addr().String() }

// cut resets every connection: what the relay and the kernel held is lost.
func (r *relay) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		_ = c.(*net.TCPConn).SetLinger(0)
		_ = c.Close()
	}
	r.conns = nil
}

// sequenced collects sequence-numbered messages and checks that none
// arrives twice and that they arrive in order: all of them, or those from
// orderFrom on. Across a lost connection the order is not the broker's to
// keep: what the broker read from the old connection may be processed
// after what the new one brought (a broker reads each connection on a
// goroutine of its own).
type sequenced struct {
	mu        sync.Mutex
	last      int64
	orderFrom int64
	seen      map[int64]bool
	received  int
	bad       error
	done      chan struct{}
	until     int64
}

func newSequenced(until int64) *sequenced {
	return &sequenced{last: -1, seen: map[int64]bool{}, done: make(chan struct{}), until: until}
}

func (s *sequenced) take(data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seq := int64(binary.BigEndian.Uint64(data))
	if s.seen[seq] && s.bad == nil {
		s.bad = fmt.Errorf("message %d arrived twice", seq)
	}
	s.seen[seq] = true
	if seq >= s.orderFrom {
		if seq <= s.last && s.bad == nil {
			s.bad = fmt.Errorf("message %d after %d: out of order", seq, s.last)
		}
		s.last = seq
	}
	if want := bytes.Repeat([]byte{byte(seq)}, len(data)-8); !bytes.Equal(data[8:], want) && s.bad == nil {
		s.bad = fmt.Errorf("message %d of %d bytes arrived corrupted", seq, len(data))
	}
	s.received++
	if seq == s.until {
		close(s.done)
	}
}

func (s *sequenced) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.mu.Lock()
		defer s.mu.Unlock()
		t.Fatalf("%s: the last message did not arrive within 30s (%d received, last %d)", what, s.received, s.last)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bad != nil {
		t.Fatal(s.bad)
	}
}

func message(seq int64, size int) []byte {
	data := bytes.Repeat([]byte{byte(seq)}, 8+size)
	binary.BigEndian.PutUint64(data, uint64(seq))
	return data
}

// subscribeUnbounded subscribes a stock client of the broker to subject
// with no pending limits (a slow test machine must not make it drop), and
// returns once the broker has the subscription.
func subscribeUnbounded(t *testing.T, broker *server.Server, subject string, handle nats.MsgHandler) {
	t.Helper()
	sub := natstest.Connect(t, broker.ClientURL())
	s, err := sub.Subscribe(subject, handle)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestWritesCompleteInParts: through a broker link that reads slowly, the
// client's writev calls complete in parts and the publisher waits for room
// (MaxPendingBytes); every message arrives, in order and intact, from 1 B
// to 1 MiB, with and without headers.
func TestWritesCompleteInParts(t *testing.T) {
	broker := natstest.StartBroker(t, &server.Options{MaxPayload: 2 << 20})
	const n = 120
	got := newSequenced(n - 1)
	subscribeUnbounded(t, broker, "parts", func(m *nats.Msg) { got.take(m.Data) })
	rl := startRelay(t, broker.Addr().String(), true)
	up := natstest.DialUpstream(t, rl.url(), func(o *upstream.Options) { o.MaxPendingBytes = 256 << 10 })
	if !up.Connected() {
		t.Fatal("not connected")
	}
	sizes := []int{0, 1, 100, 4 << 10, 60 << 10, 1 << 20}
	header := []byte("NATS/1.0\r\nApp: kept\r\n\r\n")
	for i := range int64(n) {
		var h, extra []byte
		switch i % 3 {
		case 1:
			h = header
		case 2:
			extra = []byte("Extra: line\r\n")
		}
		if err := up.Publish([]byte("parts"), nil, h, extra, message(i, sizes[i%int64(len(sizes))])); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		up.WriteQueued()
	}
	got.wait(t, "through a slow link")
	if got.received != n {
		t.Fatalf("%d of %d messages arrived", got.received, n)
	}
	if up.InDoubt() != 0 || up.Reconnects() != 0 {
		t.Fatalf("in doubt %d, reconnects %d, want none", up.InDoubt(), up.Reconnects())
	}
}

// TestAPublisherThatFillsTheQueueWritesIt: a publisher that never calls
// WriteQueued (nothing else wakes the writer while nothing was written yet)
// and fills MaxPendingBytes writes the queue itself rather than waiting for
// a writer that nobody woke; every message arrives, in order.
func TestAPublisherThatFillsTheQueueWritesIt(t *testing.T) {
	broker := natstest.StartBroker(t, nil)
	const n = 200
	got := newSequenced(n - 1)
	subscribeUnbounded(t, broker, "full", func(m *nats.Msg) { got.take(m.Data) })
	up := natstest.DialUpstream(t, broker.ClientURL(), func(o *upstream.Options) {
		o.MaxPendingBytes, o.HandoffBacklogBytes = 2<<10, 2<<10
		o.ConfirmInterval = time.Hour // no confirmation timer to wake the writer either
	})
	published := make(chan error, 1)
	go func() {
		for i := range int64(n) {
			if err := up.Publish([]byte("full"), nil, nil, nil, message(i, 500)); err != nil {
				published <- fmt.Errorf("publish %d: %w", i, err)
				return
			}
		}
		published <- nil
	}()
	select {
	case err := <-published:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("a publisher that filled MaxPendingBytes (2 KiB) still waited after 10s")
	}
	up.WriteQueued() // the tail that did not fill the queue
	got.wait(t, "after the queue filled")
	if got.received != n {
		t.Fatalf("%d of %d messages arrived", got.received, n)
	}
}

// TestWriteSoonBoundsWhatWaits: a publisher that leaves its writes to the
// writer goroutine (WriteSoon) while the broker's link is stalled goes on
// only while less than HandoffBacklogBytes waits (without the bound it
// queued up to MaxPendingBytes, here 4 MiB, in buffers too large to
// reuse); once the link moves again every message arrives, in order.
func TestWriteSoonBoundsWhatWaits(t *testing.T) {
	broker := natstest.StartBroker(t, nil)
	const (
		n    = 4000
		size = 4 << 10 // 16 MiB in all: more than the kernel holds for a stalled link
	)
	got := newSequenced(n - 1)
	subscribeUnbounded(t, broker, "soon", func(m *nats.Msg) { got.take(m.Data) })
	rl := startRelay(t, broker.Addr().String(), false)
	const backlog = 100 << 10 // not the default, so that the option is what holds
	up := natstest.DialUpstream(t, rl.url(), func(o *upstream.Options) {
		o.MaxPendingBytes, o.HandoffBacklogBytes = 4<<20, backlog
	})
	rl.pause()
	paused := true
	defer func() {
		if paused {
			rl.resume()
		}
	}()
	type outcome struct {
		most int // the most bytes queued right after a WriteSoon
		err  error
	}
	published := make(chan outcome, 1) // buffered: the publisher may end after a failed test
	go func() {
		most := 0
		for i := range int64(n) {
			if err := up.Publish([]byte("soon"), nil, nil, nil, message(i, size)); err != nil {
				published <- outcome{most, fmt.Errorf("publish %d: %w", i, err)}
				return
			}
			up.WriteSoon()
			most = max(most, up.Buffered())
		}
		published <- outcome{most, nil}
	}()
	// The link stalls the writes; the publisher queues behind them until
	// the backlog is reached, and is then held in WriteSoon (or, without
	// the bound, goes on to MaxPendingBytes).
	natstest.WaitFor(t, "the backlog to build behind the stalled link", func() bool {
		_, held := up.Handoffs()
		return held > 0 || up.Buffered() >= backlog
	})
	rl.resume()
	paused = false
	res := <-published
	if res.err != nil {
		t.Fatal(res.err)
	}
	most := res.most
	got.wait(t, "after the link moved again")
	// What waits after WriteSoon returns is under the backlog, but for
	// control lines (a PONG, a PING) queued beside it.
	if limit := backlog + 64; most >= limit {
		t.Fatalf("after WriteSoon returned, up to %d bytes waited; want under %d (the handoff backlog)", most, limit)
	}
	if got.received != n {
		t.Fatalf("%d of %d messages arrived", got.received, n)
	}
}

// TestDialNamesAnInvalidOption: Dial refuses a limit of nothing (or a
// negative jitter) with an error that names the option, not a dump of all
// of them.
func TestDialNamesAnInvalidOption(t *testing.T) {
	for _, tc := range []struct {
		option string
		spoil  func(*upstream.Options)
	}{
		{"DialTimeout", func(o *upstream.Options) { o.DialTimeout = 0 }},
		{"ReconnectWait", func(o *upstream.Options) { o.ReconnectWait = -time.Second }},
		{"ReconnectJitter", func(o *upstream.Options) { o.ReconnectJitter = -1 }},
		{"OutageBufferBytes", func(o *upstream.Options) { o.OutageBufferBytes = 0 }},
		{"MaxPendingBytes", func(o *upstream.Options) { o.MaxPendingBytes = 0 }},
		{"PingInterval", func(o *upstream.Options) { o.PingInterval = 0 }},
		{"MaxPingsOut", func(o *upstream.Options) { o.MaxPingsOut = 0 }},
		{"ConfirmInterval", func(o *upstream.Options) { o.ConfirmInterval = 0 }},
	} {
		t.Run(tc.option, func(t *testing.T) {
			opts := upstream.DefaultOptions
			opts.URL = "nats://127.0.0.1:1"
			tc.spoil(&opts)
			up, err := upstream.Dial(opts)
			if err == nil {
				up.Close()
			}
			if err == nil || !strings.HasPrefix(err.Error(), "broker connection options: "+tc.option+" must") {
				t.Fatalf("got %v, want a refusal naming %s", err, tc.option)
			}
		})
	}
}

// TestHandoffBacklogIsWithinMaxPendingBytes: Dial refuses a handoff
// backlog of nothing or one past MaxPendingBytes, naming the option, and
// takes one equal to it.
func TestHandoffBacklogIsWithinMaxPendingBytes(t *testing.T) {
	for _, tc := range []struct {
		backlog int
		ok      bool
	}{
		{0, false},
		{1, true},
		{upstream.MaxPendingBytes, true},
		{upstream.MaxPendingBytes + 1, false},
	} {
		t.Run(fmt.Sprint(tc.backlog), func(t *testing.T) {
			opts := upstream.DefaultOptions
			opts.URL, opts.HandoffBacklogBytes = "nats://127.0.0.1:1", tc.backlog
			up, err := upstream.Dial(opts)
			if err == nil {
				up.Close()
			}
			switch {
			case tc.ok && err != nil:
				t.Fatalf("HandoffBacklogBytes %d refused: %v", tc.backlog, err)
			case !tc.ok && (err == nil || !strings.Contains(err.Error(), "HandoffBacklogBytes")):
				t.Fatalf("HandoffBacklogBytes %d: got %v, want a refusal naming HandoffBacklogBytes", tc.backlog, err)
			}
		})
	}
}

// TestWriteSoonHasTheWriterWrite: what a caller queued and left to the
// writer goroutine with WriteSoon reaches the broker, though nothing else
// would write it (no confirmation timer, no early PING from the broker).
func TestWriteSoonHasTheWriterWrite(t *testing.T) {
	broker := natstest.StartBroker(t, &server.Options{DisableShortFirstPing: true})
	const n = 50
	got := newSequenced(n - 1)
	subscribeUnbounded(t, broker, "handed", func(m *nats.Msg) { got.take(m.Data) })
	up := natstest.DialUpstream(t, broker.ClientURL(), func(o *upstream.Options) { o.ConfirmInterval = time.Hour })
	// A flush has the writer take the wake-up the connect left it.
	if err := up.Flush(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	_, writerBefore := up.Writes()
	for i := range int64(n) {
		if err := up.Publish([]byte("handed"), nil, nil, nil, message(i, 100)); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		up.WriteSoon()
	}
	got.wait(t, "left to the writer")
	if byCaller, byWriter := up.Writes(); byWriter == writerBefore {
		t.Fatalf("the writer goroutine wrote nothing (%d writes by callers)", byCaller)
	}
}

// TestReconnectCountsWhatWasInFlight: a link cut under load loses what was
// in flight; the client reconnects, and every message it accepted either
// arrives or is counted in doubt; none arrives twice, and those published
// after the reconnect arrive in order.
func TestReconnectCountsWhatWasInFlight(t *testing.T) {
	broker := natstest.StartBroker(t, nil)
	got := newSequenced(-2) // the end is known only later
	// Order is checked from the messages published after the reconnect
	// (the 20,000 and 5,000 below come first): those written to the cut
	// connection may reach the broker's processing after the new one's.
	got.orderFrom = 25_000
	sentinel := make(chan struct{})
	subscribeUnbounded(t, broker, "seq", func(m *nats.Msg) {
		if len(m.Data) == 0 {
			close(sentinel)
			return
		}
		got.take(m.Data)
	})
	rl := startRelay(t, broker.Addr().String(), false)
	// No confirmations but the first: everything written after it is in
	// doubt when the link is cut, so the count cannot be zero.
	up := natstest.DialUpstream(t, rl.url(), func(o *upstream.Options) { o.ConfirmInterval = time.Hour; o.ReconnectWait = 10 * time.Millisecond })
	accepted := int64(0)
	publish := func(count int) {
		for range count {
			if err := up.Publish([]byte("seq"), nil, nil, nil, message(accepted, 1000)); err != nil {
				t.Fatalf("publish %d: %v", accepted, err)
			}
			accepted++
			if accepted%16 == 0 {
				up.WriteQueued()
			}
		}
		up.WriteQueued()
	}
	publish(20_000)
	rl.cut()
	publish(5_000) // some before the client sees the cut, some held (within the 8 MiB outage buffer)
	natstest.WaitFor(t, "the client reconnects", func() bool { return up.Reconnects() == 1 && up.Connected() })
	publish(1_000)
	if err := up.Publish([]byte("seq"), nil, nil, nil, nil); err != nil { // the sentinel
		t.Fatal(err)
	}
	up.WriteQueued()
	select {
	case <-sentinel:
	case <-time.After(30 * time.Second):
		t.Fatal("the sentinel did not arrive within 30s")
	}
	got.mu.Lock()
	defer got.mu.Unlock()
	if got.bad != nil {
		t.Fatal(got.bad)
	}
	lost := accepted - int64(got.received)
	t.Logf("accepted %d, arrived %d, lost %d, in doubt %d", accepted, got.received, lost, up.InDoubt())
	if lost < 0 || uint64(lost) > up.InDoubt() || up.InDoubt() == 0 || up.Unsent() != 0 {
		t.Fatalf("accepted %d, arrived %d, in doubt %d, unsent %d: want every loss in doubt, and the doubt counted", accepted, got.received, up.InDoubt(), up.Unsent())
	}
}

// TestHeldUntilTheBrokerIsReached: before the broker is first reached,
// publishes are held within OutageBufferBytes and then refused; when it
// arrives they are all sent in order, renewed subscriptions first, except
// one over the broker's max_payload, which is counted and logged.
func TestHeldUntilTheBrokerIsReached(t *testing.T) {
	const payload = 512
	port := natstest.FreePort(t)
	var mu sync.Mutex
	var logs []string
	up := natstest.DialUpstream(t, fmt.Sprintf("nats://127.0.0.1:%d", port), func(o *upstream.Options) {
		o.OutageBufferBytes = 256 << 10
		o.Log = funcr.New(func(_, args string) { mu.Lock(); defer mu.Unlock(); logs = append(logs, args) }, funcr.Options{})
	})
	got := newSequenced(-2)
	up.Subscribe("held", "", func(m *upstream.Msg) { got.take(bytes.Clone(m.Payload)) })
	if err := up.Publish([]byte("held"), nil, nil, nil, make([]byte, 2*payload)); err != nil {
		t.Fatalf("holding a message over the coming broker's max_payload: %v", err)
	}
	held := int64(0)
	for ; ; held++ {
		err := up.Publish([]byte("held"), nil, nil, []byte("Stamp: x\r\n"), message(held, payload-8))
		if err != nil {
			if !errors.Is(err, upstream.ErrOutageBufferFull) {
				t.Fatalf("publish %d refused with %v, want ErrOutageBufferFull", held, err)
			}
			break
		}
	}
	if size := held * payload; size > 256<<10 || size < 256<<10*8/10 {
		t.Fatalf("%d messages of %d bytes held, want about 256 KiB", held, payload)
	}
	got.mu.Lock()
	got.until = held - 1
	got.mu.Unlock()
	natstest.StartBroker(t, &server.Options{Port: port, MaxPayload: 2*payload - 1})
	got.wait(t, "after the broker arrived")
	if n := up.Unsent(); n != 1 {
		t.Fatalf("%d held messages unsent, want the oversize one", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if all := strings.Join(logs, "\n"); !strings.Contains(all, `"msg"="the broker refused publishes held until it was reached" "error"="the message exceeds the broker's max_payload" "refused"=1`) ||
		!strings.Contains(all, `"msg"="connected to the broker"`) {
		t.Fatalf("the refusal or the connection is not logged:\n%s", all)
	}
	if up.Reconnects() != 0 {
		t.Fatalf("the first connection counted as %d reconnects", up.Reconnects())
	}
	err := up.Publish([]byte("held"), nil, nil, nil, make([]byte, 2*payload))
	if !errors.Is(err, upstream.ErrMaxPayload) {
		t.Fatalf("publishing over the broker's max_payload when connected: %v, want ErrMaxPayload", err)
	}
	if size := fmt.Sprintf("%d bytes", 2*payload); !strings.Contains(err.Error(), size) || !strings.Contains(err.Error(), "the broker's max_payload is ") {
		t.Fatalf("the refusal %q does not name the size (%s) and the broker's max_payload", err, size)
	}
}

// TestTLSToTheBroker: with the CA that signed the broker's certificate the
// connection is TLS and carries messages; without it the client refuses
// the broker and says why, and keeps trying.
func TestTLSToTheBroker(t *testing.T) {
	caFile, serverTLS := tlsFiles(t)
	broker := natstest.StartBroker(t, &server.Options{TLSConfig: serverTLS, TLS: true})
	cfg, err := upstream.TLSFromCAFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	up := natstest.DialUpstream(t, broker.ClientURL(), func(o *upstream.Options) { o.TLS = cfg })
	if !up.Connected() {
		t.Fatal("not connected over TLS")
	}
	got := make(chan string, 1)
	up.Subscribe("secure", "", func(m *upstream.Msg) { got <- string(m.Payload) })
	if err := up.Flush(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := up.Publish([]byte("secure"), nil, nil, nil, []byte("over tls")); err != nil {
		t.Fatal(err)
	}
	up.WriteQueued()
	select {
	case m := <-got:
		if m != "over tls" {
			t.Fatalf("got %q", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no message over TLS within 10s")
	}

	refused := make(chan string, 1)
	untrusting := natstest.DialUpstream(t, broker.ClientURL(), func(o *upstream.Options) {
		o.Log = funcr.New(func(_, args string) {
			select {
			case refused <- args:
			default:
			}
		}, funcr.Options{Verbosity: 1})
	})
	select {
	case line := <-refused:
		if !strings.Contains(line, "certificate") || untrusting.Connected() {
			t.Fatalf("without the CA: %q, connected %v; want the certificate refused", line, untrusting.Connected())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the refused certificate was not logged within 10s")
	}
}

// tlsFiles makes a CA and a broker certificate for 127.0.0.1 and returns
// the CA's PEM file and the broker's TLS configuration.
func tlsFiles(t *testing.T) (string, *tls.Config) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "broker"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return caFile, &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}
}

// TestCredentials: a token, an nkey from a seed file, and a wrong nkey,
// which the broker refuses (logged once, retried).
func TestCredentials(t *testing.T) {
	user, _ := nkeys.CreateUser()
	public, _ := user.PublicKey()
	seed, _ := user.Seed()
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	otherFile := filepath.Join(t.TempDir(), "other.nk")
	if err := os.WriteFile(otherFile, otherSeed, 0o600); err != nil {
		t.Fatal(err)
	}
	nkeyBroker := natstest.StartBroker(t, &server.Options{Nkeys: []*server.NkeyUser{{Nkey: public}}})
	tokenBroker := natstest.StartBroker(t, &server.Options{Authorization: "s3cret"})
	for _, tt := range []struct {
		name, url, seedFile string
		token               string
		ok                  bool
	}{
		{"token", tokenBroker.ClientURL(), "", "s3cret", true},
		{"token in the URL", strings.Replace(tokenBroker.ClientURL(), "nats://", "nats://s3cret@", 1), "", "", true},
		{"wrong token", tokenBroker.ClientURL(), "", "guess", false},
		{"nkey", nkeyBroker.ClientURL(), seedFile, "", true},
		{"another nkey", nkeyBroker.ClientURL(), otherFile, "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			refused := make(chan string, 10)
			up := natstest.DialUpstream(t, tt.url, func(o *upstream.Options) {
				o.Credentials.Token = tt.token
				if tt.seedFile != "" {
					cred, err := upstream.NkeyFromSeedFile(tt.seedFile)
					if err != nil {
						t.Fatal(err)
					}
					o.Credentials = cred
				}
				o.Log = funcr.New(func(_, args string) {
					if strings.Contains(args, "refused the connection") {
						refused <- args
					}
				}, funcr.Options{})
			})
			if up.Connected() != tt.ok {
				t.Fatalf("connected %v, want %v", up.Connected(), tt.ok)
			}
			if !tt.ok {
				if line := <-refused; !strings.Contains(strings.ToLower(line), "authorization violation") {
					t.Fatalf("refusal logged as %q", line)
				}
			}
		})
	}
}
