package sidecar_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar"
)

// TestStampingAndStripping: the publishing sidecar stamps (where the Topic
// allows, never on '$' subjects), the consuming sidecar strips the stamp
// and measures, and the application gets exactly what was published.
func TestStampingAndStripping(t *testing.T) {
	r := newRig(t)
	cfg := configWith(meshconfig.TopicPolicy{Name: "quiet", Subject: "quiet.>", MaxMessageBytes: 1 << 20, MayPublish: true, StampHeader: false})
	cfg.Subscriptions = []meshconfig.SubscriptionPolicy{{Name: "everything", Subject: ">", Essential: true,
		Limits: meshconfig.Limits{MaxPendingMessages: 1000, MaxPendingBytes: 1 << 20, Overflow: "DropNewest"}}}
	if err := r.side.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	publisher, consumer, outside := r.app(t), r.app(t), r.direct(t)
	received := make(chan *nats.Msg, 10)
	if _, err := consumer.Subscribe(">", func(m *nats.Msg) { received <- m }); err != nil {
		t.Fatal(err)
	}
	raw := make(chan *nats.Msg, 10)
	if _, err := outside.Subscribe(">", func(m *nats.Msg) { raw <- m }); err != nil {
		t.Fatal(err)
	}
	flush(t, consumer, outside)

	tests := []struct {
		name       string
		msg        *nats.Msg
		wantHeader nats.Header // what the consuming application gets
		wantStamp  bool        // whether the message crossed the broker stamped
	}{
		{"no headers: stamped, delivered as MSG", &nats.Msg{Subject: "orders.eu", Data: []byte("a")}, nil, true},
		{"headers kept exactly", &nats.Msg{Subject: "orders.eu", Data: []byte("b"), Header: nats.Header{"Trace": {"1"}, "Multi": {"x", "y"}}},
			nats.Header{"Trace": {"1"}, "Multi": {"x", "y"}}, true},
		{"an application's own stamp is removed", &nats.Msg{Subject: "orders.eu", Data: []byte("c"), Header: nats.Header{"weighstation-sent": {"1"}, "Keep": {"me"}}},
			nats.Header{"Keep": {"me"}}, true},
		{"the Topic does not allow stamping", &nats.Msg{Subject: "quiet.x", Data: []byte("d")}, nil, false},
		{"never on $ subjects", &nats.Msg{Subject: "$JS.API.INFO", Data: []byte("e")}, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := publisher.PublishMsg(tc.msg); err != nil {
				t.Fatal(err)
			}
			flush(t, publisher)
			got, crossed := receive(t, "the delivery to the application", received), receive(t, "the message on the broker", raw)
			if string(got.Data) != string(tc.msg.Data) || !headersEqual(got.Header, tc.wantHeader) {
				t.Fatalf("application got %q with headers %v, want %q with %v", got.Data, got.Header, tc.msg.Data, tc.wantHeader)
			}
			if stamped := crossed.Header.Get(sidecar.StampHeader) != ""; stamped != tc.wantStamp {
				t.Fatalf("crossed the broker with headers %v: stamped %v, want %v", crossed.Header, stamped, tc.wantStamp)
			}
		})
	}
	if r.side.StrippedStamps() != 1 {
		t.Fatalf("stripped %d application stamps, want 1", r.side.StrippedStamps())
	}
	// Every delivery was measured from arrival; the stamped ones end to end.
	natstest.WaitFor(t, "latencies recorded", func() bool {
		l := r.side.Latency()["everything"]
		return l[0].Histogram != nil && l[0].Histogram.TotalCount() == 5 && l[1].Histogram.TotalCount() == 3
	})
	l := r.side.Latency()["everything"]
	if l[1].Negative != 0 || l[1].Histogram.Max() > int64(10*time.Second/time.Microsecond) {
		t.Fatalf("end-to-end latency on one clock out of range: max %d µs, negative %d", l[1].Histogram.Max(), l[1].Negative)
	}
}

// TestPublishesOfOneReadShareOneStamp: the stamp is the time the read that
// completed a publish returned, so publishes that arrived together carry
// one time, within the time they were sent and received, and a later read
// a later one.
func TestPublishesOfOneReadShareOneStamp(t *testing.T) {
	r := newRig(t)
	outside := r.direct(t)
	crossed := make(chan *nats.Msg, 10)
	if _, err := outside.Subscribe("read.>", func(m *nats.Msg) { crossed <- m }); err != nil {
		t.Fatal(err)
	}
	flush(t, outside)
	app := r.raw(t)
	app.send("CONNECT {\"verbose\":false,\"headers\":true}\r\nPING\r\n")
	if got := app.line(); got != "PONG" {
		t.Fatalf("got %q, want PONG", got)
	}
	stampOf := func(m *nats.Msg) int64 {
		t.Helper()
		v, err := strconv.ParseInt(m.Header.Get(sidecar.StampHeader), 10, 64)
		if err != nil {
			t.Fatalf("%s crossed the broker with headers %v: %v", m.Subject, m.Header, err)
		}
		return v
	}

	before := time.Now().UnixNano()
	app.send("PUB read.a 1\r\na\r\nPUB read.b 1\r\nb\r\n") // one write, one read
	first, second := receive(t, "the first publish", crossed), receive(t, "the second publish", crossed)
	after := time.Now().UnixNano()
	if first.Subject != "read.a" || second.Subject != "read.b" {
		t.Fatalf("got %s then %s, want read.a then read.b", first.Subject, second.Subject)
	}
	stamp := stampOf(first)
	if stampOf(second) != stamp {
		t.Fatalf("publishes of one read stamped %d and %d, want one time", stamp, stampOf(second))
	}
	if stamp < before || stamp > after {
		t.Fatalf("stamp %d outside [%d, %d], the send and the receipt", stamp, before, after)
	}

	app.send("PUB read.c 1\r\nc\r\n")
	if later := stampOf(receive(t, "the later publish", crossed)); later <= stamp {
		t.Fatalf("a later read stamped %d, not after %d", later, stamp)
	}
}
