package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

// role is what a probe does once connected.
type role interface {
	// run works on nc until ctx ends.
	run(ctx context.Context, nc *nats.Conn) error
	// fill adds the role's counters to a report.
	fill(s *probestats.Stats)
	// asyncError takes an error nats.go reported asynchronously; it
	// returns true when the role counted it as its own (a refusal).
	asyncError(sub *nats.Subscription, err error) bool
	// ready reports whether the role works (e.g. its subscription was not
	// refused).
	ready() bool
	// connects reports whether the role needs the sidecar at all.
	connects() bool
}

// probe holds what every role reports: its connection to the sidecar.
type probe struct {
	roleName string
	o        options
	role     role
	started  time.Time

	mu              sync.Mutex
	connected       bool
	connectAttempts int64
	disconnects     int64
	reconnects      int64
	asyncErrors     int64
	lastAsyncError  string
}

func newProbe(roleName string, o options, r role) *probe {
	return &probe{roleName: roleName, o: o, role: r, started: time.Now()}
}

// Reconnection to the sidecar: it restarts rarely and comes back at once,
// so the probe retries often and forever.
const (
	reconnectWait     = 100 * time.Millisecond
	firstConnectWait  = 100 * time.Millisecond
	firstConnectLimit = time.Second
	closeFlushTimeout = time.Second
)

// runRole connects (retrying until the sidecar accepts: it may start a
// moment after the application) and runs the role until ctx ends.
func (p *probe) runRole(ctx context.Context) error {
	if !p.role.connects() {
		<-ctx.Done()
		return nil
	}
	nc, err := p.connect(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err := nc.FlushTimeout(closeFlushTimeout); err != nil {
			log.Printf("flushing before close: %v", err)
		}
		nc.Close()
	}()
	return p.role.run(ctx, nc)
}

func (p *probe) connect(ctx context.Context) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(p.roleName + "/" + p.o.id),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(reconnectWait),
		nats.ReconnectJitter(10*time.Millisecond, 10*time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			p.mu.Lock()
			p.connected = false
			p.disconnects++
			p.mu.Unlock()
			log.Printf("disconnected from the sidecar: %v", err)
		}),
		nats.ReconnectHandler(func(*nats.Conn) {
			p.mu.Lock()
			p.connected = true
			p.reconnects++
			p.mu.Unlock()
			log.Printf("reconnected to the sidecar")
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if p.role.asyncError(sub, err) {
				return
			}
			p.mu.Lock()
			p.asyncErrors++
			p.lastAsyncError = err.Error()
			p.mu.Unlock()
			log.Printf("asynchronous error: %v", err)
		}),
	}
	if pr, ok := p.role.(pausable); ok {
		opts = append(opts, nats.SetCustomDialer(pr.pauser().dialer()))
	}
	wait := firstConnectWait
	for {
		p.mu.Lock()
		p.connectAttempts++
		attempt := p.connectAttempts
		p.mu.Unlock()
		nc, err := nats.Connect(p.o.natsURL, opts...)
		if err == nil {
			p.mu.Lock()
			p.connected = true
			p.mu.Unlock()
			log.Printf("connected to the sidecar at %s (attempt %d)", p.o.natsURL, attempt)
			return nc, nil
		}
		if attempt == 1 || attempt%20 == 0 {
			log.Printf("connecting to the sidecar at %s (attempt %d): %v; retrying", p.o.natsURL, attempt, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("stopped before the sidecar at %s accepted: %w", p.o.natsURL, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, firstConnectLimit)
	}
}

// stats is a report as of now.
func (p *probe) stats(final bool) probestats.Stats {
	p.mu.Lock()
	s := probestats.Stats{
		Role: p.roleName, ID: p.o.id, Subject: p.o.subject, Queue: p.o.queue,
		StartedUnixNano: p.started.UnixNano(), AtUnixNano: time.Now().UnixNano(), Final: final,
		Connected: p.connected, ConnectAttempts: p.connectAttempts, Disconnects: p.disconnects,
		Reconnects: p.reconnects, AsyncErrors: p.asyncErrors, LastAsyncError: p.lastAsyncError,
	}
	p.mu.Unlock()
	p.role.fill(&s)
	return s
}

func (p *probe) ready() bool {
	if !p.role.connects() {
		return true
	}
	p.mu.Lock()
	connected := p.connected
	p.mu.Unlock()
	return connected && p.role.ready()
}

// report prints a report line every interval until ctx ends.
func (p *probe) report(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			p.print(false)
		}
	}
}

func (p *probe) printFinal() { p.print(true) }

func (p *probe) print(final bool) {
	line, err := probestats.FormatLine(p.stats(final))
	if err != nil {
		log.Printf("%v", err)
		return
	}
	fmt.Fprintln(os.Stdout, line)
}

// serve serves /stats and /readyz on addr (nothing when empty), and a
// pausable role's POST /pause and /resume; the returned function stops
// it.
func (p *probe) serve(addr string) (func(), error) {
	return serveStats(addr, p.handler())
}

// serveStats serves h on addr, the -stats-listen of either main (nothing
// when empty); the returned function stops it.
func serveStats(addr string, h http.Handler) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-stats-listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Printf("serving stats: %v", err)
		}
	}()
	return func() { _ = srv.Close() }, nil
}

// handler serves what serve listens for.
func (p *probe) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(p.stats(false)); err != nil {
			log.Printf("serving /stats: %v", err)
		}
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !p.ready() {
			http.Error(w, "not ready: not connected to the sidecar, or its subscription was refused", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	if pr, ok := p.role.(pausable); ok {
		pr.pauser().handle(mux, pr)
	}
	return mux
}

// idle is the role that connects to nothing.
type idle struct{}

func (idle) run(ctx context.Context, _ *nats.Conn) error { <-ctx.Done(); return nil }
func (idle) fill(*probestats.Stats)                      {}
func (idle) asyncError(*nats.Subscription, error) bool   { return false }
func (idle) ready() bool                                 { return true }
func (idle) connects() bool                              { return false }
