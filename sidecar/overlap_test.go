package sidecar_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar"
)

// TestOverlappedUpstreamWritesKeepEveryPublishInOrder: a burst written
// faster than the sidecar reads it (one write of 540 KB, so reads fill the
// buffer) reaches the broker whole and in order whether the reader writes
// upstream itself or, with OverlapUpstreamWrites, hands the writing to the
// upstream writer goroutine; and only the option hands over. That a
// handoff has the writer write is upstream's TestWriteSoonHasTheWriterWrite.
func TestOverlappedUpstreamWritesKeepEveryPublishInOrder(t *testing.T) {
	const messages = 20_000
	var burst strings.Builder
	for i := range messages {
		fmt.Fprintf(&burst, "PUB burst.x 8\r\n%08d\r\n", i)
	}
	for _, tc := range []struct {
		name    string
		overlap bool
	}{
		{"the reader writes", false},
		{"handed to the writer", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, func(o *sidecar.Options) { o.OverlapUpstreamWrites = tc.overlap })
			// A Topic without a publish quota (the default policy's would
			// refuse most of the burst).
			if err := r.side.SetConfig(configWith(meshconfig.TopicPolicy{
				Name: "burst", Subject: "burst.>", MaxMessageBytes: 1024, MayPublish: true,
			})); err != nil {
				t.Fatal(err)
			}
			outside := r.direct(t)
			sub, err := outside.SubscribeSync("burst.x")
			if err != nil {
				t.Fatal(err)
			}
			if err := sub.SetPendingLimits(-1, -1); err != nil {
				t.Fatal(err)
			}
			if err := outside.Flush(); err != nil {
				t.Fatal(err)
			}

			app := r.raw(t)
			app.send("CONNECT {\"verbose\":false}\r\n" + burst.String() + "PING\r\n")
			// The PONG comes once the broker confirmed the burst.
			if line := app.line(); line != "PONG" {
				t.Fatalf("got %q, want PONG", line)
			}
			for i := range messages {
				m, err := sub.NextMsg(10 * time.Second)
				if err != nil {
					t.Fatalf("message %d of %d: %v", i, messages, err)
				}
				if want := fmt.Sprintf("%08d", i); string(m.Data) != want {
					t.Fatalf("message %d is %q, want %q", i, m.Data, want)
				}
			}

			handoffs, _ := r.side.PublishHandoffs()
			byReader, byWriter := r.side.BrokerWrites()
			switch {
			case !tc.overlap && handoffs != 0:
				t.Fatalf("%d handoffs without OverlapUpstreamWrites", handoffs)
			case tc.overlap && handoffs == 0:
				t.Fatal("no handoff with OverlapUpstreamWrites, though reads filled the buffer")
			}
			t.Logf("%d handoffs; writes to the broker: %d by readers, %d by the upstream writer", handoffs, byReader, byWriter)
		})
	}
}
