package upstream

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/weighstation/weighstation/sidecar/rawsock"
)

// OutageBufferBytes bounds the publishes the connection holds while the
// broker is away (before it is first reached, and between a loss and the
// reconnect): nats.go's ReconnectBufSize default. Past it, a publish is
// refused with ErrOutageBufferFull.
const OutageBufferBytes = 8 << 20

// MaxPendingBytes bounds what waits for the socket while the broker is
// connected. A publisher past it waits for the writer (Publish does not
// return), so that it stops reading its own client and TCP pushes back on
// the application, instead of the sidecar buffering without bound.
const MaxPendingBytes = 8 << 20

// HandoffBacklogBytes bounds what a caller of WriteSoon leaves waiting
// behind a write in progress before it is held (it waits for the write, or
// writes itself): a few of a streaming reader's reads, and well under
// maxSpareBuffer, so that the buffers it fills are kept for reuse.
const HandoffBacklogBytes = 256 << 10

// RenewOverlap is DefaultOptions' overlap of a renewal's two connections
// (longer while the broker answers slowly, up to DialTimeout): past a
// broker goroutine that waited a few of Go's 10 ms time slices for a CPU,
// for a tenth of a second's messages delivered twice, once per renewal.
const RenewOverlap = 100 * time.Millisecond

// Reconnection: every ReconnectWait plus up to ReconnectJitter, for ever,
// as nats.go does with MaxReconnects(-1). A restarted broker is reached
// within about 100 ms of its return.
const (
	ReconnectWait   = 50 * time.Millisecond
	ReconnectJitter = 50 * time.Millisecond
	// ConnectTimeout is DefaultOptions' bound on a TCP connect: past it the
	// attempt is given up and the next one, ReconnectWait later, is a new
	// SYN, which the Service may route to a live broker.
	ConnectTimeout = 500 * time.Millisecond
)

// Options configure the connection to the broker. DefaultOptions documents
// the values.
type Options struct {
	// URL is the broker's: nats://host:port, or tls://host:port to
	// require TLS. User information in it (nats://user:pass@ or
	// nats://token@) is a credential when Credentials gives none.
	URL string
	// Name is the connection's name in the broker's monitoring.
	Name string
	// Credentials present the sidecar to the broker.
	Credentials Credentials
	// TLS, when set, is used for the connection (its RootCAs verify the
	// broker); the broker must then offer TLS. Nil: TLS only when the
	// broker requires it or the URL says tls://, with the system's roots.
	TLS *tls.Config
	// DialTimeout bounds one attempt: TCP, TLS, and the broker's answer to
	// CONNECT.
	DialTimeout time.Duration
	// ConnectTimeout bounds the attempt's TCP connect alone (within
	// DialTimeout; zero: DialTimeout). A connect in the cluster takes
	// milliseconds; one that takes longer went to a broker pod that is
	// gone, whose address the brokers' Service still routes to until
	// kube-proxy catches up (about a second), and whose SYNs nothing
	// answers. Found on a real node: a sidecar whose first reconnection
	// after a broker's deletion went there waited out the whole
	// DialTimeout (2 s) before its next attempt reached a live broker.
	ConnectTimeout time.Duration
	// ReconnectWait and ReconnectJitter space the attempts.
	ReconnectWait, ReconnectJitter time.Duration
	// OutageBufferBytes bounds publishes held while the broker is away.
	OutageBufferBytes int
	// MaxPendingBytes bounds what waits for the socket while connected.
	MaxPendingBytes int
	// HandoffBacklogBytes bounds what WriteSoon leaves waiting behind a
	// write in progress; at most MaxPendingBytes.
	HandoffBacklogBytes int
	// PingInterval is how often an idle connection is checked; after
	// MaxPingsOut unanswered PINGs it is taken for dead and replaced.
	PingInterval time.Duration
	MaxPingsOut  int
	// ConfirmInterval is how often, at most, the writer asks the broker to
	// confirm what it received (a PING after a write). Messages written
	// since the last confirmation when the connection is lost are counted
	// as in doubt (InDoubt): they may or may not have reached the broker.
	ConfirmInterval time.Duration
	// RenewOverlap is how long, at least, a renewal (Renew) keeps the old
	// connection subscribed once the new one is: a message whose routing
	// the broker began before the new connection's SUB and ends after the
	// old one's UNSUB would go to neither. Messages that arrive on the old
	// connection meanwhile are counted as possible duplicates.
	RenewOverlap time.Duration
	// Log receives the connection's losses and returns.
	Log logr.Logger
	// OnRefused, when set, is called with each refusal of the credential
	// by the broker (an authorization violation at connection: revoked,
	// expired), on the reconnection goroutine; it must not block. The
	// sidecar asks the operator for a new credential there.
	OnRefused func(error)
}

// DefaultOptions: nats.go's reconnection and ping defaults (2 minutes, 2
// outstanding), its 8 MiB reconnect buffer, 2 s per connection attempt, and
// a confirmation at most every 20 ms while messages flow.
var DefaultOptions = Options{
	Name:                "weighstation-sidecar",
	DialTimeout:         2 * time.Second,
	ConnectTimeout:      ConnectTimeout,
	ReconnectWait:       ReconnectWait,
	ReconnectJitter:     ReconnectJitter,
	OutageBufferBytes:   OutageBufferBytes,
	MaxPendingBytes:     MaxPendingBytes,
	HandoffBacklogBytes: HandoffBacklogBytes,
	PingInterval:        2 * time.Minute,
	MaxPingsOut:         2,
	ConfirmInterval:     20 * time.Millisecond,
	RenewOverlap:        RenewOverlap,
	Log:                 logr.Discard(),
}

// Errors a publish or flush can return.
var (
	// ErrOutageBufferFull: the broker is away and OutageBufferBytes of
	// publishes already wait for it.
	ErrOutageBufferFull = errors.New("the broker is unavailable and the outage buffer is full")
	// ErrMaxPayload: the message is larger than the broker's max_payload.
	ErrMaxPayload = errors.New("the message exceeds the broker's max_payload")
	// ErrNotConnected: a flush while the broker is away.
	ErrNotConnected = errors.New("the broker is not connected")
	// ErrClosed: the connection was closed (Close).
	ErrClosed = errors.New("the connection to the broker is closed")
	// ErrFlushTimeout: the broker did not confirm in time.
	ErrFlushTimeout = errors.New("the broker did not confirm in time")
	// ErrPendingFull: a publish that must not wait found MaxPendingBytes
	// waiting for the socket.
	ErrPendingFull = errors.New("the connection to the broker is backed up")
)

// Client is the sidecar's one connection to the broker. It speaks the NATS
// client protocol itself: one reader parses the broker's messages in place
// and hands them to their subscription's handler; publishes are appended
// to an outbound buffer, written with one writev per wake-up by whichever
// goroutine finds the socket free (the publisher itself, when nothing is
// queued). It reconnects for ever, renews its subscriptions, and holds
// publishes meanwhile, bounded. Renew moves it to a new connection without
// a gap (a renewed credential).
//
// Lock order: renewMu, then dispatch, then mu, then subsMu. Neither mu nor
// subsMu is held while a handler runs or a socket is written; dispatch is
// the reader's turn to hand messages over, held while handlers run (so
// that two readers during a renewal take turns), never while a reader
// waits for its socket.
type Client struct {
	opts   Options
	server *url.URL

	info atomic.Pointer[ServerInfo] // the last broker's INFO; nil before the first

	reconnects atomic.Uint64
	unsent     atomic.Uint64
	inDoubt    atomic.Uint64
	// Writes to the broker's socket, by who wrote (Writes).
	callerWrites, writerWrites atomic.Uint64
	// WriteSoon calls, and those of them held by the backlog (Handoffs).
	handoffs, handoffsHeld atomic.Uint64
	// beforeRead runs on the reader before each read from the broker
	// (SetBeforeRead).
	beforeRead atomic.Pointer[func()]
	connects   atomic.Uint64
	// duplicates are messages that arrived on a renewal's old connection
	// while the new one may have carried them too (Duplicates).
	duplicates atomic.Uint64

	// renewMu makes one Renew at a time.
	renewMu mutex
	// dispatch is held by the reader that hands messages to the handlers
	// and runs the beforeRead hook (readLoop, hookedReader).
	dispatch mutex

	subsMu  rwMutex
	subs    map[uint64]*Subscription
	nextSID atomic.Uint64

	mu   mutex
	room *sync.Cond // signalled when the writer made room, or the connection changed
	// conn is the live connection, nil while the broker is away; live is
	// it with its reader.
	conn net.Conn
	live *link
	// pending is a renewal's new connection before it is made the live
	// one; draining, the old one after, until it is drained. held is set
	// from the switch until the broker confirmed the old connection's
	// last publishes: those published since wait (writeLocked).
	pending, draining *link
	held              bool
	// connWriter writes conn with raw system calls (package rawsock); nil
	// when conn is not a socket (TLS). Only the goroutine that set writing
	// uses it.
	connWriter *rawsock.Writer
	// readerStopped is closed when the live (or last) connection's reader
	// has returned; the next handshake waits for it.
	readerStopped chan struct{}
	// ctl are control lines (SUB, UNSUB, PONG) for the live connection;
	// they go before out in each write and are dropped with the
	// connection (its subscriptions are renewed whole on the next).
	ctl []byte
	// out are publishes, in order; they survive a lost connection.
	out     []byte
	outMsgs int // publishes in out
	// heldMax is the largest payload in out taken while disconnected,
	// checked against the next broker's max_payload.
	heldMax int
	// spare buffers for the next ctl and out, so that writes do not
	// allocate.
	spareCtl, spareOut []byte
	writing            bool // a goroutine is writing the socket
	deferred           bool // someone asked for a write while one was under way (writeLocked)
	iov                net.Buffers
	iovArray           [3][]byte
	// deadlineOn and deadlineSet are the connection whose write deadline
	// the writing goroutine last set, and when (writeBlocking).
	deadlineOn  net.Conn
	deadlineSet time.Time
	// waiting are flushes to confirm with the next PING; sent are the
	// PINGs on the wire, in order, each with what its PONG confirms.
	waiting     []func(error)
	pingWanted  bool
	sent        []ping
	unconfirmed int       // messages written since the last PING
	lastPing    time.Time // when the last confirming PING was written
	// confirmArmed: the writer's timer will ask the broker to confirm
	// messages written without a PING.
	confirmArmed bool
	pingsOut     int // liveness PINGs unanswered
	onConnect    []func()
	announced    bool
	lostAt       time.Time
	lastAuthErr  string
	closed       bool

	wake      chan struct{} // the writer has work
	reconnect chan struct{} // the connection was lost
	done      chan struct{}
	wg        sync.WaitGroup
}

// ping is one PING on the wire: its PONG confirms the messages written
// before it and completes its waiters.
type ping struct {
	confirms int
	waiters  []func(error)
	// release: on a renewal's old connection, its PONG lets the
	// publishes held since the switch go on the new one.
	release bool
}

// Dial makes a client and tries the broker once, within DialTimeout. A
// broker that is not there is not an error: the client keeps trying in the
// background and holds publishes meanwhile. Only invalid options are.
func Dial(opts Options) (*Client, error) {
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	if opts.ReconnectJitter < 0 {
		return nil, fmt.Errorf("broker connection options: ReconnectJitter must not be negative, got %s", opts.ReconnectJitter)
	}
	if opts.RenewOverlap < 0 {
		return nil, fmt.Errorf("broker connection options: RenewOverlap must not be negative, got %s", opts.RenewOverlap)
	}
	if opts.ConnectTimeout < 0 {
		return nil, fmt.Errorf("broker connection options: ConnectTimeout must not be negative, got %s", opts.ConnectTimeout)
	}
	for _, limit := range []struct {
		name     string
		positive bool
		value    any
	}{
		{"DialTimeout", opts.DialTimeout > 0, opts.DialTimeout},
		{"ReconnectWait", opts.ReconnectWait > 0, opts.ReconnectWait},
		{"OutageBufferBytes", opts.OutageBufferBytes >= 1, opts.OutageBufferBytes},
		{"MaxPendingBytes", opts.MaxPendingBytes >= 1, opts.MaxPendingBytes},
		{"PingInterval", opts.PingInterval > 0, opts.PingInterval},
		{"MaxPingsOut", opts.MaxPingsOut >= 1, opts.MaxPingsOut},
		{"ConfirmInterval", opts.ConfirmInterval > 0, opts.ConfirmInterval},
	} {
		if !limit.positive {
			return nil, fmt.Errorf("broker connection options: %s must be positive, got %v", limit.name, limit.value)
		}
	}
	if opts.HandoffBacklogBytes < 1 || opts.HandoffBacklogBytes > opts.MaxPendingBytes {
		return nil, fmt.Errorf("broker connection options: HandoffBacklogBytes must be between 1 and MaxPendingBytes (%d), got %d", opts.MaxPendingBytes, opts.HandoffBacklogBytes)
	}
	server, err := parseURL(opts.URL)
	if err != nil {
		return nil, err
	}
	c := &Client{opts: opts, server: server, subs: map[uint64]*Subscription{}, wake: make(chan struct{}, 1),
		reconnect: make(chan struct{}, 1), done: make(chan struct{})}
	c.room = sync.NewCond(&c.mu)
	if err := c.connect(); err != nil {
		c.noteFailure(err)
	}
	c.wg.Add(2)
	go c.writeLoop()
	go c.keepConnected()
	return c, nil
}

// parseURL checks a broker URL: nats:// or tls://, with a host and port
// (4222 when none is given, as nats.go assumes).
func parseURL(raw string) (*url.URL, error) {
	if !strings.Contains(raw, "://") {
		raw = "nats://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text repeats the URL, password included
		}
		return nil, fmt.Errorf("-broker %q: %w", redactURL(raw), err)
	}
	switch u.Scheme {
	case "nats", "tls":
	default:
		return nil, fmt.Errorf("-broker %q: the scheme must be nats:// or tls://", u.Redacted())
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("-broker %q names no host", u.Redacted())
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), "4222")
	}
	return u, nil
}

// redactURL hides what lies between a URL's scheme and its last '@' (a
// user and password), for a URL that does not parse.
func redactURL(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	at := strings.LastIndexByte(rest, '@')
	if !ok || at < 0 {
		return raw
	}
	return scheme + "://xxxxx" + rest[at:]
}

// OnConnect registers f to run after every connection to the broker, the
// first included (the broker's version and max_payload may be new). When
// the client is connected already, f is not run for that connection.
func (c *Client) OnConnect(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onConnect = append(c.onConnect, f)
}

// SetBeforeRead registers f to run on the reader goroutine before each
// read from the broker's socket: every frame read so far has been handed
// to its subscription's handler, and the reader may wait for more. It is
// the moment to write out what those frames produced, as nats-server's
// read loop flushes its clients. It runs too before the reads of a
// reconnection's handshake, once the previous reader has stopped (connect
// waits for it), so that nothing runs it concurrently; and once when a
// reader stops, before the loss is handled. f must not block.
func (c *Client) SetBeforeRead(f func()) { c.beforeRead.Store(&f) }

// ServerInfo is what the sidecar uses of the broker's INFO.
type ServerInfo struct {
	ServerID     string `json:"server_id"`
	ServerName   string `json:"server_name"`
	Version      string `json:"version"`
	MaxPayload   int64  `json:"max_payload"`
	Headers      bool   `json:"headers"`
	TLSRequired  bool   `json:"tls_required"`
	AuthRequired bool   `json:"auth_required"`
	Nonce        string `json:"nonce"`
}

// Connected reports whether the broker is connected now.
func (c *Client) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn != nil
}

// Reconnects is how often the connection came back after it was lost (the
// first connection does not count).
func (c *Client) Reconnects() uint64 { return c.reconnects.Load() }

// Unsent is the number of held publishes the broker refused when it was
// reached: larger than its max_payload.
func (c *Client) Unsent() uint64 { return c.unsent.Load() }

// InDoubt is the number of publishes written to a connection that was lost
// before the broker confirmed them: they may or may not have arrived.
func (c *Client) InDoubt() uint64 { return c.inDoubt.Load() }

// Duplicates is the number of messages that arrived on a renewal's old
// connection while the new one may have carried them too (Renew): each
// may have been handed to its handler twice.
func (c *Client) Duplicates() uint64 { return c.duplicates.Load() }

// Writes is the number of writes to the broker's socket, by who wrote:
// the goroutines that queued (publishers that write when they would read
// or wait) and the client's writer goroutine (control lines, confirmations,
// answers from the reader, WriteSoon).
func (c *Client) Writes() (byCaller, byWriter uint64) {
	return c.callerWrites.Load(), c.writerWrites.Load()
}

// Handoffs is the number of WriteSoon calls, and of those that found
// HandoffBacklogBytes queued and so waited for the writer or wrote
// themselves.
func (c *Client) Handoffs() (all, held uint64) { return c.handoffs.Load(), c.handoffsHeld.Load() }

// MaxPayload is the broker's max_payload, 0 before it was first reached.
func (c *Client) MaxPayload() int64 {
	if i := c.info.Load(); i != nil {
		return i.MaxPayload
	}
	return 0
}

// ServerVersion is the broker's version, "" before it was first reached.
func (c *Client) ServerVersion() string {
	if i := c.info.Load(); i != nil {
		return i.Version
	}
	return ""
}

// Buffered is the bytes waiting to be written (or held for the broker).
func (c *Client) Buffered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ctl) + len(c.out)
}

// URL is the broker's address without credentials, for logs.
func (c *Client) URL() string { return c.server.Scheme + "://" + c.server.Host }

// Close closes the connection. Publishes still held are counted as unsent.
func (c *Client) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	close(c.done)
	conn := c.conn
	c.conn, c.connWriter, c.live = nil, nil, nil
	// A renewal's connections go too: the new one before its switch, the
	// old one while it drains (what it carried unconfirmed is in doubt).
	var others []net.Conn
	if p := c.pending; p != nil {
		others = append(others, p.conn)
		c.pending = nil
	}
	var drainDoubt int
	var drainWaiters []func(error)
	if d := c.draining; d != nil {
		others = append(others, d.conn)
		drainDoubt, drainWaiters = d.takePings()
		c.endDrainLocked(d, ErrClosed)
	}
	c.inDoubt.Add(uint64(drainDoubt))
	if c.outMsgs > 0 {
		c.unsent.Add(uint64(c.outMsgs))
	}
	c.out, c.outMsgs = nil, 0
	// lost does not count these once the client is closed.
	c.inDoubt.Add(uint64(c.takeInDoubtLocked()))
	waiters := c.failPingsLocked()
	c.room.Broadcast()
	c.mu.Unlock()
	if conn != nil {
		_ = conn.Close()
	}
	for _, other := range others {
		_ = other.Close()
	}
	for _, w := range append(waiters, drainWaiters...) {
		w(ErrClosed)
	}
	c.wg.Wait()
	c.opts.Log.Info("connection to the broker closed")
}
