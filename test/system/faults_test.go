package system_test

import (
	"errors"
	"flag"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/meshconfig"
)

// operatorOutage is how long TestOperatorOutageWhileTrafficFlows keeps the
// operator away. The fault test is 60 s; `make test` uses a short
// one, since nothing in the sidecar times out on the operator:
//
//	go test ./test/system/ -run OperatorOutage -operator-outage 60s
var operatorOutage = flag.Duration("operator-outage", 2*time.Second, "how long the operator is stopped while traffic flows")

func feedSubscription(ns, podName string) *v1alpha1.Subscription {
	return &v1alpha1.Subscription{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "feed"},
		Spec: v1alpha1.SubscriptionSpec{
			Subject:   "feed",
			Essential: ptr.To(false),
			Selector:  metav1.LabelSelector{MatchLabels: map[string]string{"pod": podName}},
		},
	}
}

// TestSidecarStartsBeforeBrokerAndOperator: a pod's sidecar comes up while
// neither its operator nor its broker exists; it becomes ready when the
// operator answers, and delivers what was published before the broker came.
func TestSidecarStartsBeforeBrokerAndOperator(t *testing.T) {
	ns := newNamespace(t)
	if err := k8sClient.Create(background(), feedSubscription(ns, "early-0")); err != nil {
		t.Fatal(err)
	}
	brokerPort := natstest.FreePort(t)
	xdsAddr := natstest.FreeAddr(t)
	p := startPod(t, ns, "early-0", map[string]string{"pod": "early-0"}, fmt.Sprintf("nats://127.0.0.1:%d", brokerPort), xdsAddr)
	if p.side.HasConfig() || p.side.BrokerConnected() {
		t.Fatalf("ready %v, broker connected %v, with neither operator nor broker", p.side.HasConfig(), p.side.BrokerConnected())
	}
	op := startOperator(t, xdsAddr)
	waitConfigured(t, op, ns, p, "configured once the operator answers", func(cfg meshconfig.PodConfig) error {
		if len(cfg.Subscriptions) != 1 {
			return fmt.Errorf("subscriptions %+v", cfg.Subscriptions)
		}
		return nil
	})
	if !p.side.HasConfig() {
		t.Fatal("configured but not ready")
	}
	// The application starts once the sidecar is ready (its startup
	// probe): before, the defaults allow no SUB the Subscription covers.
	app := p.app(t)
	got := make(chan *nats.Msg, 10)
	if _, err := app.Subscribe("feed", func(m *nats.Msg) { got <- m }); err != nil {
		t.Fatal(err)
	}
	if err := app.Publish("feed", []byte("before the broker")); err != nil {
		t.Fatal(err)
	}
	if err := app.Flush(); err != nil {
		t.Fatal(err)
	}
	natstest.StartBroker(t, &server.Options{Port: brokerPort})
	select {
	case m := <-got:
		if string(m.Data) != "before the broker" {
			t.Fatalf("got %q", m.Data)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("what was published before the broker started was not delivered within 10s of its start")
	}
}

// TestOperatorOutageWhileTrafficFlows: the operator stops while a publisher
// sends to a consumer through two sidecars. The sidecars keep serving with
// their configuration, every message arrives (or is counted as dropped),
// and when the operator returns they resync without applying anything,
// and a later change reaches them.
func TestOperatorOutageWhileTrafficFlows(t *testing.T) {
	ns := newNamespace(t)
	if err := k8sClient.Create(background(), feedSubscription(ns, "consumer-0")); err != nil {
		t.Fatal(err)
	}
	broker := natstest.StartBroker(t, nil)
	xdsAddr := natstest.FreeAddr(t)
	op := startOperator(t, xdsAddr)
	producer := startPod(t, ns, "producer-0", map[string]string{"pod": "producer-0"}, broker.ClientURL(), xdsAddr)
	consumer := startPod(t, ns, "consumer-0", map[string]string{"pod": "consumer-0"}, broker.ClientURL(), xdsAddr)
	pods := []*pod{producer, consumer}
	for _, p := range pods {
		waitConfigured(t, op, ns, p, "configured", func(meshconfig.PodConfig) error { return nil })
	}

	var received, probes atomic.Int64
	sentinel := make(chan struct{})
	sub := consumer.app(t)
	if _, err := sub.Subscribe("feed", func(m *nats.Msg) {
		switch string(m.Data) {
		case "sentinel":
			close(sentinel)
		case "probe":
			probes.Add(1)
		default:
			received.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	pub := producer.app(t)
	// The consumer's SUB reaches the broker through its sidecar: a first
	// message proves the path before counting starts.
	eventually(t, "the path is open", func() error {
		if err := pub.Publish("feed", []byte("probe")); err != nil {
			return err
		}
		if err := pub.Flush(); err != nil {
			return err
		}
		if probes.Load() == 0 {
			return errors.New("nothing received yet")
		}
		return nil
	})

	applied := map[string]uint64{}
	for _, p := range pods {
		applied[p.name] = p.client.Stats().Applied
	}
	// Open-loop traffic at 200 messages/s for the whole outage.
	stop := make(chan struct{})
	sentDone := make(chan int64)
	go func() {
		var sent int64
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				sentDone <- sent
				return
			case <-tick.C:
				if err := pub.Publish("feed", []byte("m")); err == nil {
					sent++
				}
			}
		}
	}()
	op.stop()
	time.Sleep(*operatorOutage) // the outage itself: traffic flows meanwhile
	op = startOperator(t, xdsAddr)
	for _, p := range pods {
		eventually(t, p.name+" reconnects", func() error {
			if !p.client.Stats().Connected {
				return errors.New("not connected")
			}
			return nil
		})
	}
	close(stop)
	sent := <-sentDone
	if err := pub.Publish("feed", []byte("sentinel")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sentinel:
	case <-time.After(10 * time.Second):
		t.Fatal("the sentinel did not arrive within 10s")
	}
	var dropped int64
	for _, c := range consumer.side.PolicyTotals() {
		for _, d := range c.Dropped {
			dropped += int64(d)
		}
	}
	if got := received.Load(); got+dropped != sent || sent < int64(operatorOutage.Seconds()*100) {
		t.Fatalf("sent %d, received %d, dropped (counted) %d: every message must arrive or be counted", sent, got, dropped)
	}
	t.Logf("operator away for %s: sent %d, received %d, dropped %d", *operatorOutage, sent, received.Load(), dropped)
	for _, p := range pods {
		if got := p.client.Stats().Applied; got != applied[p.name] {
			t.Errorf("%s applied %d configurations across the outage, want %d (none)", p.name, got, applied[p.name])
		}
	}
	// Resynced: a change made now reaches the consumer.
	kubectl(t, "-n", ns, "patch", "subscription", "feed", "--type=merge", "-p", `{"spec":{"killSwitch":{"engaged":true,"reason":"after the outage"}}}`)
	waitConfigured(t, op, ns, consumer, "the change after the outage", killSwitch("feed", true))
}
