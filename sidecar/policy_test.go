package sidecar_test

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar"
)

// asyncErrors records what a stock client's async error handler sees.
type asyncErrors struct {
	mu   sync.Mutex
	errs []string
}

func (a *asyncErrors) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.errs = append(a.errs, err.Error())
}

func (a *asyncErrors) all() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.errs...)
}

// appWithErrors connects an application whose async errors are recorded.
func (r *rig) appWithErrors(t *testing.T) (*nats.Conn, *asyncErrors) {
	errs := &asyncErrors{}
	return natstest.Connect(t, "nats://"+r.side.Addr().String(), nats.NoReconnect(), nats.ErrorHandler(errs.handler)), errs
}

// countOutside counts what a client outside the pod receives on subject.
func (r *rig) countOutside(t *testing.T, subject string) *atomic.Int32 {
	t.Helper()
	outside := r.direct(t)
	var got atomic.Int32
	if _, err := outside.Subscribe(subject, func(*nats.Msg) { got.Add(1) }); err != nil {
		t.Fatal(err)
	}
	flush(t, outside)
	return &got
}

// configWith is the default configuration with topics, in audit mode: the
// tests of other features subscribe where they like; the ACL tests enforce.
func configWith(topics ...meshconfig.TopicPolicy) meshconfig.PodConfig {
	cfg := meshconfig.DefaultConfig(meshconfig.DefaultPolicy)
	cfg.Topics = topics
	cfg.Access.Mode = meshconfig.AccessAudit
	return cfg
}

func TestOversizePublishIsRefusedAndTheConnectionKept(t *testing.T) {
	r := newRig(t)
	if err := r.side.SetConfig(configWith(meshconfig.TopicPolicy{Name: "small", Subject: "small.>", MaxMessageBytes: 100, MayPublish: true})); err != nil {
		t.Fatal(err)
	}
	app, errs := r.appWithErrors(t)
	got := r.countOutside(t, "small.x")

	if err := app.Publish("small.x", make([]byte, 101)); err != nil { // one byte over
		t.Fatal(err)
	}
	if err := app.Publish("small.x", make([]byte, 100)); err != nil { // at the limit
		t.Fatal(err)
	}
	flush(t, app)
	natstest.WaitFor(t, "the refusal reaches the client", func() bool { return len(errs.all()) == 1 })
	if e := errs.all()[0]; !strings.Contains(e, `Permissions Violation for Publish to "small.x"`) || !strings.Contains(e, "exceeds maxMessageBytes 100 of Topic small") {
		t.Fatalf("client saw %q", e)
	}
	natstest.WaitFor(t, "the message at the limit arrives", func() bool { return got.Load() == 1 })
	if !app.IsConnected() {
		t.Fatal("the refusal closed the connection")
	}
	c := r.side.TopicCounters()["small"]
	if c.Attempts != 2 || c.Forwarded != 1 || c.RefusedSize != 1 || !c.Balanced() {
		t.Fatalf("counters %+v", c)
	}
}

func TestQuotaRefusalsAreCoalescedAndCounted(t *testing.T) {
	r := newRig(t)
	if err := r.side.SetConfig(configWith(meshconfig.TopicPolicy{
		Name: "rated", Subject: "rated.>", MaxMessageBytes: 1024, MayPublish: true,
		PublishRate: &meshconfig.Rate{MessagesPerSecond: 1, MessagesBurst: 5},
	}, meshconfig.TopicPolicy{Name: "small", Subject: "small.>", MaxMessageBytes: 1, MayPublish: true})); err != nil {
		t.Fatal(err)
	}
	app, errs := r.appWithErrors(t)
	got := r.countOutside(t, "rated.x")
	const n = 50
	for range n {
		if err := app.Publish("rated.x", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	flush(t, app)
	c := r.side.TopicCounters()["rated"]
	if c.Attempts != n || !c.Balanced() || c.RefusedRate == 0 || c.Forwarded < 5 {
		t.Fatalf("counters %+v: want %d attempts, the burst of 5 (or a refill) forwarded, the rest refused", c, n)
	}
	natstest.WaitFor(t, "the outside receives exactly what was forwarded", func() bool { return uint64(got.Load()) == c.Forwarded })
	// Many refusals within a second: the client hears of it once. The
	// sentinel is a refusal on another subject, sent after them: errors
	// reach the client's handler in order, so once it has arrived, every
	// error the quota refusals caused has too.
	if err := app.Publish("small.x", []byte("too big")); err != nil {
		t.Fatal(err)
	}
	flush(t, app)
	natstest.WaitFor(t, "the sentinel refusal reaches the client", func() bool {
		e := errs.all()
		return len(e) > 0 && strings.Contains(e[len(e)-1], "Topic small")
	})
	if e := errs.all(); len(e) != 2 || !strings.Contains(e[0], "publish quota of Topic rated exceeded") {
		t.Fatalf("client saw %d errors, want the quota's once and the sentinel: %q", len(e), e)
	}
	if !app.IsConnected() {
		t.Fatal("the refusals closed the connection")
	}
}

func TestMaxPayloadFollowsTheConfiguration(t *testing.T) {
	r := newRig(t)
	small := configWith(meshconfig.TopicPolicy{Name: "t", Subject: "t.>", MaxMessageBytes: 4096, MayPublish: true})
	small.Default.MaxMessageBytes = 65536
	small.Default.PublishRate = nil
	if err := r.side.SetConfig(small); err != nil {
		t.Fatal(err)
	}
	app := r.app(t)
	if got := app.MaxPayload(); got != 65536 {
		t.Fatalf("max_payload %d, want 65536 (the largest policy)", got)
	}
	bigger := small
	bigger.Topics = []meshconfig.TopicPolicy{{Name: "t", Subject: "t.>", MaxMessageBytes: 262144, MayPublish: true}}
	if err := r.side.SetConfig(bigger); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, "the client gets the new INFO", func() bool { return app.MaxPayload() == 262144 })

	// An invalid configuration is refused with its reason; the last good
	// one stays in force.
	invalid := bigger
	invalid.Topics = []meshconfig.TopicPolicy{{Name: "bad", Subject: "bad..subject", MaxMessageBytes: 10}}
	err := r.side.SetConfig(invalid)
	if err == nil || !strings.Contains(err.Error(), `topic "bad"`) || !strings.Contains(err.Error(), "tokens must not be empty") {
		t.Fatalf("SetConfig(invalid) = %v", err)
	}
	// The sentinel: a refused configuration sends nothing, and whatever
	// SetConfig sends a client is queued before it returns, ahead of the
	// answer to the client's next PING.
	flush(t, app)
	if got := app.MaxPayload(); got != 262144 {
		t.Fatalf("max_payload %d after a refused configuration, want 262144", got)
	}
}

// TestAClientClosedByANewINFODoesNotStallTheSidecar: a configuration
// change sends every client a new INFO; one whose control replies cannot
// take it is closed, and the change, the other clients and the next
// changes go on (closing it took the connection table's lock that the INFO
// loop held: SetConfig never returned, nor did anything after it).
func TestAClientClosedByANewINFODoesNotStallTheSidecar(t *testing.T) {
	small := configWith(meshconfig.TopicPolicy{Name: "t", Subject: "t.>", MaxMessageBytes: 4096, MayPublish: true})
	small.Default.MaxMessageBytes = 4096
	small.Default.PublishRate = nil
	bigger := small
	bigger.Topics = []meshconfig.TopicPolicy{{Name: "t", Subject: "t.>", MaxMessageBytes: 65536, MayPublish: true}}

	// The length of the INFO a client gets under small, from a first rig.
	measure := newRig(t)
	if err := measure.side.SetConfig(small); err != nil {
		t.Fatal(err)
	}
	infoLen := len(measure.raw(t).info) + len("\r\n")

	// A sidecar whose clients' control replies hold exactly that INFO.
	r := newRig(t, func(o *sidecar.Options) { o.MaxControlBytes = infoLen })
	if err := r.side.SetConfig(small); err != nil {
		t.Fatal(err)
	}
	stuck := r.raw(t) // its INFO written and read: nothing queued
	done := make(chan error, 1)
	go func() { done <- r.side.SetConfig(bigger) }() // a longer INFO: over MaxControlBytes
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SetConfig did not return")
	}
	stuck.closedAfter("") // closed without a word: it could not take one
	if err := r.side.SetConfig(small); err != nil {
		t.Fatal(err)
	}
	r.stillWorks(t, r.app(t))
}

// TestQuotaHoldsAcrossConnections: connections that publish to one Topic
// at once share its quota. Each charges it with the time its read
// returned, so the charges arrive out of order; the Topic must not credit
// the same interval twice. Four raw clients write chunks of PUBs for
// 400 ms: what is forwarded is at most the burst and the refill over the
// time they took.
func TestQuotaHoldsAcrossConnections(t *testing.T) {
	const (
		perSecond = 100
		burst     = 10
		clients   = 4
		chunk     = 500
	)
	r := newRig(t)
	if err := r.side.SetConfig(configWith(meshconfig.TopicPolicy{
		Name: "rated", Subject: "rated.>", MaxMessageBytes: 1024, MayPublish: true,
		PublishRate: &meshconfig.Rate{MessagesPerSecond: perSecond, MessagesBurst: burst},
	})); err != nil {
		t.Fatal(err)
	}
	apps := make([]*rawClient, clients)
	for i := range apps {
		apps[i] = r.raw(t)
		apps[i].send("CONNECT {\"verbose\":false}\r\n")
	}
	pubs := []byte(strings.Repeat("PUB rated.x 1\r\nx\r\n", chunk))
	start := time.Now()
	sent := make([]int, clients)
	errs := make(chan error, clients)
	for i, app := range apps {
		go func() {
			for time.Since(start) < 400*time.Millisecond && sent[i] < 40*chunk {
				if _, err := app.conn.Write(pubs); err != nil {
					errs <- err
					return
				}
				sent[i] += chunk
			}
			errs <- nil
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// Each client's PONG comes after the sidecar handled its PUBs.
	for _, app := range apps {
		app.send("PING\r\n")
		for line := app.line(); line != "PONG"; line = app.line() {
			if !strings.HasPrefix(line, "-ERR 'Permissions Violation for Publish to \"rated.x\"") {
				t.Fatalf("got %q, want the quota's refusal or PONG", line)
			}
		}
	}
	elapsed := time.Since(start)
	total := 0
	for _, n := range sent {
		total += n
	}
	c := r.side.TopicCounters()["rated"]
	allowed := uint64(burst + perSecond*elapsed.Seconds())
	if c.Attempts != uint64(total) || !c.Balanced() || c.Forwarded > allowed || c.Forwarded < burst {
		t.Fatalf("counters %+v after %d publishes from %d connections in %s: want at most %d forwarded (burst %d + %d/s), at least the burst",
			c, total, clients, elapsed.Round(time.Millisecond), allowed, burst, perSecond)
	}
}
