package upstream_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/sidecar/upstream"
)

// logLines records a client's log.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(_, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, args)
}

func (l *logLines) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range l.lines {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}

// TestAWriterStalledByTheBrokerGivesUp: a broker that reads nothing while
// its TCP stays up stalls the writer goroutine in a write, where it counts
// no PINGs; the write gives up after PingInterval × MaxPingsOut and the
// connection is taken for lost, as it is when a publisher is the one held.
// (Before, nothing ever declared it lost, and every publisher waited.)
func TestAWriterStalledByTheBrokerGivesUp(t *testing.T) {
	broker := natstest.StartBroker(t, nil)
	rl := startRelay(t, broker.Addr().String(), false)
	logs := &logLines{}
	up := natstest.DialUpstream(t, rl.url(), func(o *upstream.Options) {
		o.MaxPendingBytes, o.HandoffBacklogBytes = 64<<20, 64<<10
		o.PingInterval, o.MaxPingsOut = 100*time.Millisecond, 2
		o.ConfirmInterval = time.Hour
		o.ReconnectWait = time.Hour
		o.Log = funcr.New(logs.add, funcr.Options{})
	})
	if err := up.Flush(5 * time.Second); err != nil { // the connection's first wake-up spent
		t.Fatal(err)
	}
	rl.pause()
	defer rl.resume()
	for i := range int64(8 << 10) { // 32 MiB: more than the kernel holds for a stalled link
		if err := up.Publish([]byte("stall"), nil, nil, nil, message(i, 4<<10)); err != nil {
			if errors.Is(err, upstream.ErrOutageBufferFull) {
				break // a slow machine: the writer took some, stalled and gave up already
			}
			t.Fatal(err)
		}
	}
	flushed := make(chan error, 1)
	up.FlushAsync(func(err error) { flushed <- err }) // the writer goroutine takes the 32 MiB
	select {
	case err := <-flushed:
		if err == nil {
			t.Fatal("the flush through a stalled link succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("10 s (100 PingIntervals) after the link stalled under the writer goroutine, the connection is still taken for alive")
	}
	natstest.WaitFor(t, "the reason in the log", func() bool { return logs.has("PingInterval × MaxPingsOut") })
	if _, byWriter := up.Writes(); byWriter == 0 {
		t.Fatal("the writer goroutine never wrote: the test stalled a publisher instead")
	}
}

// TestCloseCountsWhatItCannotVouchFor: a client closed with publishes
// written to a stalled link (some perhaps in the kernel, some in a write
// under way) counts every accepted publish that never arrives, as unsent
// or in doubt. (Close counted only what it still held.)
func TestCloseCountsWhatItCannotVouchFor(t *testing.T) {
	broker := natstest.StartBroker(t, nil)
	var received atomic.Int64
	sentinel := make(chan struct{}, 1)
	subscribeUnbounded(t, broker, "close", func(m *nats.Msg) {
		if string(m.Data) == "sentinel" {
			sentinel <- struct{}{}
			return
		}
		received.Add(1)
	})
	rl := startRelay(t, broker.Addr().String(), false)
	up := natstest.DialUpstream(t, rl.url(), func(o *upstream.Options) {
		o.MaxPendingBytes, o.HandoffBacklogBytes = 1<<20, 64<<10
		o.ConfirmInterval = time.Hour // nothing confirmed: all written is in doubt at the close
	})
	rl.pause()
	var accepted atomic.Int64
	held := make(chan struct{})
	go func() {
		defer close(held)
		for i := range int64(4 << 10) { // 16 MiB: the publisher ends up held in a write
			if err := up.Publish([]byte("close"), nil, nil, nil, message(i, 4<<10)); err != nil {
				return
			}
			accepted.Add(1)
			up.WriteQueued()
		}
	}()
	// Held in a write once the kernel's buffers are full: no publish is
	// accepted for a while. (Were it closed sooner, less would be at stake,
	// and the counts would still have to hold.)
	last, still := int64(-1), 0
	natstest.WaitFor(t, "the publisher to be held", func() bool {
		n := accepted.Load()
		if n == last {
			still++
		} else {
			last, still = n, 0
		}
		return still >= 3
	})
	up.Close()
	<-held
	rl.resume()
	// Everything the relay had goes to the broker, and the broker closes
	// the relay's connection; what it routed before reached the subscriber
	// before a sentinel published after that.
	natstest.WaitFor(t, "the relay's connection to end", func() bool { return broker.NumClients() == 1 })
	if err := natstest.Connect(t, broker.ClientURL()).Publish("close", []byte("sentinel")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sentinel:
	case <-time.After(10 * time.Second):
		t.Fatal("the sentinel did not arrive")
	}
	lost := accepted.Load() - received.Load()
	if counted := int64(up.Unsent() + up.InDoubt()); lost > counted || lost < int64(up.Unsent()) {
		t.Fatalf("accepted %d, received %d: %d never arrived, but Close counted %d unsent and %d in doubt", accepted.Load(), received.Load(), lost, up.Unsent(), up.InDoubt())
	}
	if up.InDoubt() == 0 {
		t.Fatal("nothing counted in doubt: the test closed with nothing written")
	}
}

// TestWhatWaitedIsHeldWithinTheOutageBuffer: publishes that waited for the
// socket when the broker was lost are held within OutageBufferBytes like
// those made while it is away; the newest beyond it are dropped and counted
// as unsent. (All of MaxPendingBytes was kept.)
func TestWhatWaitedIsHeldWithinTheOutageBuffer(t *testing.T) {
	broker := natstest.StartBroker(t, nil)
	const outage = 128 << 10
	up := natstest.DialUpstream(t, broker.ClientURL(), func(o *upstream.Options) {
		o.OutageBufferBytes, o.MaxPendingBytes, o.HandoffBacklogBytes = outage, 1<<20, 64<<10
		o.ConfirmInterval = time.Hour
		o.ReconnectWait = time.Hour // stay away
	})
	// A round trip first: the connection's own first wake-up is spent, and
	// nothing written below is confirmed.
	if err := up.Flush(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	for i := range int64(10) { // 500 KiB, queued: nobody asked for a write
		if err := up.Publish([]byte("held"), nil, nil, nil, message(i, 50<<10)); err != nil {
			t.Fatal(err)
		}
	}
	broker.Shutdown()
	natstest.WaitFor(t, "the loss", func() bool { return !up.Connected() })
	if held := up.Buffered(); held > outage || held < 2*(50<<10) {
		t.Fatalf("while the broker is away %d bytes are held, want the oldest two messages' within OutageBufferBytes (%d)", held, outage)
	}
	if n := up.Unsent(); n != 8 {
		r, w := up.Writes()
		t.Fatalf("%d publishes counted unsent, want the 8 newest (writes %d %d, in doubt %d)", n, r, w, up.InDoubt())
	}
}

// TestRefusalsNameTheirLimit: a publish refused for a full outage buffer,
// or a backed-up connection, says which bound and its value.
func TestRefusalsNameTheirLimit(t *testing.T) {
	t.Run("OutageBufferBytes", func(t *testing.T) {
		up := natstest.DialUpstream(t, fmt.Sprintf("nats://127.0.0.1:%d", natstest.FreePort(t)), func(o *upstream.Options) {
			o.OutageBufferBytes = 4321
		})
		var err error
		for i := 0; i < 100 && err == nil; i++ {
			err = up.Publish([]byte("x"), nil, nil, nil, make([]byte, 1000))
		}
		if !errors.Is(err, upstream.ErrOutageBufferFull) || !strings.Contains(err.Error(), "4321 bytes held: the sidecar's OutageBufferBytes") {
			t.Fatalf("got %v, want ErrOutageBufferFull naming OutageBufferBytes and 4321", err)
		}
	})
	t.Run("MaxPendingBytes", func(t *testing.T) {
		broker := natstest.StartBroker(t, nil)
		rl := startRelay(t, broker.Addr().String(), false)
		up := natstest.DialUpstream(t, rl.url(), func(o *upstream.Options) {
			o.MaxPendingBytes, o.HandoffBacklogBytes = 4321, 4321
			o.ConfirmInterval = time.Hour
		})
		rl.pause()
		defer rl.resume()
		// Queued with no write asked for: the next that must not wait finds
		// the bound reached.
		if err := up.Publish([]byte("x"), nil, nil, nil, make([]byte, 5000)); err != nil {
			t.Fatal(err)
		}
		err := up.PublishNoWait([]byte("x"), nil, nil, nil, nil)
		if !errors.Is(err, upstream.ErrPendingFull) || !strings.Contains(err.Error(), "4321 bytes wait for the socket: MaxPendingBytes") {
			t.Fatalf("got %v, want ErrPendingFull naming MaxPendingBytes and 4321", err)
		}
	})
}

// TestAMessageOverTheReadersBoundIsNamed: a broker's MSG larger than the
// reader takes (nats-server's largest max_payload) ends the connection
// with a reason that says so, not "malformed".
func TestAMessageOverTheReadersBoundIsNamed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() { // a broker that sends one oversize MSG after the handshake
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write([]byte(`INFO {"server_id":"fake","version":"2.10.0","headers":true,"max_payload":1048576}` + "\r\n"))
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if line == "PING\r\n" {
				break
			}
		}
		_, _ = c.Write([]byte("PONG\r\nMSG a 1 70000000\r\n"))
		_, _ = br.ReadString(0) // until the client closes
	}()
	logs := &logLines{}
	natstest.DialUpstream(t, "nats://"+ln.Addr().String(), func(o *upstream.Options) {
		o.Log = funcr.New(logs.add, funcr.Options{})
		o.ReconnectWait = time.Hour
	})
	natstest.WaitFor(t, "the loss, with its reason", func() bool {
		return logs.has("the broker sent a 70000000-byte message, over the 67108864 bytes the sidecar reads in one")
	})
}

// TestABrokerURLsPasswordStaysOutOfErrors: Dial's refusal of a -broker URL
// quotes it without its user and password.
func TestABrokerURLsPasswordStaysOutOfErrors(t *testing.T) {
	for _, raw := range []string{"http://user:s3cret@host:4222", "nats://user:s3cret@:4222", "nats://user:s3cret@host:port%zz"} {
		opts := upstream.DefaultOptions
		opts.URL = raw
		up, err := upstream.Dial(opts)
		if err == nil {
			up.Close()
			t.Fatalf("Dial(%q) took it", raw)
		}
		if strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "-broker") {
			t.Fatalf("Dial(%q): %v, want an error about -broker without the password", raw, err)
		}
	}
}
