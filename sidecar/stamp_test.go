package sidecar_test

import (
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
