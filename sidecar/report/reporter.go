package report

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
)

// Reporter builds a report every interval and sends it to the operator.
type Reporter struct {
	opts   Options
	bootID string
	// interval is opts.Interval; tests shorten it below MinInterval.
	interval time.Duration

	// buildMu serializes builds (the ticker's, and tests' own) and their
	// queueing.
	buildMu sync.Mutex
	builder *builder

	queue *queue
	stats counters
}

// New returns a Reporter with a new boot ID; Run starts it. The first
// report's interval starts now: make it when the sidecar starts.
func New(opts Options) (*Reporter, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	// The boot ID is the Reporter's, not the sidecar's (its OriginHeader
	// ID): it names a series of sequence numbers, which start at 1 with
	// each Reporter, and the operator counts each (boot ID, sequence) once.
	bootID := newBootID()
	return &Reporter{
		opts:     opts,
		bootID:   bootID,
		interval: opts.Interval,
		builder:  newBuilder(opts.PodUID, bootID, time.Now(), opts.Log),
		queue:    newQueue(opts.MaxPending),
	}, nil
}

// newBootID is 16 random bytes in hex.
func newBootID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// BootID is the boot ID every report of this Reporter carries.
func (r *Reporter) BootID() string { return r.bootID }

// Stats returns the Reporter's counts.
func (r *Reporter) Stats() Stats {
	s := r.stats.snapshot()
	s.Pending = r.queue.len()
	return s
}

// Run builds a report every interval and sends the reports on Reports
// streams over conn (the connection the xDS client uses, see
// xdsclient.Dial), reconnecting with backoff, until ctx ends.
func (r *Reporter) Run(ctx context.Context, conn grpc.ClientConnInterface) error {
	if conn == nil {
		return errors.New("reports: no connection to the operator")
	}
	var wg sync.WaitGroup
	wg.Go(func() { r.tick(ctx) })
	r.connect(ctx, xdsv1.NewReportsClient(conn))
	wg.Wait()
	return nil
}

// Flush builds a last report now, with what the sidecar counted up to its
// end (the drops of its shutdown drain among them), and waits until the
// operator has acknowledged every report queued, or ctx ends. Run must
// still be running, to send it. A stopping sidecar calls it after its
// drain: without it, what the drain could not deliver would be counted
// in the sidecar's last log line and in no status.
func (r *Reporter) Flush(ctx context.Context) error {
	r.collect(time.Now())
	for {
		n := r.queue.len()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d report(s) not acknowledged by the operator: %w", n, ctx.Err())
		case <-r.queue.removed:
		}
	}
}

// tick builds a report every interval until ctx ends.
func (r *Reporter) tick(ctx context.Context) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			r.collect(now)
		}
	}
}

// collect builds the report of the interval that ends at now and queues it
// for sending.
func (r *Reporter) collect(now time.Time) {
	r.buildMu.Lock()
	report := r.builder.build(r.opts.Source, now)
	dropped := r.queue.push(report) // under buildMu: queued in sequence order
	r.buildMu.Unlock()
	r.stats.update(func(s *Stats) { s.Built = report.GetSequence() })
	if dropped != nil {
		// Its histograms, the values of its interval, are lost; its
		// counters are totals, which the reports after it carry.
		r.stats.update(func(s *Stats) { increment(&s.Dropped, DropOverflow) })
		r.opts.Log.Info("dropped the oldest unacknowledged report: the queue is full; its interval's latency values are lost",
			"sequence", dropped.GetSequence(), "maxPending", r.opts.MaxPending)
	}
}
