package sidecar_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/weighstation/weighstation/loadgen"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar"
	"github.com/weighstation/weighstation/sidecar/pending"
)

// TestOverloadBalancesHold is the short version of `make bench-overload`:
// a publisher at 10× its quota and a consumer that stopped reading its
// socket, beside an essential consumer, in one pod under a 2 MiB memory
// budget. Every publish attempt and every arrival is accounted for exactly,
// the essential consumer loses nothing, and the budget holds.
func TestOverloadBalancesHold(t *testing.T) {
	const quota = 500
	r := newRig(t, func(o *sidecar.Options) { o.MemoryBudget = 2 << 20 })
	cfg := withSubscriptions(subscription("optional", "load.>", "", false), subscription("critical", "probe.>", "", true))
	cfg.Topics = []meshconfig.TopicPolicy{{Name: "load", Subject: "load.>", MaxMessageBytes: 1 << 20, MayPublish: true, StampHeader: true,
		PublishRate: &meshconfig.Rate{MessagesPerSecond: quota, MessagesBurst: 50}}}
	r.setConfig(t, cfg)
	stalled := r.raw(t)
	stalled.send("CONNECT {}\r\nSUB load.x 1\r\nPING\r\n")
	if got := stalled.line(); got != "PONG" {
		t.Fatalf("got %q, want PONG", got)
	}
	sidecarURL := "nats://" + r.side.Addr().String()

	var wg sync.WaitGroup
	var load, probe *loadgen.Result
	var loadErr, probeErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		c := loadgen.DefaultConfig
		c.URL, c.SubURL, c.Subject, c.Rate, c.Size, c.Duration, c.Timeout = sidecarURL, r.broker.ClientURL(), "load.x", 10*quota, 32<<10, time.Second, 500*time.Millisecond
		load, loadErr = loadgen.Run(context.Background(), c)
	}()
	go func() {
		defer wg.Done()
		c := loadgen.DefaultConfig
		c.URL, c.SubURL, c.Subject, c.Rate, c.Duration = r.broker.ClientURL(), sidecarURL, "probe.x", 500, time.Second
		probe, probeErr = loadgen.Run(context.Background(), c)
	}()
	wg.Wait()
	if loadErr != nil || probeErr != nil {
		t.Fatalf("load: %v; probe: %v", loadErr, probeErr)
	}

	topic := r.side.TopicCounters()["load"]
	if !topic.Balanced() || topic.Attempts != uint64(load.Sent) {
		t.Errorf("publish attempts %d; counted %+v", load.Sent, topic)
	}
	if topic.Forwarded != uint64(load.Received) || topic.RefusedRate == 0 {
		t.Errorf("forwarded %d, received outside %d, refused over quota %d", topic.Forwarded, load.Received, topic.RefusedRate)
	}
	totals := r.side.PolicyTotals()
	optional, critical := totals["optional"], totals["critical"]
	if !optional.Balanced() || optional.Arrived != topic.Forwarded || optional.Dropped[pending.ReasonShed] == 0 {
		t.Errorf("optional: %+v; want balanced, every forwarded message arrived, some shed", optional)
	}
	if !critical.Balanced() || critical.Arrived != uint64(probe.Sent) || critical.Delivered != uint64(probe.Received) || probe.Received != probe.Sent {
		t.Errorf("critical: %+v; the probe sent %d and received %d: want all delivered", critical, probe.Sent, probe.Received)
	}
	if used := r.side.BudgetUsed(); used > 2<<20 {
		t.Errorf("pending bytes %d over the 2 MiB budget", used)
	}
}
