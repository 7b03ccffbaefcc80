package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/demo/demoapi"
)

// spamFilter is the non-essential consumer: it reads every order and
// answers orders-api's checks (orders.check). Made slow, its answers
// exceed the Subscription's killSwitch.auto.maxLatency and its sidecar's
// breaker trips: the consumer a kill switch exists for.
func spamFilter(_ context.Context, nc *nats.Conn, _ <-chan error, mux *http.ServeMux) error {
	var delay atomic.Int64 // time.Duration
	var received, answered atomic.Int64
	orders, err := nc.Subscribe("orders.created", func(*nats.Msg) {
		time.Sleep(time.Duration(delay.Load()))
		received.Add(1)
	})
	if err != nil {
		return fmt.Errorf("subscribing to orders.created: %w", err)
	}
	// Slow, it cannot keep up with the orders: nats.go drops what is past
	// this (and says so, once) rather than hold minutes of them.
	if err := orders.SetPendingLimits(1000, 8<<20); err != nil {
		return err
	}
	if _, err := nc.Subscribe("orders.check", func(m *nats.Msg) {
		time.Sleep(time.Duration(delay.Load()))
		if err := m.Respond([]byte("not spam")); err == nil {
			answered.Add(1)
		}
	}); err != nil {
		return fmt.Errorf("subscribing to orders.check: %w", err)
	}
	mux.HandleFunc(demoapi.PathSlow, func(w http.ResponseWriter, r *http.Request) {
		d, err := time.ParseDuration(r.URL.Query().Get("delay"))
		if r.Method != http.MethodPost || err != nil || d < 0 {
			http.Error(w, "POST ?delay=<duration>", http.StatusBadRequest)
			return
		}
		delay.Store(int64(d))
		log.Printf("now taking %s for each order and each check", d)
	})
	mux.HandleFunc(demoapi.PathStats, func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(demoapi.Stats{Received: received.Load(), Answered: answered.Load(), Delay: time.Duration(delay.Load())})
	})
	return nil
}
