package report_test

import (
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/cmd/weighstation-sidecar/sidecarapp"
	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar/upstream"
)

// A real sidecar's measurements, reported: what its application received
// under its configuration's Subscription and published under its Topic.
func TestReportsOfARealSidecar(t *testing.T) {
	broker := natstest.StartBroker(t, nil)
	opts := sidecarapp.NewOptions()
	opts.Sidecar.Listen, opts.BrokerURL, opts.BrokerCredentials = "127.0.0.1:0", broker.ClientURL(), &upstream.Credentials{}
	opts.MetricsListen, opts.HealthListen = "", ""
	discard := logr.Discard()
	opts.Logger = &discard
	assembled, err := sidecarapp.New(t.Context(), *opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(assembled.Close)
	side := assembled.Server
	cfg := meshconfig.DefaultConfig(meshconfig.DefaultPolicy)
	cfg.Access.Mode = meshconfig.AccessAudit
	cfg.Topics = []meshconfig.TopicPolicy{
		{Name: "greetings", Subject: "greetings.>", MaxMessageBytes: 10, MayPublish: true, StampHeader: true},
		{Name: "unused", Subject: "unused", MaxMessageBytes: 10, MayPublish: true},
	}
	limits := meshconfig.Limits{MaxPendingMessages: 100, MaxPendingBytes: 1 << 20, Overflow: "DropNewest"}
	cfg.Subscriptions = []meshconfig.SubscriptionPolicy{
		{Name: "greeters", Subject: "greetings.>", Essential: true, Limits: limits},
		{Name: "idle", Subject: "idle", Limits: limits},
	}
	if err := side.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}

	app := natstest.Connect(t, "nats://"+side.Addr().String(), nats.NoReconnect(),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})) // the refusal below is expected
	got := make(chan struct{}, 10)
	if _, err := app.Subscribe("greetings.world", func(*nats.Msg) { got <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Subscribe("_INBOX.replies", func(*nats.Msg) {}); err != nil { // no Subscription covers it
		t.Fatal(err)
	}
	if err := app.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, data := range []string{"hello", "hi", "far too long"} {
		if err := app.Publish("greetings.world", []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.Flush(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("the application did not receive its messages within 10s")
		}
	}
	// A delivery is counted once written; the metrics count the same.
	natstest.WaitFor(t, "the sidecar counts both deliveries", func() bool { return side.PolicyTotals()["greeters"].Delivered == 2 })

	op, conn := startOperator(t)
	r := newReporter(t, side, tokenFile(t, "token"))
	run(t, r, conn)
	r.CollectNow(time.Now())
	rep := op.next(t).report

	if len(rep.GetSubscriptions()) != 1 || len(rep.GetTopics()) != 1 {
		t.Fatalf("reported Subscriptions %v and Topics %v, want greeters and greetings alone", rep.GetSubscriptions(), rep.GetTopics())
	}
	sub := rep.GetSubscriptions()[0]
	if sub.GetName() != "greeters" || sub.GetDelivered() != 2 || len(sub.GetDropped()) != 0 || sub.GetKill().GetKilled() {
		t.Errorf("Subscription %v, want greeters: 2 delivered, none dropped, not killed", sub)
	}
	for kind, got := range map[string]*xdsv1.Histogram{"dwell": sub.GetDwellBuckets(), "end to end": sub.GetEndToEndBuckets()} {
		if h := histogramFrom(t, got); h == nil || h.TotalCount() != 2 {
			t.Errorf("%s: %v, want the 2 deliveries' values", kind, got)
		}
	}
	topic := rep.GetTopics()[0]
	if topic.GetName() != "greetings" || topic.GetAttempts() != 3 || topic.GetForwarded() != 2 ||
		len(topic.GetRefused()) != 1 || topic.GetRefused()[0].GetReason() != "size" || topic.GetRefused()[0].GetCount() != 1 {
		t.Errorf("Topic %v, want greetings: 3 attempts, 2 forwarded, 1 refused for size", topic)
	}
}
