package main

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/weighstation/weighstation/demo/demoapi"
)

// The refusals the publisher provokes: one order twice Topic orders'
// maxMessageBytes (4 KiB), and a burst ten times Topic orders-export's
// (20 messages).
const (
	oversizeBytes = 8192
	exportBurst   = 200
	// exportRefusedAtLeast allows for the tokens the bucket regains while
	// the burst is sent (20/s).
	exportRefusedAtLeast = exportBurst / 2
)

// refusals is step 6: an oversize publish and a quota refusal, in the
// publisher's log and in the Topics' status.
func (d *demo) refusals(ctx context.Context) error {
	d.p.step(6, "orders-api publishes what its Topics refuse: an order of %d bytes (Topic orders allows 4096) and %d exports at once (Topic orders-export allows bursts of 20)",
		oversizeBytes, exportBurst)
	size, err := d.publish("orders.created", oversizeBytes, 1)
	if err != nil {
		return err
	}
	rate, err := d.publish("orders.export", 128, exportBurst)
	if err != nil {
		return err
	}
	d.res.SizeRefusal, d.res.RateRefusal = size.Refusal, rate.Refusal
	d.p.block("orders-api's log (nats.go reports the sidecar's -ERR as an asynchronous error; the connection stays up):",
		strings.Join(d.apps[ordersAPI].logLines("published", "refused"), "\n"))
	if size.Refusal == "" || rate.Refusal == "" {
		return fmt.Errorf("orders-api got no refusal for the oversize order (%q) or the export burst (%q)", size.Refusal, rate.Refusal)
	}
	err = d.waitFor("the refusals in the Topics' status", func() (bool, string) {
		orders, err := d.topic(ctx, "orders")
		if err != nil {
			return false, err.Error()
		}
		export, err := d.topic(ctx, "orders-export")
		if err != nil {
			return false, err.Error()
		}
		d.res.RefusedSize, d.res.RefusedRate = refused(orders, "size"), refused(export, "rate")
		if d.res.RefusedSize < 1 || d.res.RefusedRate < exportRefusedAtLeast {
			return false, fmt.Sprintf("status counts %d refused for size on orders, %d for rate on orders-export", d.res.RefusedSize, d.res.RefusedRate)
		}
		return true, ""
	})
	if err != nil {
		return err
	}
	_, err = d.tools.kubectlShow(d.p, "get", "topics", "-n", namespace, "-o",
		"custom-columns=NAME:.metadata.name,SUBJECT:.spec.subject,MAX-BYTES:.spec.limits.maxMessageBytes,RATE:.spec.limits.publishRate.messagesPerSecond,"+
			"ATTEMPTS:.status.publish.attempts,PUBLISHED:.status.publish.forwarded,REFUSED-FOR:.status.publish.refused[*].reason,REFUSED:.status.publish.refused[*].count")
	if err != nil {
		return err
	}
	return d.afterPhase(d.released)
}

func (d *demo) publish(subject string, size, count int) (demoapi.Publish, error) {
	var out demoapi.Publish
	q := url.Values{"subject": {subject}, "bytes": {strconv.Itoa(size)}, "count": {strconv.Itoa(count)}}
	if err := d.apps[ordersAPI].post(demoapi.PathPublish, q, &out); err != nil {
		return out, err
	}
	return out, nil
}

// afterPhase lets the load run out the phase after the release, then
// shows the tables one last time.
func (d *demo) afterPhase(released time.Time) error {
	if err := d.hold(d.o.after - time.Since(released)); err != nil {
		return err
	}
	return d.showTables()
}
