package upstream_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/sidecar/upstream"
)

// TestLinkHoldsPublishesUntilTheBrokerIsReached: before the broker is first
// reached, publishes (with headers, which nats.go alone would refuse) are
// held within OutageBufferBytes and then refused with ErrHoldFull; when
// the broker arrives they are all sent, in order, except one over the
// broker's max_payload, which is counted and logged.
func TestLinkHoldsPublishesUntilTheBrokerIsReached(t *testing.T) {
	const payload = 512
	port := natstest.FreePort(t)
	var mu sync.Mutex
	var logs []string
	link := upstream.NewLink(funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, args)
	}, funcr.Options{}))
	nc := natstest.Connect(t, fmt.Sprintf("nats://127.0.0.1:%d", port), append(upstream.ConnectOptions(), link.Options()...)...)
	link.Attach(nc, nil)

	// The link's own connection subscribes too, so that the held messages
	// come back to it; nats.go renews the subscription before the link
	// releases them.
	got := make(chan uint64, upstream.OutageBufferBytes/payload)
	if _, err := nc.Subscribe("held", func(m *nats.Msg) { got <- binary.BigEndian.Uint64(m.Data) }); err != nil {
		t.Fatal(err)
	}
	if err := link.Publish(&nats.Msg{Subject: "held", Data: make([]byte, 2*payload)}); err != nil {
		t.Fatalf("holding a message over the coming broker's max_payload: %v", err)
	}
	data := make([]byte, payload)
	held := 0
	for ; ; held++ {
		binary.BigEndian.PutUint64(data, uint64(held))
		err := link.Publish(&nats.Msg{Subject: "held", Header: nats.Header{"Stamp": []string{"x"}}, Data: data})
		if err != nil {
			if !errors.Is(err, upstream.ErrHoldFull) || !errors.Is(err, nats.ErrReconnectBufExceeded) {
				t.Fatalf("publish %d refused with %v, want ErrHoldFull", held, err)
			}
			break
		}
	}
	if size := held * payload; size > upstream.OutageBufferBytes || size < upstream.OutageBufferBytes*9/10 {
		t.Fatalf("%d messages of %d bytes held, want about OutageBufferBytes (%d)", held, payload, upstream.OutageBufferBytes)
	}

	natstest.StartBroker(t, &server.Options{Port: port, MaxPayload: 2*payload - 1})
	for want := range uint64(held) {
		select {
		case seq := <-got:
			if seq != want {
				t.Fatalf("message %d arrived where %d was due: out of order", seq, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("message %d of %d not delivered within 10s", want, held)
		}
	}
	if n := link.Unsent(); n != 1 {
		t.Fatalf("%d held messages unsent, want the oversize one", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if all := strings.Join(logs, "\n"); !strings.Contains(all, `"msg"="the broker refused publishes held until it was reached" "error"="nats: maximum payload exceeded" "refused"=1`) {
		t.Fatalf("the refusal is not logged:\n%s", all)
	}
	if link.Reconnects() != 0 || !link.Connected() {
		t.Fatalf("connected %v, %d reconnects: want connected, and the first connection no reconnect", link.Connected(), link.Reconnects())
	}
}
