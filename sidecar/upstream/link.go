package upstream

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
)

// OutageBufferBytes bounds what the sidecar holds for the broker while it
// is unreachable: publishes are buffered up to it (nats.go's reconnect
// buffer, or Link.Publish's before the broker was first reached), then
// refused with an error the application sees, and counted. nats.go's own
// default is the same 8 MiB; it is set explicitly so that it is a
// documented limit, not an inherited one.
const OutageBufferBytes = 8 << 20

// ReconnectWait and ReconnectJitter pace the attempts to reach the broker:
// one every ReconnectWait plus up to ReconnectJitter, for as long as it
// takes.
//
// nats.go's defaults (2 s plus up to 100 ms) kept traffic away for 1.05 s
// after a broker that had been gone for 1 s was back (measured at 1,000
// messages/s): the sidecar was still waiting out its 2 s. The target is
// 250 ms. Once connected, the sidecar needs 30 to 70 ms more (with the race
// detector, on two busy cores) to renew its subscriptions and deliver what
// it buffered during the outage; at most 100 ms of waiting keeps the whole
// well inside the target (measured: 30 to 150 ms; 100 ms plus up to 50 ms
// of waiting reached 226 ms). A try at a broker that is not listening costs
// a refused dial (a SYN and a RST), so ten to twenty a second per sidecar
// are cheap.
//
// The jitter spreads the sidecars that lost the same broker at the same
// instant, so that they do not all arrive at once when it is back. The
// sidecar dials without TLS today; with TLS, whose handshakes cost the
// broker far more, nats.go's own TLS jitter (1 s) would deserve a second
// look before copying this one.
const (
	ReconnectWait   = 50 * time.Millisecond
	ReconnectJitter = 50 * time.Millisecond
)

// ConnectOptions are the nats.go options every sidecar connects with: start
// even when the broker is not there yet, and keep reconnecting, at once (the
// broker is the sidecar's reason to exist); a bounded outage buffer; and a
// name the broker's monitoring shows. A Link adds its handlers (Options).
func ConnectOptions() []nats.Option {
	return []nats.Option{
		nats.Name("weighstation-sidecar"),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(ReconnectWait),
		nats.ReconnectJitter(ReconnectJitter, ReconnectJitter),
		nats.ReconnectBufSize(OutageBufferBytes),
	}
}

// ErrHoldFull is returned by Link.Publish when the broker has never been
// reached and OutageBufferBytes of publishes already wait for it. It wraps
// nats.ErrReconnectBufExceeded, nats.go's error for the same limit once the
// broker was reached.
var ErrHoldFull = fmt.Errorf("the broker has not been reached yet and %d bytes of publishes wait for it: %w", OutageBufferBytes, nats.ErrReconnectBufExceeded)

// Link is the sidecar's view of its one broker connection: it logs the
// connection's losses and returns and counts the returns, and it holds the
// application's publishes until the broker is first reached (Publish says
// why).
//
// Make it with NewLink before connecting, pass its Options to nats.Connect,
// then Attach the connection; its other methods need the connection.
type Link struct {
	log logr.Logger

	// reached is set once the broker was first reached and every held
	// publish was handed to nats.go; from then on Publish is nats.go's.
	reached atomic.Bool
	// reconnects counts the connection's returns after a loss (the first
	// connection is not one).
	reconnects atomic.Uint64
	// unsent counts held publishes that never left: the broker refused
	// them when it was reached (over its max_payload), or the connection
	// closed first.
	unsent atomic.Uint64

	mu        sync.Mutex
	nc        *nats.Conn
	onConnect func()
	held      []*nats.Msg
	heldBytes int
	// announced is set once the first connection was logged, which both
	// Attach and the connect handler may see.
	announced bool
	lostAt    time.Time // when the connection was last lost
}

// NewLink returns a Link that logs to log.
func NewLink(log logr.Logger) *Link {
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	return &Link{log: log}
}

// Options are the nats.Connect options the Link needs at connect time:
// nats.go reports the first connection of a connection that was still
// retrying (RetryOnFailedConnect) only to a ConnectHandler given there, and
// that handler cannot be set afterwards. The other handlers are set by
// Attach.
func (l *Link) Options() []nats.Option {
	return []nats.Option{nats.ConnectHandler(l.connected)}
}

// Attach makes nc the Link's connection. It replaces nc's disconnect,
// reconnect and closed handlers. onConnect (which may be nil) runs after
// every later connection to the broker, the first one included, on nats.go's
// callback goroutine; a connection already up when Attach is called is the
// caller's to notice. A connection made without the Link's Options still
// works: its held publishes are then released by the next Publish after the
// broker is first reached, instead of at once.
func (l *Link) Attach(nc *nats.Conn, onConnect func()) {
	l.mu.Lock()
	l.nc, l.onConnect = nc, onConnect
	l.mu.Unlock()
	nc.SetDisconnectErrHandler(l.disconnected)
	nc.SetReconnectHandler(l.reconnected)
	nc.SetClosedHandler(l.closed)
	// Set the handlers before looking, so that a connection made in
	// between is seen at least once (announce logs it once).
	if nc.IsConnected() {
		l.mu.Lock()
		l.releaseLocked()
		l.announceLocked()
		l.mu.Unlock()
	}
}

// Connected reports whether the connection to the broker is up now.
func (l *Link) Connected() bool { return l.nc.IsConnected() }

// Reconnects is the number of times the connection came back after it was
// lost; nats.go resubscribed each time.
func (l *Link) Reconnects() uint64 { return l.reconnects.Load() }

// Unsent is the number of publishes Publish held before the broker was
// first reached that never left: the broker refused them (over its
// max_payload), or the connection closed first.
func (l *Link) Unsent() uint64 { return l.unsent.Load() }

// Publish hands m to the broker: to nats.go, which sends it or, during an
// outage, buffers it up to OutageBufferBytes and then refuses it.
//
// Until the broker is first reached, Publish holds m itself, within the
// same OutageBufferBytes: before nats.go has seen the broker's INFO it
// refuses every message with headers (it cannot know the broker supports
// them), and the sidecar stamps most messages with one. Held messages are
// released, in order, as soon as the broker is reached, and before any
// later publish. m is copied: the caller may reuse its buffers at once.
func (l *Link) Publish(m *nats.Msg) error {
	if l.reached.Load() {
		return l.nc.PublishMsg(m)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.reached.Load() && l.nc.IsConnected() {
		l.releaseLocked() // the connect handler is on its way, or was not given
	}
	if l.reached.Load() {
		return l.nc.PublishMsg(m)
	}
	size := msgSize(m)
	if l.heldBytes+size > OutageBufferBytes {
		return ErrHoldFull
	}
	l.held = append(l.held, &nats.Msg{Subject: m.Subject, Reply: m.Reply, Header: cloneHeader(m.Header), Data: slices.Clone(m.Data)})
	l.heldBytes += size
	return nil
}

// releaseLocked hands the held publishes to nats.go, in order, and from then
// on lets Publish go straight to it. It holds l.mu, so no later publish can
// overtake a held one.
func (l *Link) releaseLocked() {
	if l.reached.Load() {
		return
	}
	var unsent uint64
	var lastErr error
	for _, m := range l.held {
		if err := l.nc.PublishMsg(m); err != nil {
			unsent++
			lastErr = err
		}
	}
	if unsent > 0 {
		l.unsent.Add(unsent)
		l.log.Error(lastErr, "the broker refused publishes held until it was reached", "refused", unsent, "held", len(l.held))
	}
	l.held, l.heldBytes = nil, 0
	l.reached.Store(true)
}

// announceLocked logs the first connection, once.
func (l *Link) announceLocked() {
	if l.announced {
		return
	}
	l.announced = true
	l.log.Info("connected to the broker", "url", l.nc.ConnectedUrlRedacted(), "server", l.nc.ConnectedServerName(), "version", l.nc.ConnectedServerVersion())
}

// connected is nats.go's ConnectHandler: the first connection, whether at
// once or after retrying.
func (l *Link) connected(nc *nats.Conn) {
	l.mu.Lock()
	if l.nc == nil {
		l.mu.Unlock()
		return // not attached yet: Attach will see the connection up
	}
	l.releaseLocked()
	l.announceLocked()
	onConnect := l.onConnect
	l.mu.Unlock()
	if onConnect != nil {
		onConnect()
	}
}

// reconnected is nats.go's ReconnectHandler: the connection is back, and
// nats.go has resubscribed and sent what it buffered during the outage.
func (l *Link) reconnected(nc *nats.Conn) {
	n := l.reconnects.Add(1)
	l.mu.Lock()
	l.releaseLocked() // in case the first connection was made before Attach and lost since
	var outage time.Duration
	if !l.lostAt.IsZero() {
		outage = time.Since(l.lostAt)
	}
	onConnect := l.onConnect
	l.mu.Unlock()
	l.log.Info("reconnected to the broker; subscriptions renewed", "url", nc.ConnectedUrlRedacted(), "server", nc.ConnectedServerName(),
		"outage", outage.String(), "reconnects", n)
	if onConnect != nil {
		onConnect()
	}
}

// disconnected is nats.go's DisconnectErrHandler. It also runs when the
// connection is closed on purpose; closed logs that.
func (l *Link) disconnected(nc *nats.Conn, err error) {
	if nc.IsClosed() {
		return
	}
	l.mu.Lock()
	l.lostAt = time.Now()
	l.mu.Unlock()
	reason := "the connection ended"
	if err != nil {
		reason = err.Error()
	}
	// Info, not Error: a broker restart is routine, and zap would add a
	// stack trace that says nothing about it.
	l.log.Info("disconnected from the broker; reconnecting, publishes buffered meanwhile", "reason", reason,
		"retryEvery", ReconnectWait.String(), "outageBufferBytes", OutageBufferBytes)
}

// closed is nats.go's ClosedHandler: the connection is gone for good (the
// sidecar is stopping; it never gives up reconnecting by itself).
func (l *Link) closed(*nats.Conn) {
	l.mu.Lock()
	if n := len(l.held); n > 0 {
		l.unsent.Add(uint64(n))
		l.held, l.heldBytes = nil, 0
	}
	l.mu.Unlock()
	l.log.Info("connection to the broker closed")
}

// msgSize is about what nats.go counts for m in its reconnect buffer: the
// protocol line's subject and reply, the headers and the payload.
func msgSize(m *nats.Msg) int {
	n := len(m.Subject) + len(m.Reply) + len(m.Data) + 32
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

func cloneHeader(h nats.Header) nats.Header {
	if h == nil {
		return nil
	}
	out := make(nats.Header, len(h))
	for k, vs := range h {
		out[k] = slices.Clone(vs)
	}
	return out
}
