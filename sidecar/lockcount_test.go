//go:build lockcount

package sidecar_test

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/internal/lockcount"
	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/sidecar"
)

// TestDeliveryLockAcquisitions is a diagnostic, not a pass/fail check: it
// prints the lock acquisitions per delivered message on the common path (one
// SUB of one application connection, 1 KiB messages stamped by a publishing
// sidecar), counted by the locks themselves. Under the lockcount build tag
// every lock of package sidecar (by rank) and of pending and upstream (by
// package; latency.Recorder has none) counts each Lock, RLock and TryLock
// (internal/lockcount):
//
//	go test -tags lockcount -run TestDeliveryLockAcquisitions -v ./sidecar/
//
// The publisher talks to the broker directly, so the sidecar's only work is
// delivery (and its own timers, a handful of acquisitions a second). Two
// shapes: one message in flight at a time (one per read from the broker,
// the latency benchmark's), and a burst of 64 per round trip (several per
// read).
func TestDeliveryLockAcquisitions(t *testing.T) {
	r := newRig(t)
	cfg := configWith()
	cfg.Default.PublishRate = nil
	if err := r.side.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	app := r.app(t)
	received := make(chan struct{}, 1<<16)
	if _, err := app.Subscribe("diag.locks", func(*nats.Msg) { received <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	if err := app.Flush(); err != nil {
		t.Fatal(err)
	}
	pub := natstest.Connect(t, r.broker.ClientURL())
	msg := &nats.Msg{Subject: "diag.locks", Data: make([]byte, 1024), Header: nats.Header{}}
	send := func(n, inFlight int) {
		for sent := 0; sent < n; sent += inFlight {
			for range inFlight {
				msg.Header.Set(sidecar.StampHeader, strconv.FormatInt(time.Now().UnixNano(), 10))
				if err := pub.PublishMsg(msg); err != nil {
					t.Fatal(err)
				}
			}
			for range inFlight {
				select {
				case <-received:
				case <-time.After(5 * time.Second):
					t.Fatal("a message did not arrive within 5s")
				}
			}
		}
	}
	send(500, 1) // warm up
	for _, shape := range []struct {
		name     string
		inFlight int
	}{{"one in flight", 1}, {"64 in flight", 64}} {
		const n = 12800
		before := lockcount.Counts()
		send(n, shape.inFlight)
		after := lockcount.Counts()
		var lines []string
		total := 0.0
		for _, name := range slices.Sorted(maps.Keys(after)) {
			per := float64(after[name]-before[name]) / n
			total += per
			if per >= 0.005 {
				lines = append(lines, fmt.Sprintf("%s %.2f", name, per))
			}
		}
		t.Logf("%s: %.2f lock acquisitions per delivered message: %s", shape.name, total, strings.Join(lines, ", "))
	}
}
