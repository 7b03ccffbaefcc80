package sidecar_test

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar/upstream"
)

// resumeTarget is how soon after a restarted broker is ready traffic must
// flow again.
const resumeTarget = 250 * time.Millisecond

// TestReconnectResumesTrafficAfterBrokerRestart: a broker restarted under
// 1,000 messages/s costs a second of outage and then at most resumeTarget
// before a message published after its return is delivered; the sidecar
// resubscribes, stays ready throughout, and logs and counts the reconnect.
func TestReconnectResumesTrafficAfterBrokerRestart(t *testing.T) {
	port := natstest.FreePort(t)
	broker := natstest.StartBroker(t, &server.Options{Port: port})
	logs := &logLines{}
	up := natstest.DialUpstream(t, broker.ClientURL(), func(o *upstream.Options) { o.Log = logs.logger() })
	r := startRig(t, broker, up)
	// The outage's backlog (a second of messages) must fit the subscriber's
	// queue: this test is about resuming, not about overflow.
	cfg := configWith()
	cfg.Subscriptions = []meshconfig.SubscriptionPolicy{{Name: "ticks", Subject: "ticks", Essential: true,
		Limits: meshconfig.Limits{MaxPendingMessages: 10_000, MaxPendingBytes: 8 << 20, Overflow: "DropNewest"}}}
	if err := r.side.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	metrics := httptest.NewServer(r.side.Handler())
	defer metrics.Close()
	health := httptest.NewServer(r.side.HealthHandler())
	defer health.Close()

	// Times are offsets from epoch, on the monotonic clock; each message
	// carries the time it was published.
	epoch := time.Now()
	since := func() int64 { return int64(time.Since(epoch)) }
	var readyAt atomic.Int64 // when the new broker was ready
	readyAt.Store(math.MaxInt64)
	var received atomic.Int64
	resumed := make(chan time.Duration, 1) // the first message published after readyAt, from readyAt to its delivery
	sub := r.app(t)
	if _, err := sub.Subscribe("ticks", func(m *nats.Msg) {
		received.Add(1)
		if ready := readyAt.Load(); int64(binary.BigEndian.Uint64(m.Data)) >= ready {
			select {
			case resumed <- time.Duration(since() - ready):
			default:
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	flush(t, sub)

	// Open loop: the i-th message is due at i milliseconds, however long
	// the ones before took, and is sent at once when late.
	pub := r.app(t)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		data := make([]byte, 8)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Until(epoch.Add(time.Duration(i) * time.Millisecond))):
			}
			binary.BigEndian.PutUint64(data, uint64(since()))
			_ = pub.Publish("ticks", data) // during the outage too: the sidecar buffers
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-stopped
	})
	natstest.WaitFor(t, "traffic flows", func() bool { return received.Load() >= 100 })
	if n := r.side.BrokerReconnects(); n != 0 {
		t.Fatalf("%d reconnects before the broker restarted", n)
	}

	broker.Shutdown()
	natstest.WaitFor(t, "the sidecar sees the outage", func() bool { return !r.side.BrokerConnected() })
	if got := fetch(t, metrics.URL+"/metrics"); !strings.Contains(got, "weighstation_sidecar_broker_connected 0\n") {
		t.Errorf("/metrics during the outage lacks weighstation_sidecar_broker_connected 0")
	}
	if code, body := get(t, health.URL+"/readyz?verbose"); code != http.StatusOK || !strings.Contains(body, "[-]broker disconnected (not required)\n") {
		t.Errorf("/readyz?verbose during the outage: %d %q, want 200 and the broker reported", code, body)
	}
	time.Sleep(time.Second) // the outage

	_, ready := startBrokerOn(t, port)
	readyAt.Store(int64(ready.Sub(epoch)))
	select {
	case d := <-resumed:
		// When the sidecar's reconnect was logged tells the wait for the
		// broker apart from what followed.
		reconnected := "not logged yet"
		if at := logs.first("reconnected to the broker"); !at.IsZero() {
			reconnected = at.Sub(ready).String()
		}
		t.Logf("traffic resumed %v after the broker was ready (the sidecar reconnected at %s)", d, reconnected)
		if d > resumeTarget {
			t.Errorf("traffic resumed %v after the broker was ready (the sidecar reconnected at %s), want at most %v", d, reconnected, resumeTarget)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no message published after the broker's return was delivered within 10s")
	}

	if c := r.side.PolicyTotals()["ticks"]; c.Dropped != ([len(c.Dropped)]uint64{}) {
		t.Errorf("the subscriber's queue dropped messages %v: the measurement is of overflow, not of resuming", c.Dropped)
	}
	natstest.WaitFor(t, "the reconnect is counted", func() bool { return r.side.BrokerReconnects() > 0 })
	got := fetch(t, metrics.URL+"/metrics")
	for _, want := range []string{"weighstation_sidecar_broker_connected 1\n", "weighstation_sidecar_broker_reconnects_total 1\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("/metrics after the restart lacks %q", want)
		}
	}
	if n := r.side.BrokerReconnects(); n != 1 {
		t.Errorf("%d reconnects counted, want 1", n)
	}
	for _, want := range []string{`"msg"="disconnected from the broker; reconnecting`, `"msg"="reconnected to the broker; subscriptions renewed"`} {
		if n := logs.count(want); n != 1 {
			t.Errorf("the log has %d lines with %s, want 1:\n%s", n, want, logs)
		}
	}
}

// TestReconnectToABrokerThatStartsLater: with no broker yet, the sidecar
// serves its applications at once (INFO included) and holds their
// publishes, stamped ones too; when the broker arrives, they are delivered
// in order, the subscription made meanwhile is in place, and clients learn
// the broker's version. The first connection is logged, not counted as a
// reconnect.
func TestReconnectToABrokerThatStartsLater(t *testing.T) {
	port := natstest.FreePort(t)
	logs := &logLines{}
	up := natstest.DialUpstream(t, fmt.Sprintf("nats://127.0.0.1:%d", port), func(o *upstream.Options) { o.Log = logs.logger() })
	r := startRig(t, nil, up)
	if r.side.BrokerConnected() {
		t.Fatal("connected to a broker that does not exist")
	}

	app := r.app(t)
	if v, max := app.ConnectedServerVersion(), app.MaxPayload(); v == "" || max <= 0 {
		t.Fatalf("INFO before the broker: version %q, max_payload %d", v, max)
	}
	got := make(chan *nats.Msg, 10)
	if _, err := app.Subscribe("early", func(m *nats.Msg) { got <- m }); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*nats.Msg{
		{Subject: "early", Data: []byte("1")},
		{Subject: "early", Data: []byte("2"), Header: nats.Header{"App": []string{"kept"}}},
		{Subject: "early", Data: []byte("3")},
	} {
		if err := app.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	natstest.WaitFor(t, "the sidecar holds the publishes", func() bool {
		c := r.side.TopicCounters()[""]
		return c.Forwarded == 3 && c.FailedUpstream == 0
	})

	natstest.StartBroker(t, &server.Options{Port: port})
	for i, want := range []string{"1", "2", "3"} {
		select {
		case m := <-got:
			if string(m.Data) != want {
				t.Fatalf("message %d is %q, want %q (in order)", i, m.Data, want)
			}
			if i == 1 && (m.Header.Get("App") != "kept" || len(m.Header) != 1) {
				t.Fatalf("message 2's headers %v, want the application's alone (the stamp removed)", m.Header)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("message %d not delivered within 10s of the broker's start", i)
		}
	}
	natstest.WaitFor(t, "clients learn the broker's version", func() bool { return app.ConnectedServerVersion() == server.VERSION })
	if n := logs.count(`"msg"="connected to the broker"`); n != 1 {
		t.Errorf("the log has %d lines for the first connection, want 1:\n%s", n, logs)
	}
	if n := r.side.BrokerReconnects(); n != 0 {
		t.Errorf("the first connection counted as %d reconnects", n)
	}
}

// startBrokerOn starts a broker on port and returns it with the moment it
// was ready for connections: its listener exists (all ReadyForConnections
// waits for here), looked at every 100 µs, where ReadyForConnections looks
// every 25 ms.
func startBrokerOn(t *testing.T, port int) (*server.Server, time.Time) {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(s.Shutdown)
	// Not ReadyForConnections: it checks every 25 ms, and the time it
	// returns at is the start of the measured resume.
	deadline := time.Now().Add(10 * time.Second)
	for s.Addr() == nil {
		if time.Now().After(deadline) {
			t.Fatal("nats-server did not listen within 10s")
		}
		time.Sleep(100 * time.Microsecond)
	}
	return s, time.Now()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// logLines collects what a logr.Logger writes, and when.
type logLines struct {
	mu    sync.Mutex
	lines []string
	at    []time.Time
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
		l.at = append(l.at, time.Now())
	}, funcr.Options{})
}

func (l *logLines) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}

// first is when the first line with substr was written (zero: none was).
func (l *logLines) first(substr string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, line := range l.lines {
		if strings.Contains(line, substr) {
			return l.at[i]
		}
	}
	return time.Time{}
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
