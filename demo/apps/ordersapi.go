package main

import (
	"context"
	"encoding/json"
	"errors"
	"log"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/demo/demoapi"
)

// The spam check orders-api asks for every checkEvery, and how long it
// waits for the answer.
const (
	checkEvery   = 50 * time.Millisecond
	checkTimeout = 500 * time.Millisecond
	// refusalWait bounds the wait for a sidecar's -ERR after a publish.
	refusalWait = 5 * time.Second
)

// ordersAPI is the publisher. The orders themselves come from the load
// generator on the same sidecar (`weighstation bench`, another process of
// the pod); orders-api checks orders with the spam filter (requests), and
// on the driver's word publishes what its Topics refuse.
func ordersAPI(ctx context.Context, nc *nats.Conn, refusals <-chan error, mux *http.ServeMux) error {
	rq := &requests{counts: map[demoapi.Outcome]int64{}, last: map[demoapi.Outcome]time.Time{}}
	go rq.loop(ctx, nc)
	var publishMu sync.Mutex // one burst at a time, so that a refusal is its own
	mux.HandleFunc(demoapi.PathRequests, func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(rq.snapshot())
	})
	mux.HandleFunc(demoapi.PathPublish, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		subject := q.Get("subject")
		size, err1 := strconv.Atoi(q.Get("bytes"))
		count, err2 := strconv.Atoi(q.Get("count"))
		if r.Method != http.MethodPost || subject == "" || err1 != nil || err2 != nil || size < 0 || count < 1 {
			http.Error(w, "POST ?subject=&bytes=&count=", http.StatusBadRequest)
			return
		}
		publishMu.Lock()
		defer publishMu.Unlock()
		out, err := publish(nc, refusals, subject, size, count)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(out)
	})
	return nil
}

// publish sends count messages of size bytes to subject at once, and
// waits for the sidecar's refusal of that subject, if one comes. A
// publish is answered only when refused (NATS has no positive
// acknowledgement), so a burst that fits its quota waits the whole
// refusalWait; the demo publishes only what it expects refused.
func publish(nc *nats.Conn, refusals <-chan error, subject string, size, count int) (demoapi.Publish, error) {
	drain(refusals)
	payload := make([]byte, size)
	for i := range count {
		if err := nc.Publish(subject, payload); err != nil {
			return demoapi.Publish{Published: i}, err
		}
	}
	if err := nc.Flush(); err != nil {
		return demoapi.Publish{Published: count}, err
	}
	log.Printf("published %d message(s) of %d bytes to %s", count, size, subject)
	timeout := time.After(refusalWait)
	for {
		select {
		case err := <-refusals:
			if strings.Contains(err.Error(), strconv.Quote(subject)) {
				return demoapi.Publish{Published: count, Refusal: err.Error()}, nil
			}
		case <-timeout:
			log.Printf("no refusal for %s within %s", subject, refusalWait)
			return demoapi.Publish{Published: count}, nil
		}
	}
}

func drain(c <-chan error) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// requests are orders-api's spam checks and how they went.
type requests struct {
	mu      sync.Mutex
	counts  map[demoapi.Outcome]int64
	last    map[demoapi.Outcome]time.Time
	changes []demoapi.Change
}

// loop asks the spam filter about an order every checkEvery until ctx
// ends, and logs each change of outcome. The checks do not wait for each
// other (open loop): a slow spam filter faces all of them, as it would
// face a service's traffic, rather than only as many as it answers.
func (rq *requests) loop(ctx context.Context, nc *nats.Conn) {
	tick := time.NewTicker(checkEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		go func() {
			start := time.Now()
			_, err := nc.Request("orders.check", []byte("order"), checkTimeout)
			rq.record(start, time.Since(start), outcomeOf(err))
		}()
	}
}

func outcomeOf(err error) demoapi.Outcome {
	switch {
	case err == nil:
		return demoapi.Answered
	case errors.Is(err, nats.ErrNoResponders):
		return demoapi.NoResponders
	case errors.Is(err, nats.ErrTimeout):
		return demoapi.TimedOut
	}
	return demoapi.Failed
}

func (rq *requests) record(at time.Time, took time.Duration, o demoapi.Outcome) {
	rq.mu.Lock()
	defer rq.mu.Unlock()
	rq.counts[o]++
	if at.After(rq.last[o]) {
		rq.last[o] = at
	}
	if n := len(rq.changes); n > 0 && rq.changes[n-1].Outcome == o {
		return
	}
	rq.changes = append(rq.changes, demoapi.Change{At: at, Outcome: o, Took: took})
	if len(rq.changes) > 100 {
		rq.changes = rq.changes[1:]
	}
	log.Printf("spam checks now %s (this one in %s)", o, took.Round(10*time.Microsecond))
}

func (rq *requests) snapshot() demoapi.Requests {
	rq.mu.Lock()
	defer rq.mu.Unlock()
	return demoapi.Requests{Counts: maps.Clone(rq.counts), Last: maps.Clone(rq.last), Changes: slices.Clone(rq.changes)}
}
