package loadgen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nats-io/nats.go"
)

// Mode is what the generator sends.
type Mode string

const (
	PubSub Mode = "pubsub"
	ReqRep Mode = "reqrep"
)

// headerBytes is the part of a pubsub payload the generator writes:
// intended send time, actual send time (Unix nanoseconds) and a sequence
// number.
const headerBytes = 24

// Histogram range, microseconds.
const (
	minMicros = 1
	maxMicros = int64(time.Hour / time.Microsecond)
	sigFigs   = 3
)

// Config is one run.
type Config struct {
	// URL is where publishers (or requesters) connect; SubURL is where the
	// subscriber connects in pubsub mode (URL when empty).
	URL, SubURL string
	Mode        Mode
	// Rate is messages (or requests) per second in all. In pubsub mode one
	// schedule deals the messages out to the Connections in turn; in reqrep
	// mode each connection has its share of the schedule.
	Rate        float64
	Size        int
	Duration    time.Duration
	Connections int
	Subject     string
	// Spin is how long before each send time the sender stops sleeping
	// and busy-waits; never more than a quarter of the interval between
	// two sends of the whole schedule, all connections together (see
	// spinFor).
	Spin time.Duration
	// Timeout bounds one request (reqrep), and the wait for the last
	// messages to arrive (pubsub).
	Timeout time.Duration
	// Options are extra nats.go options (credentials, say).
	Options []nats.Option
}

// DefaultConfig: 1 KiB at 1,000/s for 10 s on one connection, 50 µs of
// busy-waiting, 5 s timeouts.
var DefaultConfig = Config{
	URL: nats.DefaultURL, Mode: PubSub, Rate: 1000, Size: 1024, Duration: 10 * time.Second,
	Connections: 1, Subject: "bench", Spin: 50 * time.Microsecond, Timeout: 5 * time.Second,
}

func (c Config) validate() error {
	switch {
	case c.Mode != PubSub && c.Mode != ReqRep:
		return fmt.Errorf("mode %q: it must be %q or %q", c.Mode, PubSub, ReqRep)
	case c.Rate <= 0 || c.Duration <= 0 || c.Connections < 1:
		return fmt.Errorf("rate (%g/s), duration (%s) and connections (%d) must be positive", c.Rate, c.Duration, c.Connections)
	case c.Size < headerBytes:
		return fmt.Errorf("size %d: at least %d bytes carry the send times", c.Size, headerBytes)
	case c.Rate/float64(c.Connections) > 1e6:
		return fmt.Errorf("rate %g/s over %d connections: at most 1,000,000/s per connection", c.Rate, c.Connections)
	case c.Timeout <= 0:
		return fmt.Errorf("timeout %s must be positive", c.Timeout)
	case c.Spin < 0:
		return fmt.Errorf("spin %s must not be negative", c.Spin)
	}
	return nil
}

// Result is one run's measurements.
type Result struct {
	Config Config
	// Corrected is latency from the intended send time; Uncorrected from
	// the actual send; SendLag is actual minus intended. Microseconds.
	Corrected, Uncorrected, SendLag *hdrhistogram.Histogram
	// Sent, Received and Failed count messages (or requests); Clamped
	// counts values outside the histograms' range.
	Sent, Received, Failed, Clamped int64
	// NoResponders counts requests answered "no responders".
	NoResponders int64
	// Elapsed is the sending time; CPU is the generator process's own CPU
	// time over the run (user plus system).
	Elapsed, CPU time.Duration
}

func newHistogram() *hdrhistogram.Histogram { return hdrhistogram.New(minMicros, maxMicros, sigFigs) }

// recorder is one goroutine's histograms.
type recorder struct {
	corrected, uncorrected, lag *hdrhistogram.Histogram
	clamped                     int64
}

func newRecorder() *recorder {
	return &recorder{corrected: newHistogram(), uncorrected: newHistogram(), lag: newHistogram()}
}

func (r *recorder) record(h *hdrhistogram.Histogram, d time.Duration) {
	us := d.Microseconds()
	if us < minMicros {
		if us < 0 {
			r.clamped++
		}
		us = minMicros
	}
	if us > maxMicros {
		r.clamped++
		us = maxMicros
	}
	_ = h.RecordValue(us) // in range after clamping
}

func (r *recorder) mergeInto(res *Result) {
	res.Corrected.Merge(r.corrected)
	res.Uncorrected.Merge(r.uncorrected)
	res.SendLag.Merge(r.lag)
	res.Clamped += r.clamped
}

// Run generates load until cfg.Duration has passed (or ctx ends) and
// returns the measurements.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	res := &Result{Config: cfg, Corrected: newHistogram(), Uncorrected: newHistogram(), SendLag: newHistogram()}
	conns := make([]*nats.Conn, cfg.Connections)
	for i := range conns {
		nc, err := nats.Connect(cfg.URL, append([]nats.Option{nats.Name(fmt.Sprintf("weighstation-bench-%d", i))}, cfg.Options...)...)
		if err != nil {
			return nil, fmt.Errorf("bench: connecting to %s: %w", cfg.URL, err)
		}
		defer nc.Close()
		conns[i] = nc
	}
	var receive *receiver
	if cfg.Mode == PubSub {
		var err error
		if receive, err = startReceiver(cfg); err != nil {
			return nil, err
		}
		defer receive.close()
	}

	cpuBefore := processCPU()
	start := time.Now().Add(10 * time.Millisecond) // every schedule starts together
	var wg sync.WaitGroup
	var mu sync.Mutex
	var sent, received, failed, noResponders atomic.Int64
	// Every sender spins before its sends, so the bound is on the whole
	// schedule's interval: together they spin at most a quarter of a core.
	spin := spinFor(cfg.Spin, time.Duration(float64(time.Second)/cfg.Rate))
	// send runs one schedule: n-th message at first + n × interval, on
	// pick(n)'s connection, until the duration is over.
	send := func(first time.Time, interval time.Duration, pick func(n int64) *nats.Conn) {
		defer wg.Done()
		rec := newRecorder()
		payload := make([]byte, cfg.Size)
		for n := int64(0); ; n++ {
			intended := first.Add(time.Duration(n) * interval)
			if intended.Sub(start) >= cfg.Duration || ctx.Err() != nil {
				break
			}
			nc := pick(n)
			waitUntil(intended, spin)
			actual := time.Now()
			rec.record(rec.lag, actual.Sub(intended))
			binary.LittleEndian.PutUint64(payload[0:], uint64(intended.UnixNano()))
			binary.LittleEndian.PutUint64(payload[8:], uint64(actual.UnixNano()))
			binary.LittleEndian.PutUint64(payload[16:], uint64(n))
			sent.Add(1)
			if cfg.Mode == PubSub {
				if err := nc.Publish(cfg.Subject, payload); err != nil {
					failed.Add(1)
				}
				continue
			}
			_, err := nc.Request(cfg.Subject, payload, cfg.Timeout)
			done := time.Now()
			switch {
			case errors.Is(err, nats.ErrNoResponders):
				noResponders.Add(1)
				failed.Add(1)
			case err != nil:
				failed.Add(1)
			default:
				received.Add(1)
				rec.record(rec.corrected, done.Sub(intended))
				rec.record(rec.uncorrected, done.Sub(actual))
			}
		}
		mu.Lock()
		rec.mergeInto(res)
		mu.Unlock()
	}
	if cfg.Mode == PubSub {
		// Publishing never waits for the system under test, so one sender
		// keeps the whole schedule and deals the messages out to the
		// connections in turn: one busy-waiting goroutine, not one per
		// connection, which on a small machine would starve what it measures.
		wg.Add(1)
		go send(start, time.Duration(float64(time.Second)/cfg.Rate), func(n int64) *nats.Conn { return conns[n%int64(len(conns))] })
	} else {
		// A request waits for its reply (as in wrk2), so each connection
		// keeps its own share of the schedule, offset so that together they
		// make one even schedule.
		interval := time.Duration(float64(time.Second) * float64(cfg.Connections) / cfg.Rate)
		for i, nc := range conns {
			wg.Add(1)
			go send(start.Add(time.Duration(i)*interval/time.Duration(cfg.Connections)), interval, func(int64) *nats.Conn { return nc })
		}
	}
	wg.Wait()
	for _, nc := range conns {
		_ = nc.Flush() // an error here shows as messages that never arrived
	}
	res.Elapsed = time.Since(start)
	if receive != nil {
		receive.waitFor(sent.Load(), cfg.Timeout)
		received.Store(receive.count())
		receive.mergeInto(res)
	}
	res.CPU = processCPU() - cpuBefore
	res.Sent, res.Received, res.Failed, res.NoResponders = sent.Load(), received.Load(), failed.Load(), noResponders.Load()
	return res, nil
}

// maxSpinShare bounds the busy-wait to this fraction of the interval
// between two sends of the whole schedule.
const maxSpinShare = 4

// spinFor is the busy-wait before each send, given the interval between
// two sends of the whole schedule (1/rate): the configured spin, but at
// most a quarter of that interval, so that all senders together spin at
// most a quarter of a core (in reqrep mode each connection's sender sends
// once per connections × interval, and spins once per send).
// Unbounded, a spin longer than the interval never ends: above 20,000/s a
// 50 µs spin keeps the sender on a core all the time, and on a 2-core
// machine that core is taken from the system under test
// (docs/benchmarks.md). A sleep that wakes late costs nothing in the
// measurement: latency is taken from the intended send time, and the
// lateness shows as send lag.
func spinFor(spin, interval time.Duration) time.Duration {
	return min(spin, interval/maxSpinShare)
}

// waitUntil sleeps until spin before t, then busy-waits, yielding so that
// other goroutines (the receiver's) still run on a small machine. It sleeps
// with nanosleep(2) rather than time.Sleep: Go's timers wake through the
// netpoller, whose epoll timeout has millisecond granularity, which would
// make every send up to a millisecond late; a high-resolution nanosleep
// wakes within tens of microseconds without burning a core, which on a
// 2-core machine would starve the system under test.
func waitUntil(t time.Time, spin time.Duration) {
	for {
		d := time.Until(t) - spin
		if d <= 0 {
			break
		}
		ts := syscall.NsecToTimespec(int64(d))
		_ = syscall.Nanosleep(&ts, nil) // interrupted: the loop sleeps the rest
	}
	for time.Now().Before(t) {
		runtime.Gosched()
	}
}

// SendTimes reads a pubsub payload's intended and actual send times, so
// that another subscriber (an application under the load) can measure its
// own latency as the generator's subscriber does; ok is false for a payload
// too short to carry them.
func SendTimes(payload []byte) (intended, actual time.Time, ok bool) {
	if len(payload) < headerBytes {
		return time.Time{}, time.Time{}, false
	}
	intended = time.Unix(0, int64(binary.LittleEndian.Uint64(payload[0:])))
	actual = time.Unix(0, int64(binary.LittleEndian.Uint64(payload[8:])))
	return intended, actual, true
}

// receiver is the pubsub subscriber: one nats.go subscription, whose one
// callback goroutine records every arrival.
type receiver struct {
	nc   *nats.Conn
	rec  *recorder
	mu   sync.Mutex
	got  int64
	cond *sync.Cond
}

func startReceiver(cfg Config) (*receiver, error) {
	url := cfg.SubURL
	if url == "" {
		url = cfg.URL
	}
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name("weighstation-bench-subscriber")}, cfg.Options...)...)
	if err != nil {
		return nil, fmt.Errorf("bench: connecting the subscriber to %s: %w", url, err)
	}
	r := &receiver{nc: nc, rec: newRecorder()}
	r.cond = sync.NewCond(&r.mu)
	sub, err := nc.Subscribe(cfg.Subject, func(m *nats.Msg) {
		now := time.Now()
		intended, actual, ok := SendTimes(m.Data)
		if !ok {
			return
		}
		r.mu.Lock()
		r.rec.record(r.rec.corrected, now.Sub(intended))
		r.rec.record(r.rec.uncorrected, now.Sub(actual))
		r.got++
		r.cond.Broadcast()
		r.mu.Unlock()
	})
	if err == nil {
		// nats.go's default would drop past 64 MiB; the generator wants to
		// see every message and count what it lost itself.
		err = sub.SetPendingLimits(-1, -1)
	}
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bench: subscribing to %s: %w", cfg.Subject, err)
	}
	return r, nil
}

// waitFor waits until want messages arrived, or for timeout at most.
func (r *receiver) waitFor(want int64, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	stop := time.AfterFunc(timeout, func() { r.mu.Lock(); r.cond.Broadcast(); r.mu.Unlock() })
	defer stop.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.got < want && time.Now().Before(deadline) {
		r.cond.Wait()
	}
}

func (r *receiver) count() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got
}

func (r *receiver) mergeInto(res *Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	res.Corrected.Merge(r.rec.corrected)
	res.Uncorrected.Merge(r.rec.uncorrected)
	res.Clamped += r.rec.clamped
}

func (r *receiver) close() { r.nc.Close() }

// processCPU is this process's CPU time so far, user plus system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Respond answers requests on subject with their own payload until ctx
// ends: the responder for reqrep runs.
func Respond(ctx context.Context, url, subject string, opts ...nats.Option) error {
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name("weighstation-bench-responder")}, opts...)...)
	if err != nil {
		return fmt.Errorf("bench: connecting the responder to %s: %w", url, err)
	}
	defer nc.Close()
	if _, err := nc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		return fmt.Errorf("bench: subscribing the responder to %s: %w", subject, err)
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}
