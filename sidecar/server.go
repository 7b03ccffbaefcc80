// Package sidecar is the NATS-protocol proxy that sits beside an
// application: it listens where the application expects a NATS server,
// forwards publishes to the broker over one upstream connection, and
// delivers the broker's messages to the application's subscriptions through
// bounded queues, one per subscription, so that an application that stops
// reading can only fill its own queues.
//
// Around that core: per-Topic limits and quotas (package policy), kill
// switches and their circuit breakers (killswitch.go, package breaker),
// subject ACLs (access.go), latency histograms (package latency) and
// configuration (SetConfig; package configfile).
//
// The parts: Server (server.go) is the composition root: options,
// configuration, the listener and the connections. sidecar/upstream owns
// the broker's protocol, its subscription ids and reconnection; deliver.go
// takes each of the broker's messages off its socket (one copy, shared by
// a fan-out) and router.go hands it to the local subscriptions (fan-out,
// queue groups, echo:false). conn.go reads an application's commands;
// connwrite.go writes to it, inline from the upstream reader when the
// application keeps up; readbuffers.go charges its read buffer to the
// memory budget, and inbox.go translates its inboxes into the pod's own
// inbox space. telemetry.go holds what is counted and timed
// outside the queues and the Topics. killswitch.go's killSwitches own the
// kill switches and their breakers' loop: the Server asks them through
// killSwitchBoard, and they apply a switch to the local SUBs through the
// Server (killSwitchHost).
//
// The lock order is lockorder.go's table.
package sidecar

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar/pending"
	"github.com/weighstation/weighstation/sidecar/policy"
	"github.com/weighstation/weighstation/sidecar/protocol"
	"github.com/weighstation/weighstation/sidecar/upstream"
)

// Options configure a sidecar. Every limit is explicit; DefaultOptions
// documents the values.
type Options struct {
	// Listen is where applications connect.
	Listen string
	// Protocol bounds each connection's control lines and bodies. The
	// payload limit advertised to clients is the smaller of
	// Protocol.MaxPayload and the broker's max_payload.
	Protocol protocol.Limits
	// MaxConnections bounds the application connections at once.
	MaxConnections int
	// Queue bounds each local subscription's pending messages.
	Queue pending.Limits
	// MaxControlBytes bounds a connection's queued control replies (PONG,
	// +OK, -ERR); a client that lets them pile up is closed as a slow
	// consumer.
	MaxControlBytes int
	// WriteBatchBytes is how much a connection's writer gathers into one
	// socket write.
	WriteBatchBytes int
	// UpstreamFlushTimeout bounds how long a client's PING waits for the
	// broker to confirm what the client sent before it.
	UpstreamFlushTimeout time.Duration
	// ConnectTimeout is how long a new connection has to send CONNECT.
	ConnectTimeout time.Duration
	// MaxSubscriptions bounds one connection's SUBs (nats-server's
	// max_subscriptions); past it, a SUB is refused and the connection kept.
	MaxSubscriptions int
	// MaxPendingBytesPerConnection bounds the bytes one connection's
	// subscriptions hold together, so one connection cannot take the whole
	// memory budget.
	MaxPendingBytesPerConnection int64
	// MemoryBudget bounds the bytes all local subscriptions' queues hold
	// together, the application connections' read buffers past their
	// first protocol.InitialReadBuffer bytes each (readbuffers.go), and
	// what each SUB holds (subscriptionBytes); past it, non-essential
	// subscriptions are shed first.
	MemoryBudget int64
	// ReadBudgetWait is how long a PUB or HPUB whose body does not fit the
	// read buffer waits for MemoryBudget to have room for it (a client
	// that announces large bodies on many connections is slowed); past
	// it, the body is skipped unread and the publish refused, the
	// connection kept.
	ReadBudgetWait time.Duration
	// MaxIdle is how long one command may take to arrive, so that a client
	// that dribbles a line (a slow-loris) or falls silent is closed. Stock
	// clients PING every 2 minutes, so an idle but healthy one never hits
	// it. The reader renews its deadline as an idle timer, not for every
	// command, so a command is closed after between 15/16 of MaxIdle and
	// MaxIdle (ConnectTimeout likewise).
	MaxIdle time.Duration
	// KillSwitchInterval is how often the automatic kill switches judge
	// their subscriptions (and unanswered requests are timed out).
	KillSwitchInterval time.Duration
	// AppSendBuffer, when positive, sets the kernel send buffer (SO_SNDBUF)
	// of each application connection, in bytes (Linux doubles it for its
	// bookkeeping). Zero leaves the kernel's autotuning, which on loopback
	// grows to megabytes: seconds of messages that wait in the kernel, where
	// no limit, drop count or latency of the sidecar sees them. A bound
	// keeps the queueing in the sidecar, where it is governed and measured.
	// It bounds the connection's write batches too (to the smaller of it
	// and WriteBatchBytes): a batch's messages are measured when its write
	// returns, so a batch larger than the kernel takes at once would be
	// measured late while the application already read its first messages.
	AppSendBuffer int
	// OverlapUpstreamWrites hands a connection's publishes to the upstream
	// writer goroutine, instead of writing them to the broker on the
	// connection's own reader, when the reader's last read filled all the
	// room it had (the application sends faster than it is read): the
	// write into the broker's socket then overlaps the next read on
	// another core, as nats-server's readLoop leaves flushes to its
	// writeLoop. A reader that is not behind writes inline either way, so
	// a lone publish costs no wake-up. It is for machines with cores to
	// spare; on 2 cores it costs about what it saves (BenchmarkPublishBurst,
	// docs/benchmarks.md), and until it is measured where it should pay it
	// is off by default.
	OverlapUpstreamWrites bool
	// InboxPrefix returns the pod's inbox space at the broker
	// ("_INBOX.<token of this pod>"), into which the sidecar translates
	// its applications' inboxes (inbox.go): the broker credential's
	// inbox_prefix, to which the broker pins the credential's
	// subscriptions. ok is false until the credential arrived; "" with ok,
	// or a nil InboxPrefix (a token or nkey, whose permissions pin no
	// inbox), has the sidecar make one of its own, a random token per
	// process. The sidecar takes it once, on first use.
	InboxPrefix func() (prefix string, ok bool)
	// Log receives kill switch changes and configuration events.
	Log logr.Logger
}

// DefaultOptions: nats-server's protocol defaults, 256 connections (a pod
// runs one application), the Subscription defaults of the API (1,000
// messages or 8 MiB per subscription, dropping the newest), 64 KiB of
// control replies, 64 KiB write batches, 2 s for the broker to confirm
// before a PONG (nats.go's own Flush waits 10 s), 2 s to send CONNECT
// (nats-server's auth timeout), 5 minutes for any command to arrive, and a
// 64 MiB memory budget for all pending messages, grown read buffers and
// SUBs (a sidecar's container limit should leave room for it and its fixed
// overhead, docs/sidecar.md "Memory"), 2 s for a large
// body to wait for room in it (as long as a PONG waits for the broker),
// 10,000 SUBs and 32 MiB of pending
// messages per connection, and kill switches judged every 50 ms.
var DefaultOptions = Options{
	Listen:               "127.0.0.1:4222",
	Protocol:             protocol.DefaultLimits,
	MaxConnections:       256,
	Queue:                pending.Limits{MaxMessages: meshconfig.DefaultMaxPendingMessages, MaxBytes: meshconfig.DefaultMaxPendingBytes, Overflow: pending.DropNewest},
	MaxControlBytes:      64 << 10,
	WriteBatchBytes:      64 << 10,
	UpstreamFlushTimeout: 2 * time.Second,
	ConnectTimeout:       2 * time.Second,
	MaxIdle:              5 * time.Minute,
	MemoryBudget:         64 << 20,
	ReadBudgetWait:       2 * time.Second,
	MaxSubscriptions:     10_000,
	KillSwitchInterval:   50 * time.Millisecond,
	Log:                  logr.Discard(),

	MaxPendingBytesPerConnection: 32 << 20,
}

// Server is a running sidecar.
type Server struct {
	opts     Options
	up       *upstream.Client
	interest *upstream.Interest
	ln       net.Listener

	// policy and info change together with the configuration; readers
	// load them without locks.
	policy   atomic.Pointer[policy.Publish]
	info     atomic.Pointer[[]byte]
	counters *policy.Counters
	// configMu serializes configuration changes.
	configMu mutex[configRank]
	// configured is set by the first SetConfig: the defaults New installs
	// do not count (HasConfig).
	configured atomic.Bool
	// brokerVersion is the version INFO gives: the broker's, or the last
	// one known while it is away, or versionBeforeBroker. Under configMu.
	brokerVersion string

	// interestMu serializes changes of upstream interest: SUBs, UNSUBs and
	// kill switches (which withdraw and restore it).
	interestMu mutex[interestRank]
	// kills are the kill switches and their breakers' loop (killswitch.go).
	kills killSwitchBoard
	// answerable are the requests delivered to the application and not yet
	// answered.
	answerable *answerable

	stop chan struct{}

	// draining is set when Shutdown begins: no new connection, and no new
	// interest under a Subscription; final once its grace period is over:
	// no new SUB at all, and what is left is dropped as shutdown.
	draining, final atomic.Bool

	// access remembers ACL verdicts; audit what audit mode logged.
	access accessCounters
	audit  auditLog

	// router hands the broker's messages to local subscriptions.
	router *router
	// telemetry counts and times what the queues and Topics do not.
	telemetry

	// connsMu guards conns and closed.
	connsMu mutex[connsRank]
	conns   map[*conn]struct{}
	closed  bool
	wg      sync.WaitGroup

	// id prefixes this sidecar's OriginHeader values; nextConnID numbers
	// its connections for them.
	id         string
	nextConnID atomic.Uint64

	// budget bounds every queue's bytes together, and the read buffers'
	// past their initial size (readBuffers).
	budget      *pending.Budget
	readBuffers *readBuffers

	// retiredMu guards retired and settling, and each SUB's move between
	// live (listed, not removed), settling and retired, so that
	// PolicyTotals finds every SUB in exactly one of them.
	retiredMu mutex[retiredRank]
	retired   map[string]pending.Counts // retired SUBs' final counts, and rebound SUBs' counts before, by policy
	settling  map[*localSub]struct{}    // removed SUBs with messages still in flight

	// deliverScratch holds a header block without its reserved lines while
	// deliver copies it (the upstream reader's alone).
	deliverScratch []byte

	// inbox is the pod's inbox space, once known (podInbox); inboxMu
	// orders its latching with inboxWaiting, the inbox SUBs made before
	// (deferInboxSub).
	inbox        atomic.Pointer[string]
	inboxMu      mutex[inboxRank]
	inboxWaiting []*localSub
}

// BudgetUsed is the bytes all pending messages hold now, of MemoryBudget.
func (s *Server) BudgetUsed() int64 { return s.budget.Used() }

// serverInfo is the INFO a client sees. The sidecar speaks for the broker:
// its version, and its max_payload unless ours is smaller.
type serverInfo struct {
	ServerID   string `json:"server_id"`
	ServerName string `json:"server_name"`
	Version    string `json:"version"`
	Proto      int    `json:"proto"`
	Headers    bool   `json:"headers"`
	MaxPayload int64  `json:"max_payload"`
}

// New returns a sidecar that proxies to the broker behind up. It does not
// listen until Start. up is the caller's to close, after the sidecar.
func New(up *upstream.Client, opts Options) (*Server, error) {
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	if opts.KillSwitchInterval <= 0 {
		return nil, fmt.Errorf("sidecar options: KillSwitchInterval must be positive, got %s", opts.KillSwitchInterval)
	}
	for _, limit := range []struct {
		name     string
		positive bool
		value    any
	}{
		{"MaxConnections (-max-connections)", opts.MaxConnections >= 1, opts.MaxConnections},
		{"MaxControlBytes", opts.MaxControlBytes >= 1, opts.MaxControlBytes},
		{"WriteBatchBytes", opts.WriteBatchBytes >= 1, opts.WriteBatchBytes},
		{"UpstreamFlushTimeout", opts.UpstreamFlushTimeout > 0, opts.UpstreamFlushTimeout},
		{"ConnectTimeout", opts.ConnectTimeout > 0, opts.ConnectTimeout},
		{"MaxIdle", opts.MaxIdle > 0, opts.MaxIdle},
		{"MemoryBudget (-memory-budget)", opts.MemoryBudget >= 1, opts.MemoryBudget},
		{"MaxSubscriptions", opts.MaxSubscriptions >= 1, opts.MaxSubscriptions},
		{"MaxPendingBytesPerConnection", opts.MaxPendingBytesPerConnection >= 1, opts.MaxPendingBytesPerConnection},
	} {
		if !limit.positive {
			return nil, fmt.Errorf("sidecar options: %s must be positive, got %v", limit.name, limit.value)
		}
	}
	if opts.ReadBudgetWait < 0 {
		return nil, fmt.Errorf("sidecar options: -read-budget-wait must not be negative (0 refuses at once a body the memory budget has no room for), got %s", opts.ReadBudgetWait)
	}
	if opts.AppSendBuffer < 0 {
		return nil, fmt.Errorf("sidecar options: -app-send-buffer must be 0 (the kernel's autotuning) or a number of bytes, got %d", opts.AppSendBuffer)
	}
	if broker := int(up.MaxPayload()) - stampRoom; broker > 0 && broker < opts.Protocol.MaxPayload {
		opts.Protocol.MaxPayload = broker // leave the stamp room under the broker's limit
	}
	s := &Server{opts: opts, up: up, counters: policy.NewCounters(), router: newRouter(), conns: map[*conn]struct{}{},
		telemetry: newTelemetry(), budget: pending.NewBudget(opts.MemoryBudget), retired: map[string]pending.Counts{}, settling: map[*localSub]struct{}{},
		id: newSidecarID(), answerable: newAnswerable(), stop: make(chan struct{}),
		audit: auditLog{logged: map[string]struct{}{}}}
	s.readBuffers = newReadBuffers(s.budget, opts.ReadBudgetWait)
	if opts.InboxPrefix == nil {
		own := newInboxSpace()
		s.inbox.Store(&own)
	}
	s.kills = newKillSwitches(s, s.answerable, opts.KillSwitchInterval, opts.Log)
	s.interest = upstream.NewInterest(up, s.deliver)
	up.SetBeforeRead(s.router.flush)
	s.brokerVersion = versionBeforeBroker
	// Registered before the first INFO is made, so that a connection made
	// meanwhile is not missed (brokerConnected may then run twice).
	up.OnConnect(s.brokerConnected)
	// Until a configuration arrives, the operator's documented defaults
	// govern every subject: nothing is unbounded. They do not make the
	// sidecar ready (HasConfig).
	if err := s.setConfig(meshconfig.DefaultConfig(meshconfig.DefaultPolicy)); err != nil {
		return nil, err
	}
	return s, nil
}

// versionBeforeBroker is the version INFO gives before the broker was ever
// reached: the first nats-server with headers and no_responders, which the
// sidecar's protocol relies on. Clients get the broker's own in a new INFO
// once it is reached.
const versionBeforeBroker = "2.2.0"

// HasConfig reports whether a configuration was given (SetConfig), as
// opposed to the defaults New starts with: the sidecar is ready only then.
func (s *Server) HasConfig() bool { return s.configured.Load() }

// BrokerConnected reports whether the connection to the broker is up now.
// Without it the sidecar still serves its applications: publishes wait in
// the bounded outage buffer.
func (s *Server) BrokerConnected() bool { return s.up.Connected() }

// BrokerReconnects is the number of times the connection to the broker came
// back after it was lost (its subscriptions were renewed each time).
func (s *Server) BrokerReconnects() uint64 { return s.up.Reconnects() }

// BrokerWrites counts the writes to the broker's socket: those the
// application connections' readers made, and those the upstream writer
// goroutine made (OverlapUpstreamWrites hands publishes to it).
func (s *Server) BrokerWrites() (byReader, byWriter uint64) { return s.up.Writes() }

// PublishHandoffs counts the times an application connection's reader,
// behind its application, left its queued publishes to the upstream writer
// goroutine instead of writing them itself (OverlapUpstreamWrites), and
// those of them held because upstream.HandoffBacklogBytes already waited.
func (s *Server) PublishHandoffs() (all, held uint64) { return s.up.Handoffs() }

// brokerConnected runs after each connection to the broker: the broker's
// version and max_payload may be new (or known for the first time, when
// the sidecar started before the broker), so clients get a new INFO.
func (s *Server) brokerConnected() {
	// With a credential from the operator, the broker is reached once it
	// arrived: its inbox space is known now, and the inbox SUBs that
	// waited for it are registered.
	s.podInbox()
	s.configMu.Lock()
	defer s.configMu.Unlock()
	info, err := s.infoFor(s.policy.Load())
	if err != nil {
		s.opts.Log.Error(err, "INFO for the broker's new connection")
		return
	}
	s.installInfo(info)
}

// SetConfig compiles and installs a pod configuration. An invalid one is
// refused with the reason and the current one stays in force. When the
// largest message allowed changes, every client gets a complete new INFO
// (nats.go replaces its whole server info on one).
func (s *Server) SetConfig(cfg meshconfig.PodConfig) error {
	if err := s.setConfig(cfg); err != nil {
		return err
	}
	s.configured.Store(true)
	return nil
}

func (s *Server) setConfig(cfg meshconfig.PodConfig) error {
	s.configMu.Lock()
	defer s.configMu.Unlock()
	compiled, err := policy.Compile(cfg, s.counters)
	if err != nil {
		return fmt.Errorf("refusing configuration %s: %w", cfg.Version, err)
	}
	info, err := s.infoFor(compiled)
	if err != nil {
		return err
	}
	s.policy.Store(compiled)
	s.installInfo(info)
	s.kills.Sync(cfg.Subscriptions)
	s.rebindSubscriptions()
	return nil
}

// infoFor is the INFO clients get under compiled: the broker's version, and
// the smallest of the sidecar's payload limit, the configuration's largest
// message and the broker's max_payload (less the stamp's room), once it is
// known. Called under configMu.
func (s *Server) infoFor(compiled *policy.Publish) ([]byte, error) {
	if v := s.up.ServerVersion(); v != "" {
		s.brokerVersion = v
	}
	maxPayload := min(int64(s.opts.Protocol.MaxPayload), compiled.MaxMessageBytes)
	if broker := s.up.MaxPayload() - stampRoom; broker > 0 {
		maxPayload = min(maxPayload, broker)
	}
	info, err := json.Marshal(serverInfo{
		ServerID:   "weighstation-sidecar",
		ServerName: "weighstation-sidecar",
		Version:    s.brokerVersion,
		Proto:      1,
		Headers:    true,
		MaxPayload: maxPayload,
	})
	if err != nil {
		return nil, fmt.Errorf("encoding INFO: %w", err)
	}
	return info, nil
}

// installInfo makes info the INFO new clients get and, when it changed,
// sends it to every client. Called under configMu.
func (s *Server) installInfo(info []byte) {
	old := s.info.Swap(&info)
	if old != nil && string(*old) != string(info) {
		// Not under connsMu: a client whose control replies are full is
		// closed by queueControl, which takes connsMu to forget it.
		for _, c := range s.connections() {
			c.queueControl(protocol.AppendInfo(nil, info))
		}
	}
}

// subscriptionPolicy is what a local SUB of pattern gets under the current
// configuration: the queue limits and essential flag of the most specific
// Subscription covering it, or the sidecar's defaults (essential: SUBs no
// Subscription covers are inboxes, replies someone waits for).
func (s *Server) subscriptionPolicy(pattern string) (limits pending.Limits, essential bool, name string) {
	sp, ok := s.policy.Load().SubscriptionFor(pattern)
	if !ok {
		return s.opts.Queue, true, ""
	}
	limits = pending.Limits{MaxMessages: int(sp.Limits.MaxPendingMessages), MaxBytes: sp.Limits.MaxPendingBytes, Overflow: pending.DropNewest}
	if sp.Limits.Overflow == meshconfig.OverflowDropOldest {
		limits.Overflow = pending.DropOldest
	}
	return limits, sp.Essential, sp.Name
}

// rebindSubscriptions gives every live SUB the limits and the
// Subscription policy of the new configuration: a SUB that a new or
// renamed Subscription now covers is under its kill switch, its latencies
// and its totals from here on (its messages in flight are timed under the
// new one). Called under configMu, after the kill switches' Sync.
func (s *Server) rebindSubscriptions() {
	s.interestMu.Lock()
	defer s.interestMu.Unlock()
	var kill, release []*localSub
	for _, ls := range s.liveSubs() {
		limits, essential, name := s.subscriptionPolicy(ls.subject)
		ls.queue.SetLimits(limits, essential)
		if !ls.registered || name == ls.policy() {
			continue // an unregistered SUB takes its policy as subscribe registers it
		}
		s.rebind(ls, name)
		switch killed := s.kills.Killed(name); {
		case killed && !ls.killed.Load():
			kill = append(kill, ls)
		case !killed && ls.killed.Load():
			release = append(release, ls)
		}
	}
	s.killSubs(release, false)
	s.killSubs(kill, true)
}

// rebind puts ls under the Subscription policy name: what its queue
// counted until now stays with its earlier policy's totals, which are
// counters and never go back. A message pending at the change is counted
// arrived under the old policy and delivered or dropped under the new.
// A removed SUB keeps its policy: its counts are settling, or retired.
func (s *Server) rebind(ls *localSub, name string) {
	s.retiredMu.Lock()
	defer s.retiredMu.Unlock()
	if ls.removed.Load() {
		return
	}
	now := ls.queue.Counts()
	old := ls.policy()
	s.retired[old] = s.retired[old].Plus(now.Since(ls.base).Events())
	ls.base = now
	ls.binding.Store(&subBinding{policy: name, latency: s.latenciesFor(name)})
}

// TopicCounters reports the publish counters by Topic name ("" is the
// default policy).
func (s *Server) TopicCounters() map[string]policy.CountsSnapshot { return s.counters.Snapshot() }

// Start listens and serves applications until Close.
func (s *Server) Start() error {
	ln, err := net.Listen("tcp", s.opts.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.opts.Listen, err)
	}
	s.ln = ln
	s.wg.Add(2)
	go s.accept()
	go func() {
		defer s.wg.Done()
		s.kills.Run(s.stop)
	}()
	return nil
}

// Addr is the address applications connect to.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Interest exposes the upstream interest, for status and tests.
func (s *Server) Interest() *upstream.Interest { return s.interest }

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		s.connsMu.Lock()
		if s.closed || len(s.conns) >= s.opts.MaxConnections {
			s.connsMu.Unlock()
			s.refusedConnections.Add(1)
			// nats-server's text for the same limit.
			_, _ = nc.Write(protocol.AppendErr(nil, "maximum connections exceeded"))
			_ = nc.Close()
			continue
		}
		if tcp, ok := nc.(*net.TCPConn); ok && s.opts.AppSendBuffer > 0 {
			if err := tcp.SetWriteBuffer(s.opts.AppSendBuffer); err != nil {
				s.opts.Log.Error(err, "setting the application connection's send buffer; keeping the kernel's", "bytes", s.opts.AppSendBuffer)
			}
		}
		c := newConn(s, nc)
		s.conns[c] = struct{}{}
		s.connsMu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			c.serve()
		}()
	}
}

// Close stops listening, closes every connection and waits for them.
func (s *Server) Close() {
	s.connsMu.Lock()
	if !s.closed {
		close(s.stop)
	}
	s.closed = true
	s.connsMu.Unlock()
	if s.ln != nil {
		_ = s.ln.Close()
	}
	for _, c := range s.connections() {
		c.close()
	}
	// A reader may be waiting on the broker, in a publish or in the write
	// of what its connection queued: closing its socket does not wake it.
	// A broker that takes nothing is given up after UpstreamFlushTimeout
	// rather than the minutes its PINGs would take.
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	for {
		select {
		case <-done:
			return
		case <-time.After(s.opts.UpstreamFlushTimeout):
			s.up.Interrupt(errClosingStalled) // and again, should a reconnection stall too
		}
	}
}

// errClosingStalled is why Close gives up the broker connection.
var errClosingStalled = errors.New("the sidecar is closing and the broker took nothing for UpstreamFlushTimeout")

// connections is a snapshot of the connections, to act on without
// connsMu: closing one takes it (forget).
func (s *Server) connections() []*conn {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	return conns
}

func (s *Server) forget(c *conn) {
	s.connsMu.Lock()
	delete(s.conns, c)
	s.connsMu.Unlock()
}

// subscribe routes key's messages to ls, then makes sure the broker sends
// them, unless its Subscription is killed.
func (s *Server) subscribe(ls *localSub) error {
	s.interestMu.Lock()
	defer s.interestMu.Unlock()
	if s.final.Load() {
		return upstream.ErrDraining // its queue would only be dropped
	}
	if ls.removed.Load() {
		// Its connection closed since the SUB was listed: removeSub has
		// let it go, or will, after this.
		return nil
	}
	// The configuration may have changed since the SUB was made; its
	// policy and limits are the current one's from here on
	// (rebindSubscriptions, under this lock, skips a SUB not yet
	// registered).
	limits, essential, name := s.subscriptionPolicy(ls.subject)
	ls.queue.SetLimits(limits, essential)
	if name != ls.policy() {
		s.rebind(ls, name)
	}
	ls.registered = true
	ls.killed.Store(s.kills.Killed(ls.policy()))
	s.router.add(ls)
	if ls.killed.Load() {
		return nil // interest comes back when the kill switch is released
	}
	if _, err := s.interest.Add(ls.key); err != nil {
		s.router.remove(ls)
		return err
	}
	ls.hasInterest = true
	return nil
}

// unsubscribe stops routing to ls and drops its upstream interest.
func (s *Server) unsubscribe(ls *localSub) error {
	s.interestMu.Lock()
	defer s.interestMu.Unlock()
	s.router.remove(ls)
	if !ls.hasInterest {
		return nil
	}
	ls.hasInterest = false
	_, err := s.interest.Remove(ls.key)
	return err
}
