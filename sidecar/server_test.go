package sidecar_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/sidecar"
	"github.com/weighstation/weighstation/sidecar/pending"
	"github.com/weighstation/weighstation/sidecar/upstream"
)

// rig is an embedded broker with a sidecar in front of it.
type rig struct {
	broker *server.Server
	side   *sidecar.Server
}

func newRig(t testing.TB, configure ...func(*sidecar.Options)) *rig {
	t.Helper()
	broker := natstest.StartBroker(t, nil)
	return startRig(t, broker, natstest.DialUpstream(t, broker.ClientURL()), configure...)
}

// startRig starts a sidecar over the upstream connection up to broker,
// configured (in audit mode) and listening on a free port.
func startRig(t testing.TB, broker *server.Server, up *upstream.Client, configure ...func(*sidecar.Options)) *rig {
	t.Helper()
	opts := sidecar.DefaultOptions
	opts.Listen = "127.0.0.1:0"
	for _, c := range configure {
		c(&opts)
	}
	side, err := sidecar.New(up, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := side.SetConfig(configWith()); err != nil {
		t.Fatal(err)
	}
	if err := side.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(side.Close)
	return &rig{broker: broker, side: side}
}

// app connects a stock nats.go client to the sidecar, as an application.
func (r *rig) app(t *testing.T, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return natstest.Connect(t, "nats://"+r.side.Addr().String(), append([]nats.Option{nats.NoReconnect()}, opts...)...)
}

// direct connects straight to the broker, as something outside the pod.
func (r *rig) direct(t *testing.T) *nats.Conn {
	t.Helper()
	return natstest.Connect(t, r.broker.ClientURL())
}

// collector counts messages per subscription.
type collector struct {
	mu   sync.Mutex
	msgs []*nats.Msg
}

func (c *collector) add(m *nats.Msg) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, m)
}

func (c *collector) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.msgs)
}

// count returns how many messages with data arrived.
func (c *collector) count(data string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range c.msgs {
		if string(m.Data) == data {
			n++
		}
	}
	return n
}

// sentinel is the data of a message sent after those a test counts: NATS
// keeps one publisher's messages in order to each subscription (and the
// sidecar keeps each local subscription's queue in order), so once it has
// arrived, whatever was sent before it has too, and nothing more can come.
const sentinel = "sentinel"

func flush(t *testing.T, conns ...*nats.Conn) {
	t.Helper()
	for _, nc := range conns {
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
}

// receive takes the next value from ch, failing the test if none comes
// within 10s.
func receive[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing within 10s", what)
		panic("unreachable")
	}
}

func TestPubSubWithWildcards(t *testing.T) {
	r := newRig(t)
	app, outside := r.app(t), r.direct(t)
	star, full, literal := &collector{}, &collector{}, &collector{}
	for subject, c := range map[string]*collector{"orders.*": star, "orders.>": full, "orders.eu": literal} {
		if _, err := app.Subscribe(subject, c.add); err != nil {
			t.Fatal(err)
		}
	}
	flush(t, app)
	for _, subject := range []string{"orders.eu", "orders.us", "orders.eu.1", "payments.eu"} {
		if err := outside.Publish(subject, []byte(subject)); err != nil {
			t.Fatal(err)
		}
	}
	// And the other way: the application publishes, the outside receives.
	got := &collector{}
	if _, err := outside.Subscribe("from.app", got.add); err != nil {
		t.Fatal(err)
	}
	flush(t, outside)
	if err := app.Publish("from.app", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	flush(t, app, outside)
	natstest.WaitFor(t, "deliveries", func() bool { return star.len() == 2 && full.len() == 3 && literal.len() == 1 && got.len() == 1 })
	// Nothing more arrives: a sentinel that every subscription matches,
	// and one from the application, each the last its client sends.
	if err := outside.Publish("orders.eu", []byte(sentinel)); err != nil {
		t.Fatal(err)
	}
	if err := app.Publish("from.app", []byte(sentinel)); err != nil {
		t.Fatal(err)
	}
	flush(t, outside, app)
	natstest.WaitFor(t, "the sentinels", func() bool {
		return star.count(sentinel) > 0 && full.count(sentinel) > 0 && literal.count(sentinel) > 0 && got.count(sentinel) > 0
	})
	if star.len() != 3 || full.len() != 4 || literal.len() != 2 || got.len() != 2 {
		t.Fatalf("with the sentinel, orders.* got %d (want 3), orders.> %d (want 4), orders.eu %d (want 2), the outside %d (want 2)", star.len(), full.len(), literal.len(), got.len())
	}
}

func TestUpstreamInterestIsDeduplicated(t *testing.T) {
	r := newRig(t)
	base := r.broker.NumSubscriptions()
	apps := []*nats.Conn{r.app(t), r.app(t)}
	var subs []*nats.Subscription
	for i := range 10 {
		s, err := apps[i%2].Subscribe("orders.*", func(*nats.Msg) {})
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	flush(t, apps...)
	natstest.WaitFor(t, "one upstream subscription", func() bool { return r.side.Interest().Subscriptions() == 1 })
	flush(t, apps...)
	if got := r.broker.NumSubscriptions() - base; got != 1 {
		t.Fatalf("ten local SUB orders.* made %d upstream subscriptions, want 1", got)
	}
	for _, s := range subs {
		if err := s.Unsubscribe(); err != nil {
			t.Fatal(err)
		}
	}
	flush(t, apps...)
	natstest.WaitFor(t, "upstream interest gone with the last local one", func() bool { return r.side.Interest().Subscriptions() == 0 })
}

func TestQueueGroupsShareTheLoad(t *testing.T) {
	r := newRig(t)
	local1, local2 := &collector{}, &collector{}
	a, b := r.app(t), r.app(t)
	if _, err := a.QueueSubscribe("work", "workers", local1.add); err != nil {
		t.Fatal(err)
	}
	if _, err := b.QueueSubscribe("work", "workers", local2.add); err != nil {
		t.Fatal(err)
	}
	outsideWorker := &collector{}
	outside := r.direct(t)
	if _, err := outside.QueueSubscribe("work", "workers", outsideWorker.add); err != nil {
		t.Fatal(err)
	}
	flush(t, a, b, outside)
	pub := r.direct(t)
	const n = 600
	for i := range n {
		if err := pub.Publish("work", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	flush(t, pub)
	natstest.WaitFor(t, "every message delivered once", func() bool { return local1.len()+local2.len()+outsideWorker.len() == n })
	// Nothing more arrives: sentinels, one at a time, each delivered once,
	// until every member got one. Each member then has everything it was
	// given before its sentinel.
	members := []*collector{local1, local2, outsideWorker}
	sent := 0
	for slices.ContainsFunc(members, func(c *collector) bool { return c.count(sentinel) == 0 }) {
		if sent == 200 {
			t.Fatalf("200 sentinels, and a member got none: %d, %d, outside %d", local1.count(sentinel), local2.count(sentinel), outsideWorker.count(sentinel))
		}
		if err := pub.Publish("work", []byte(sentinel)); err != nil {
			t.Fatal(err)
		}
		flush(t, pub)
		sent++
		natstest.WaitFor(t, "the sentinel is delivered", func() bool {
			return local1.count(sentinel)+local2.count(sentinel)+outsideWorker.count(sentinel) == sent
		})
	}
	if total := local1.len() + local2.len() + outsideWorker.len(); total != n+sent {
		t.Fatalf("%d deliveries for %d messages and %d sentinels", total, n, sent)
	}
	if local1.len() == 0 || local2.len() == 0 || outsideWorker.len() == 0 {
		t.Fatalf("a member got nothing: %d, %d, outside %d", local1.len(), local2.len(), outsideWorker.len())
	}
}

func TestRequestReplyAndHeaders(t *testing.T) {
	r := newRig(t)
	responder, requester := r.app(t), r.app(t)
	if _, err := responder.Subscribe("echo", func(m *nats.Msg) {
		reply := nats.NewMsg(m.Reply)
		reply.Header = m.Header
		reply.Header.Set("Answered-By", "responder")
		reply.Data = m.Data
		if err := m.RespondMsg(reply); err != nil {
			t.Error(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	flush(t, responder)
	req := nats.NewMsg("echo")
	req.Header.Set("Trace", "abc")
	req.Header.Add("Multi", "1")
	req.Header.Add("Multi", "2")
	req.Data = []byte("payload")
	want := nats.Header{"Trace": {"abc"}, "Multi": {"1", "2"}, "Answered-By": {"responder"}}
	resp, err := requester.RequestMsg(req, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Data) != "payload" || !headersEqual(resp.Header, want) {
		t.Fatalf("reply %q with headers %v, want payload and %v", resp.Data, resp.Header, want)
	}
	// A client straight on the broker (outside the mesh; in a deployment
	// the broker admits sidecars only) sees the publishing sidecar's stamp,
	// which no consuming sidecar removed.
	resp, err = r.direct(t).RequestMsg(req, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get(sidecar.StampHeader) == "" {
		t.Fatalf("the reply crossed the broker without the stamp: %v", resp.Header)
	}
	resp.Header.Del(sidecar.StampHeader)
	if !headersEqual(resp.Header, want) {
		t.Fatalf("reply headers %v, want %v and the stamp", resp.Header, want)
	}
	// Nobody listens: the broker's no-responders answer reaches the client.
	if _, err := requester.Request("nobody.home", nil, 5*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("request without responders: %v, want nats.ErrNoResponders", err)
	}
}

func headersEqual(a, b nats.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func TestPublishWithoutHeadersArrivesAsMSG(t *testing.T) {
	r := newRig(t)
	app := r.app(t)
	got := make(chan *nats.Msg, 1)
	if _, err := app.Subscribe("plain", func(m *nats.Msg) { got <- m }); err != nil {
		t.Fatal(err)
	}
	flush(t, app)
	if err := r.direct(t).Publish("plain", []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if len(m.Header) != 0 || string(m.Data) != "x" {
			t.Fatalf("got headers %v and %q", m.Header, m.Data)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing arrived")
	}
}

func TestUnsubscribeWithMax(t *testing.T) {
	r := newRig(t)
	app := r.app(t)
	var count atomic.Int32
	sub, err := app.Subscribe("limited", func(*nats.Msg) { count.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.AutoUnsubscribe(3); err != nil {
		t.Fatal(err)
	}
	flush(t, app)
	pub := r.direct(t)
	for range 10 {
		if err := pub.Publish("limited", nil); err != nil {
			t.Fatal(err)
		}
	}
	flush(t, pub)
	natstest.WaitFor(t, "three delivered and the interest gone", func() bool {
		return count.Load() == 3 && r.side.Interest().Subscriptions() == 0
	})
	// nats.go itself drops what comes past the maximum, so the sidecar's
	// own accounting is what shows it wrote no more. Once the subscription
	// is retired with nothing pending or in flight (and its upstream
	// interest gone, nothing more can arrive), every message it received
	// is settled: three written, the rest dropped.
	var totals pending.Counts
	natstest.WaitFor(t, "the subscription retired and settled", func() bool {
		totals = r.side.PolicyTotals()[""]
		return len(r.side.Stats()) == 0 && totals.Arrived >= 3 && totals.Pending == 0 && totals.InFlight == 0 && totals.Balanced()
	})
	if count.Load() != 3 || totals.Delivered != 3 {
		t.Fatalf("the application got %d, the sidecar wrote %d (totals %+v), want 3", count.Load(), totals.Delivered, totals)
	}
}

// TestRequestLatencyIsTimed: the application's requests are timed from
// their arrival in the sidecar to the write of the reply.
func TestRequestLatencyIsTimed(t *testing.T) {
	r := newRig(t)
	responder := r.direct(t)
	if _, err := responder.Subscribe("svc", func(m *nats.Msg) { _ = m.Respond([]byte("ok")) }); err != nil {
		t.Fatal(err)
	}
	flush(t, responder)
	app := r.app(t)
	const n = 20
	for range n {
		if _, err := app.Request("svc", nil, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// A publish with a reply subject nobody answers is not a timed request
	// that completes.
	if err := app.PublishRequest("nobody", "_INBOX.never.1", nil); err != nil {
		t.Fatal(err)
	}
	flush(t, app)
	natstest.WaitFor(t, "every request timed", func() bool { return r.side.RequestLatency().Histogram.TotalCount() == n })
	if h := r.side.RequestLatency().Histogram; h.Max() > int64(5*time.Second/time.Microsecond) || h.ValueAtQuantile(50) < 1 {
		t.Fatalf("request latency p50 %d µs, max %d µs", h.ValueAtQuantile(50), h.Max())
	}
}

// TestDepartedClientIsForgotten: a client that disconnects while idle has
// its subscriptions and upstream interest removed at once, not when a
// message for it next fails to write.
func TestDepartedClientIsForgotten(t *testing.T) {
	r := newRig(t)
	app := r.app(t)
	if _, err := app.Subscribe("idle.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	flush(t, app)
	if n := r.side.Interest().Subscriptions(); n != 1 {
		t.Fatalf("%d upstream subscriptions, want 1", n)
	}
	app.Close()
	natstest.WaitFor(t, "the departed client's interest is withdrawn", func() bool {
		return r.side.Interest().Subscriptions() == 0 && len(r.side.Stats()) == 0
	})
	if totals := r.side.PolicyTotals()[""]; totals.Arrived != 0 || !totals.Balanced() {
		t.Fatalf("totals %+v", totals)
	}
}

// TestNewNamesAnInvalidOption: New refuses a limit of nothing with an
// error that names the option (and its flag, where it has one), not a dump
// of all of them.
func TestNewNamesAnInvalidOption(t *testing.T) {
	broker := natstest.StartBroker(t, nil)
	up := natstest.DialUpstream(t, broker.ClientURL())
	for _, tc := range []struct {
		want  string
		spoil func(*sidecar.Options)
	}{
		{"MaxConnections (-max-connections) must be positive, got 0", func(o *sidecar.Options) { o.MaxConnections = 0 }},
		{"MaxControlBytes must be positive", func(o *sidecar.Options) { o.MaxControlBytes = 0 }},
		{"WriteBatchBytes must be positive", func(o *sidecar.Options) { o.WriteBatchBytes = -1 }},
		{"UpstreamFlushTimeout must be positive", func(o *sidecar.Options) { o.UpstreamFlushTimeout = 0 }},
		{"ConnectTimeout must be positive", func(o *sidecar.Options) { o.ConnectTimeout = 0 }},
		{"MaxIdle must be positive", func(o *sidecar.Options) { o.MaxIdle = 0 }},
		{"MemoryBudget (-memory-budget) must be positive, got 0", func(o *sidecar.Options) { o.MemoryBudget = 0 }},
		{"MaxSubscriptions must be positive", func(o *sidecar.Options) { o.MaxSubscriptions = 0 }},
		{"MaxPendingBytesPerConnection must be positive", func(o *sidecar.Options) { o.MaxPendingBytesPerConnection = 0 }},
		{"KillSwitchInterval must be positive", func(o *sidecar.Options) { o.KillSwitchInterval = 0 }},
		{"-app-send-buffer must be 0", func(o *sidecar.Options) { o.AppSendBuffer = -1 }},
	} {
		t.Run(tc.want, func(t *testing.T) {
			opts := sidecar.DefaultOptions
			tc.spoil(&opts)
			s, err := sidecar.New(up, opts)
			if err == nil {
				s.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
