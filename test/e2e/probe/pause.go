package main

import (
	"encoding/json"
	"errors"
	"log"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

// What a paused role does not read waits first in the sockets between
// its sidecar and it, then in the sidecar, under the Subscription's
// limits, drop counts and pending gauge. On loopback the sockets hold
// megabytes: the sidecar's send buffer alone starts at some 4 MiB (the
// kernel sizes it from loopback's 64 KiB segments, up to tcp_wmem's
// maximum), minutes of the stories' messages. So a pause first fills
// them (unless asked not to, fill=0): the role publishes filler to its
// own subject, which its sidecar delivers to it, as much as the sockets
// may hold; what arrives after it waits in the sidecar. A handler that
// blocks would not do at all: nats.go reads on into its own buffers,
// which the probe leaves unbounded.
const (
	// pauseRecvBuffer is the role's socket's SO_RCVBUF (the kernel
	// doubles it), set before it connects, so that it does not grow with
	// the kernel's autotuning: the receiving side holds that much at most.
	pauseRecvBuffer = 16 << 10
	// fillChunk is the size of a filler message: under the stories'
	// Topic's maxMessageBytes (64 KiB).
	fillChunk = 32 << 10
	// fillMargin is added to what the sockets may hold, for what the
	// kernel takes beyond its limits (a send queue overshoots its buffer
	// by up to one 64 KiB segment) and for the read under way as the pause
	// began (nats.go reads 32 KiB at a time).
	fillMargin = 256 << 10
	// pauseDialTimeout is nats.go's own (nats.DefaultTimeout), which a
	// custom dialer does not get.
	pauseDialTimeout = 2 * time.Second
)

// pausable is a role whose reads can be paused (POST /pause): it makes
// its connections with its pauser's dialer, and can publish filler that
// it receives itself.
type pausable interface {
	pauser() *pauser
	// publishFiller publishes about n bytes of filler to the role's own
	// subject, and records them in its pauser.
	publishFiller(n int64) error
}

// pauser stops a role's reads from its sidecar on demand: every read of
// a connection its dialer made waits while a pause lasts. A pause ends
// when its time runs out or on POST /resume.
type pauser struct {
	mu  sync.Mutex
	rec probestats.PauseRecorder
	// resumed is closed while no pause lasts.
	resumed chan struct{}
	// gen tells a pause's timer whether its pause is still the current
	// one (it was neither extended nor ended since).
	gen   uint64
	timer *time.Timer
	// conn is the latest connection the dialer made.
	conn *pausingConn
}

func newPauser() *pauser {
	resumed := make(chan struct{})
	close(resumed)
	return &pauser{resumed: resumed}
}

// pause stops reading now, for d; while paused, it moves the pause's end
// to d from now.
func (p *pauser) pause(d time.Duration) probestats.PauseStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if p.rec.Pause(now, now.Add(d)) {
		p.resumed = make(chan struct{})
		log.Printf("paused: reading nothing from the sidecar for %s at most", d)
	} else {
		log.Printf("pause extended: %s from now", d)
	}
	if p.timer != nil {
		p.timer.Stop()
	}
	p.gen++
	gen := p.gen
	p.timer = time.AfterFunc(d, func() { p.expire(gen) })
	return p.rec.Stats(now)
}

// expire ends pause gen when its time runs out, unless it changed since.
func (p *pauser) expire(gen uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen == p.gen {
		p.resumeLocked("its time ran out")
	}
}

// resume ends the pause now, if one lasts.
func (p *pauser) resume() probestats.PauseStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resumeLocked("resumed")
	return p.rec.Stats(time.Now())
}

func (p *pauser) resumeLocked(why string) {
	d, ok := p.rec.Resume(time.Now())
	if !ok {
		return
	}
	close(p.resumed)
	p.gen++
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	log.Printf("reading again after a pause of %s (%s)", d.Round(time.Millisecond), why)
}

func (p *pauser) stats() probestats.PauseStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rec.Stats(time.Now())
}

// wait returns once no pause lasts, or with net.ErrClosed once closed is.
func (p *pauser) wait(closed <-chan struct{}) error {
	for {
		p.mu.Lock()
		paused, resumed := p.rec.Paused(), p.resumed
		p.mu.Unlock()
		if !paused {
			return nil
		}
		select {
		case <-resumed:
		case <-closed:
			return net.ErrClosed
		}
	}
}

// handle serves the pause's controls on mux, for role:
//
//	POST /pause?for=D[&fill=auto|N]   stop reading for D (at most probestats.MaxPause), or move the current pause's end to D from now;
//	                                  then publish filler to the role's own subject: as much as the sockets may hold (auto, the
//	                                  default), N bytes, or none (fill=0)
//	POST /resume                      read again now
//
// Both answer the pause's state (probestats.PauseStats) in JSON.
func (p *pauser) handle(mux *http.ServeMux, role pausable) {
	reply := func(w http.ResponseWriter, st probestats.PauseStats) {
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(st); err != nil {
			log.Printf("answering a pause control: %v", err)
		}
	}
	mux.HandleFunc("POST /pause", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		d, err := probestats.ParsePauseFor(q.Get("for"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fill, err := probestats.ParseFill(q.Get("fill"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		p.pause(d)
		if fill == probestats.FillAuto {
			if fill, err = p.socketsHold(); err != nil {
				http.Error(w, "paused, but no filler: "+err.Error(), http.StatusInternalServerError)
				return
			}
			fill += fillMargin
		}
		if fill > 0 {
			if err := role.publishFiller(fill); err != nil {
				http.Error(w, "paused, but the filler failed: "+err.Error(), http.StatusInternalServerError)
				return
			}
		}
		reply(w, p.stats())
	})
	mux.HandleFunc("POST /resume", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, p.resume())
	})
}

// filled records filler in the pause's state.
func (p *pauser) filled(publisher string, first, last uint64, bytes int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rec.Filled(publisher, first, last, bytes)
	log.Printf("published %d filler message(s), %d bytes, to fill the sockets from the sidecar", last-first+1, bytes)
}

// socketsHold is the most the sockets of the latest connection may hold
// between the sidecar and the role.
func (p *pauser) socketsHold() (int64, error) {
	p.mu.Lock()
	c := p.conn
	p.mu.Unlock()
	if c == nil {
		return 0, errors.New("not connected to the sidecar")
	}
	return socketsHold(c.Conn)
}

// dialer makes the role's connections to the sidecar: small sockets whose
// reads wait while a pause lasts.
func (p *pauser) dialer() nats.CustomDialer {
	return &pausingDialer{p: p, d: net.Dialer{Timeout: pauseDialTimeout, Control: smallSocket}}
}

type pausingDialer struct {
	p *pauser
	d net.Dialer
}

func (d *pausingDialer) Dial(network, address string) (net.Conn, error) {
	c, err := d.d.Dial(network, address)
	if err != nil {
		return nil, err
	}
	pc := &pausingConn{Conn: c, p: d.p, closed: make(chan struct{})}
	d.p.mu.Lock()
	d.p.conn = pc
	d.p.mu.Unlock()
	return pc, nil
}

// pausingConn is a connection whose reads wait while its pauser's pause
// lasts; closing it ends the wait.
type pausingConn struct {
	net.Conn
	p         *pauser
	closed    chan struct{}
	closeOnce sync.Once
}

func (c *pausingConn) Read(b []byte) (int, error) {
	if err := c.p.wait(c.closed); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *pausingConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}
