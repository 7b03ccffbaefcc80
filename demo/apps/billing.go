package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/demo/demoapi"
	"github.com/weighstation/weighstation/loadgen"
)

// billing is the essential consumer. It measures each order's latency from
// the load generator's intended send time (in the payload) to its own
// receipt: what the sidecars' status cannot see (its own client's
// buffers) included. The demo's driver cuts the measurement into phases,
// so that the report can set "before", "during" and "after" side by side.
func billing(_ context.Context, nc *nats.Conn, _ <-chan error, mux *http.ServeMux) error {
	b := &phases{}
	b.start("warm-up", time.Now())
	sub, err := nc.Subscribe("orders.created", func(m *nats.Msg) {
		now := time.Now()
		intended, _, ok := loadgen.SendTimes(m.Data)
		if !ok {
			return // not the load generator's: nothing to measure
		}
		b.record(now.Sub(intended))
	})
	if err != nil {
		return fmt.Errorf("subscribing to orders.created: %w", err)
	}
	// Billing must see every order: no client-side limit that would drop.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return err
	}
	mux.HandleFunc(demoapi.PathPhase, func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("name")
		if r.Method != http.MethodPost || name == "" {
			http.Error(w, "POST ?name=", http.StatusBadRequest)
			return
		}
		b.start(name, time.Now())
		log.Printf("latency phase %q begins", name)
	})
	mux.HandleFunc(demoapi.PathPhases, func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(b.all(time.Now()))
	})
	mux.HandleFunc(demoapi.PathStats, func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(demoapi.Stats{Received: b.received()})
	})
	return nil
}

// Latency is recorded as package loadgen records it: microseconds, 1 µs to
// an hour, 3 significant digits.
const (
	minMicros = 1
	maxMicros = int64(time.Hour / time.Microsecond)
)

// phases are billing's latency histograms, one per phase of the demo.
type phases struct {
	mu    sync.Mutex
	done  []demoapi.Phase
	name  string
	since time.Time
	h     *hdrhistogram.Histogram
	total int64
}

func (p *phases) start(name string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.h != nil {
		p.done = append(p.done, p.current(now))
	}
	p.name, p.since, p.h = name, now, hdrhistogram.New(minMicros, maxMicros, 3)
}

func (p *phases) current(now time.Time) demoapi.Phase {
	return demoapi.Phase{Name: p.name, Start: p.since, End: now, Received: p.h.TotalCount(), Histogram: p.h.Export()}
}

func (p *phases) record(d time.Duration) {
	us := min(max(d.Microseconds(), minMicros), maxMicros)
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.h.RecordValue(us) // in range once clamped
	p.total++
}

func (p *phases) all(now time.Time) []demoapi.Phase {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append(append([]demoapi.Phase(nil), p.done...), p.current(now))
}

func (p *phases) received() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}
