package sidecar_test

import (
	"bytes"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/sidecar/upstream"
)

// TestBrokerOutage: while the broker is down, publishes fill a bounded
// buffer and are then refused with a clear error and counted; when it is
// back, the sidecar resubscribes and delivery resumes.
func TestBrokerOutage(t *testing.T) {
	port := natstest.FreePort(t)
	opts := &server.Options{Port: port}
	broker := natstest.StartBroker(t, opts)
	up := natstest.DialUpstream(t, broker.ClientURL(), func(o *upstream.Options) {
		o.ReconnectWait, o.OutageBufferBytes = 20*time.Millisecond, 64<<10
	})
	r := startRig(t, broker, up)
	side := r.side
	errs := &asyncErrors{}
	app := natstest.Connect(t, "nats://"+side.Addr().String(), nats.NoReconnect(), nats.ErrorHandler(errs.handler))
	var got atomic.Int32
	if _, err := app.Subscribe("after.outage", func(*nats.Msg) { got.Add(1) }); err != nil {
		t.Fatal(err)
	}
	flush(t, app)

	broker.Shutdown()
	natstest.WaitFor(t, "the sidecar sees the outage", func() bool { return !up.Connected() })
	payload := bytes.Repeat([]byte("x"), 1024)
	const n = 200 // 200 KiB: more than the 64 KiB outage buffer
	for range n {
		if err := app.Publish("during.outage", payload); err != nil {
			t.Fatal(err)
		}
	}
	flush(t, app) // the sidecar answers PINGs while the broker is away
	c := r.side.TopicCounters()[""]
	if c.Attempts != n || !c.Balanced() || c.FailedUpstream == 0 || c.Forwarded == 0 || c.Forwarded*1024 > 64<<10 {
		t.Fatalf("counters %+v: want %d attempts, some buffered (at most 64 KiB), the rest refused", c, n)
	}
	natstest.WaitFor(t, "the application hears of it", func() bool {
		e := errs.all()
		return len(e) == 1 && strings.Contains(e[0], `Permissions Violation for Publish to "during.outage": the broker is unavailable`)
	})
	if !app.IsConnected() {
		t.Fatal("the outage closed the application's connection")
	}

	// The broker comes back on the same port; nats.go reconnects and
	// resubscribes the sidecar's interest.
	natstest.StartBroker(t, &server.Options{Port: port})
	natstest.WaitFor(t, "the sidecar reconnects", up.Connected)
	pub := natstest.Connect(t, broker.ClientURL())
	natstest.WaitFor(t, "delivery resumes", func() bool {
		_ = pub.Publish("after.outage", nil)
		_ = pub.Flush()
		time.Sleep(20 * time.Millisecond)
		return got.Load() > 0
	})
}
