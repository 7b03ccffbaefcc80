package sidecarapp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/weighstation/weighstation/internal/tlsreload"
	"github.com/weighstation/weighstation/sidecar/brokercred"
	"github.com/weighstation/weighstation/sidecar/report"
	"github.com/weighstation/weighstation/sidecar/xdsclient"
)

// LinkOptions configure an OperatorLink.
type LinkOptions struct {
	// XDS configures the xDS client: the operator's Address, the pod
	// (Namespace, Pod, PodUID), its TokenFile, Apply, the backoffs and
	// limits, Log. The connection is XDS.Conn when set (several links may
	// share one; the link does not close it); else the link dials one
	// when it starts, with XDS.Credentials, or, without them, trusting
	// CAFile, and closes it when it stops.
	XDS xdsclient.Options
	// CAFile is the operator's CA bundle, without XDS.Credentials or
	// XDS.Conn: read when the link starts, and retried until it is there
	// (the operator publishes it into the pod's namespace, which may not
	// have happened yet when the pod starts). ServerName is the name the
	// operator's certificate must carry; "": XDS.Address's host.
	CAFile, ServerName string
	// Report, when set, is the reports the link sends from the start (see
	// StartReports). PodUID and TokenFile default to XDS's, and so do the
	// backoffs.
	Report *report.Options
	// Credential, when set, is the broker credential the link fetches
	// from the operator and renews (brokercred.Holder.Maintain), calling
	// SwitchBroker after each renewal.
	Credential   *brokercred.Holder
	SwitchBroker func()
	// Log receives the link's own failures (the xDS client's, the
	// reports' and the credential's logs are their Options').
	Log logr.Logger
}

// OperatorLink is a sidecar's operator-facing half: its xDS client, its
// reports and its broker credential, on one connection to the operator.
// A sidecar has one (Sidecar.Link); a swarm of simulated sidecars, which
// have no application server, makes thousands with NewOperatorLink.
type OperatorLink struct {
	// XDS is the xDS client; its Stats and Version tell what it holds.
	XDS *xdsclient.Client
	// Credential is LinkOptions.Credential.
	Credential *brokercred.Holder

	opts LinkOptions
	conn *laterConn
	done chan struct{} // closed once everything the link runs stopped

	mu       sync.Mutex
	started  bool
	closed   bool
	cancel   context.CancelFunc
	ctx      context.Context // Start's, once connected: reports start on it
	reporter *report.Reporter
	// The reports' own goroutine, so that StopReports stops them alone.
	stopReport   context.CancelFunc
	reportDone   chan struct{}
	reportsEnded bool // StopReports was called
}

// laterConn is the connection to the operator as the xDS client, the
// reports and the credential see it: the xDS client is made when the link
// is (so that a missing flag is an error at start), the connection only
// when the link starts (the CA bundle may not be mounted yet). It is set
// before anything that uses it runs.
type laterConn struct{ grpc.ClientConnInterface }

// NewOperatorLink checks opts and builds the link; Start runs it.
func NewOperatorLink(opts LinkOptions) (*OperatorLink, error) {
	return newLink(opts, nil)
}

// newLink builds a link whose reports are reporter's (nil: opts.Report's,
// if any); the sidecar builds its Reporter first, as it starts, when the
// first report's interval begins.
func newLink(opts LinkOptions, reporter *report.Reporter) (*OperatorLink, error) {
	if reporter == nil && opts.Report != nil {
		var err error
		if reporter, err = newReporter(opts, *opts.Report); err != nil {
			return nil, err
		}
	}
	if opts.XDS.Conn == nil && opts.XDS.Credentials == nil && opts.ServerName == "" {
		host, _, err := net.SplitHostPort(opts.XDS.Address)
		if err != nil {
			return nil, fmt.Errorf("-operator %q: %w", opts.XDS.Address, err)
		}
		opts.ServerName = host
	}
	l := &OperatorLink{Credential: opts.Credential, opts: opts, conn: &laterConn{}, done: make(chan struct{}), reporter: reporter}
	xopts := opts.XDS
	xopts.Conn = l.conn
	client, err := xdsclient.New(xopts)
	if err != nil {
		return nil, err
	}
	l.XDS = client
	return l, nil
}

// newReporter builds a Reporter for the link's pod.
func newReporter(opts LinkOptions, r report.Options) (*report.Reporter, error) {
	if r.PodUID == "" {
		r.PodUID = opts.XDS.PodUID
	}
	if r.TokenFile == "" {
		r.TokenFile = opts.XDS.TokenFile
	}
	if r.InitialBackoff == 0 && r.MaxBackoff == 0 {
		r.InitialBackoff, r.MaxBackoff = opts.XDS.InitialBackoff, opts.XDS.MaxBackoff
	}
	return report.New(r)
}

// Start runs the link in the background until ctx ends or Close: it
// connects (once the CA bundle is there, without credentials), then
// runs the credential's upkeep, the reports and the xDS client. Only the
// first call does anything.
func (l *OperatorLink) Start(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started || l.closed {
		return
	}
	l.started = true
	ctx, l.cancel = context.WithCancel(ctx)
	go l.run(ctx)
}

func (l *OperatorLink) run(ctx context.Context) {
	defer close(l.done)
	log := l.opts.Log
	conn, own, err := l.connect(ctx)
	if err != nil {
		log.Error(err, "xDS client")
		return
	}
	if conn == nil {
		return // ctx ended first
	}
	if own != nil {
		defer own.Close()
	}
	l.conn.ClientConnInterface = conn
	var wg sync.WaitGroup
	if issued := l.opts.Credential; issued != nil {
		switchBroker := l.opts.SwitchBroker
		if switchBroker == nil {
			switchBroker = func() {}
		}
		wg.Go(func() {
			if err := issued.Maintain(ctx, conn, l.opts.XDS.TokenFile, l.opts.XDS.PodUID, switchBroker, log.WithName("broker-credential")); err != nil && ctx.Err() == nil {
				log.Error(err, "the broker credential")
			}
		})
	}
	l.mu.Lock()
	l.ctx = ctx
	if l.reporter != nil && !l.reportsEnded {
		l.runReportsLocked()
	}
	l.mu.Unlock()
	if err := l.XDS.Run(ctx); err != nil {
		log.Error(err, "xDS client stopped")
	}
	wg.Wait()
	l.mu.Lock()
	l.ctx = nil // a Reporter made from now on never runs
	reported := l.reportDone
	l.mu.Unlock()
	if reported != nil {
		<-reported
	}
}

// connect returns the connection to the operator, and own when the link
// dialed it; nil, nil, nil when ctx ended while it waited for the CA
// bundle.
func (l *OperatorLink) connect(ctx context.Context) (conn grpc.ClientConnInterface, own *grpc.ClientConn, err error) {
	opts := l.opts.XDS
	if opts.Conn != nil {
		return opts.Conn, nil, nil
	}
	if opts.Credentials == nil {
		wait := xdsclient.DefaultInitialBackoff
		for {
			pool, err := tlsreload.NewReloadingPool(l.opts.CAFile, tlsreload.Options{Log: l.opts.Log.WithName("ca")})
			if err == nil {
				opts.Credentials = credentials.NewTLS(pool.ClientConfig(l.opts.ServerName))
				break
			}
			l.opts.Log.Info("waiting for the operator's CA bundle", "caFile", l.opts.CAFile, "reason", err.Error())
			select {
			case <-ctx.Done():
				return nil, nil, nil
			case <-time.After(wait):
			}
			wait = min(2*wait, 5*time.Second)
		}
	}
	// One connection carries the xDS stream, the reports and the
	// credential's requests; it connects lazily and reconnects by itself.
	own, err = opts.Dial()
	if err != nil {
		return nil, nil, err
	}
	return own, own, nil
}

// runReportsLocked runs the reporter on the link's connection, under a
// context of its own.
func (l *OperatorLink) runReportsLocked() {
	ctx, stop := context.WithCancel(l.ctx)
	done := make(chan struct{})
	l.stopReport, l.reportDone = stop, done
	r, log := l.reporter, l.opts.Log
	go func() {
		defer close(done)
		if err := r.Run(ctx, l.conn); err != nil {
			log.Error(err, "reports stopped")
		}
	}()
}

// StartReports builds a Reporter from opts (PodUID, TokenFile and the
// backoffs default to the link's) and sends its reports on the link's
// connection, once it is connected. A link has one Reporter: it fails
// when one was made.
func (l *OperatorLink) StartReports(opts report.Options) (*report.Reporter, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reporter != nil {
		return nil, errors.New("the link sends reports already")
	}
	r, err := newReporter(l.opts, opts)
	if err != nil {
		return nil, err
	}
	l.reporter = r
	if l.ctx != nil && !l.reportsEnded {
		l.runReportsLocked()
	}
	return r, nil
}

// Reporter is the link's Reporter, nil when it sends no reports.
func (l *OperatorLink) Reporter() *report.Reporter {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reporter
}

// StopReports stops the reports alone, and waits until they stopped: a
// test's sidecar whose reports no longer arrive, while its configuration
// still does.
func (l *OperatorLink) StopReports() {
	l.mu.Lock()
	l.reportsEnded = true
	stop, done := l.stopReport, l.reportDone
	l.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// Done is closed once the link stopped (its context ended, or Close),
// and at Close for a link never started.
func (l *OperatorLink) Done() <-chan struct{} { return l.done }

// Close stops the link and waits until everything it ran stopped.
func (l *OperatorLink) Close() {
	l.mu.Lock()
	started, cancel := l.started, l.cancel
	if !l.closed && !started {
		close(l.done)
	}
	l.closed = true
	l.mu.Unlock()
	if started {
		cancel()
	}
	<-l.done
}
