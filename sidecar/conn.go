package sidecar

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weighstation/weighstation/matcher"
	"github.com/weighstation/weighstation/sidecar/pending"
	"github.com/weighstation/weighstation/sidecar/policy"
	"github.com/weighstation/weighstation/sidecar/protocol"
	"github.com/weighstation/weighstation/sidecar/rawsock"
	"github.com/weighstation/weighstation/sidecar/upstream"
)

// connectOptions are the CONNECT fields the sidecar honours.
type connectOptions struct {
	Verbose      bool `json:"verbose"`
	Pedantic     bool `json:"pedantic"`
	Headers      bool `json:"headers"`
	NoResponders bool `json:"no_responders"`
	// Echo defaults to true, as in nats-server: a CONNECT without it wants
	// its own messages back.
	Echo *bool `json:"echo"`
}

// conn is one application connection. Its reader goroutine parses commands;
// the upstream reader writes its deliveries inline when the socket takes
// them at once, and its writer goroutine drains control replies and
// whatever the socket did not take. Nothing a slow reader of this
// connection does can block another connection: each has its own queues
// and writer, and the inline write never waits.
type conn struct {
	srv     *Server
	id      uint64 // in this sidecar, for OriginHeader
	netConn net.Conn
	opts    connectOptions // the reader's
	headers atomic.Bool    // opts.Headers, for the writer
	// noResponders is opts.NoResponders, for the writer: only a client
	// that asked for them gets the broker's 503 no-responders status
	// messages, as from nats-server.
	noResponders atomic.Bool
	// origin is this connection's OriginHeader value when it asked for
	// echo:false, "" otherwise (the reader's).
	origin string
	// sentUpstream is set when this connection has published or changed its
	// interest since its last PING (the reader's).
	sentUpstream bool
	// connected is set once CONNECT arrived (the reader's).
	connected bool
	// errs coalesces this connection's refusals (the reader's).
	errs *protocol.ErrorCoalescer
	// topics is scratch space for governing-Topic lookups (the reader's).
	topics []*policy.Topic
	// headerScratch and extraScratch hold a publish's header block without
	// reserved lines and the lines the sidecar adds; replyScratch its reply
	// subject translated into the pod's inbox space (the reader's).
	headerScratch, extraScratch, replyScratch []byte
	// reader parses the client's commands (the reader goroutine's).
	reader *protocol.Reader
	// arrived is when the reader's last read returned bytes: the arrival
	// time of every command that read completed, and so the time a
	// publish is stamped, charged to quotas and timed from. One clock
	// read per read, not per command: at 200,000 publishes a second
	// time.Now was 7% of the publishing sidecar's CPU (the reader's).
	arrived time.Time
	// stamp is the StampHeader line for stampedAt, formatted once for
	// all the publishes of one read (the reader's).
	stamp     []byte
	stampedAt time.Time
	// upstreamQueued is set when a publish waits in the upstream
	// connection's buffer for this reader to write it (the reader's).
	upstreamQueued bool
	// requests times the application's requests until their replies.
	requests outstanding
	// pendingLimit bounds the bytes all this connection's queues hold.
	pendingLimit *pending.Budget

	// flushQueued is set while the connection waits in router.toFlush (the
	// upstream reader's).
	flushQueued bool
	// writeMu is held by whoever writes to the socket (connwrite.go).
	writeMu mutex[writeRank]
	out     batch

	mu      mutex[connRank]
	control []byte // queued control replies
	// pongs are the PONGs owed to the client's PINGs, in order: each is
	// sent once the broker confirmed what came before its PING (or the
	// wait timed out), and never before an earlier one.
	pongs []*owedPong
	// confirming is set while a broker confirmation for PONGs is under
	// way; confirmNext are the PONGs that wait for the next (pong).
	confirming  bool
	confirmNext []*owedPong
	// heldPongs are answerable PONGs that wait, in order, for the messages
	// queued for the client before they became answerable: nats-server
	// writes a client's output in order, so a Flush returns after the
	// messages the broker sent before its PONG (fill writes them).
	heldPongs []heldPong
	subs      map[string]*localSub // by sid
	// order is the SUBs in the order they were made: a copy-on-write list
	// that whoever writes walks (fill) without mu; it changes under mu
	// (addToOrderLocked, removeSub). controlOwed is set (under mu) while
	// control or heldPongs hold anything, so that fill takes mu only then.
	order       atomic.Pointer[[]*localSub]
	controlOwed atomic.Bool

	wake      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// localSub is one SUB of one connection, with its bounded queue.
type localSub struct {
	conn *conn
	sid  string
	// subject is the pattern the application subscribed to; key its
	// subscription at the broker, where an inbox is in the pod's inbox
	// space, which inbox maps back (nil for any other SUB).
	subject string
	key     upstream.Key
	inbox   *inboxMapping
	// charged is what the SUB holds, charged to the memory budget until
	// it is removed (subscriptionBytes).
	charged   int64
	queue     *pending.Queue
	maxMsgs   atomic.Int64 // UNSUB's count; 0 means none
	delivered atomic.Int64
	removed   atomic.Bool
	// binding is the Subscription policy that covers the SUB now; a new
	// configuration may change it (Server.rebind).
	binding atomic.Pointer[subBinding]
	// base is what the queue had counted when binding last changed: the
	// counts before it are its earlier policy's (under Server.retiredMu).
	base pending.Counts
	// queueClosed is set once removeSub closed the queue (after removed):
	// only then may the SUB retire, its counts final but for what is in
	// flight.
	queueClosed, retired atomic.Bool
	// killed is set while the Subscription's kill switch is engaged.
	killed atomic.Bool
	// registered is set once Server.subscribe routed the SUB: kill switches
	// leave it alone before (its subscribe applies theirs), so that it never
	// takes its upstream interest twice. hasInterest says whether ls holds a
	// reference on its upstream interest (not while killed). Both change
	// under Server.interestMu.
	registered, hasInterest bool
}

// subBinding is a SUB's Subscription policy: its name ("" for none) and
// the latency recorders its SUBs share.
type subBinding struct {
	policy  string
	latency *latencies
}

// policy is the name of the Subscription that covers ls now ("" for none).
func (ls *localSub) policy() string { return ls.binding.Load().policy }

// latency is the recorders of the Subscription that covers ls now.
func (ls *localSub) latency() *latencies { return ls.binding.Load().latency }

// retireWhenSettled folds a removed subscription's counts into its policy's
// totals once nothing of it is in flight any more (its writer settles the
// rest and calls this again).
func (ls *localSub) retireWhenSettled() {
	if ls.queueClosed.Load() && ls.queue.Counts().InFlight == 0 && ls.retired.CompareAndSwap(false, true) {
		ls.conn.srv.retire(ls)
	}
}

func newConn(s *Server, nc net.Conn) *conn {
	return &conn{srv: s, id: s.nextConnID.Add(1), netConn: nc, subs: map[string]*localSub{}, wake: make(chan struct{}, 1), done: make(chan struct{}),
		errs:         protocol.NewErrorCoalescer(protocol.DefaultErrorInterval, protocol.DefaultErrorKeys),
		pendingLimit: pending.NewBudget(s.opts.MaxPendingBytesPerConnection),
		out:          newBatch(&s.opts, nc),
		requests:     outstanding{untimed: &s.requestsUntimed, allBytes: &s.requestBytes}}
}

func (c *conn) serve() {
	defer c.close()
	c.queueControl(protocol.AppendInfo(nil, *c.srv.info.Load()))
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writer()
	}()
	// When the reader stops (the client left, or broke the protocol), the
	// connection closes at once, which stops the writer; waiting for the
	// writer first would leave a departed client's subscriptions in place
	// until a message for them failed to write.
	defer func() {
		// Publishes accepted before the connection ended (a protocol
		// error after them in the same read, a CONNECT that does not
		// parse) still go up, as they would from nats-server; the reader
		// does not reach its next read, where it would write them.
		c.writeUpstream(false)
		c.close()
		<-writerDone
	}()

	r := protocol.NewReader(&flushingReader{c: c, sock: rawsock.NewReader(c.netConn)}, c.srv.opts.Protocol)
	r.ChargeTo(connReadMemory{c})
	defer r.Release()
	c.reader = r
	var cmd protocol.Command
	for {
		if err := r.Next(&cmd); err != nil {
			var perr *protocol.Error
			var nerr net.Error
			var refused *protocol.BodyRefused
			switch {
			case errors.As(err, &refused):
				c.refuseBody(&cmd, refused)
				continue
			case errors.As(err, &perr):
				c.sendErrAndClose(perr.Text)
			case errors.As(err, &nerr) && nerr.Timeout():
				if !c.connected {
					c.sendErrAndClose("Authentication Timeout") // nats-server's text
				} else {
					c.sendErrAndClose("Stale Connection")
				}
			}
			return
		}
		if cmd.Op == protocol.OpConnect {
			c.connected = true
		}
		if !c.handle(&cmd) {
			return
		}
	}
}

// handle runs one command; it returns false when the connection must close.
func (c *conn) handle(cmd *protocol.Command) bool {
	switch cmd.Op {
	case protocol.OpConnect:
		if err := json.Unmarshal(cmd.Options, &c.opts); err != nil {
			c.sendErrAndClose("Parser Error: CONNECT options are not valid JSON")
			return false
		}
		c.headers.Store(c.opts.Headers)
		c.noResponders.Store(c.opts.NoResponders && c.opts.Headers)
		c.origin = ""
		if c.opts.Echo != nil && !*c.opts.Echo {
			c.origin = originValue(c.srv.id, c.id)
		}
	case protocol.OpPing:
		c.pong(c.sentUpstream)
		c.sentUpstream = false
		return true
	case protocol.OpPong:
		return true
	case protocol.OpPub, protocol.OpHPub:
		c.sentUpstream = true
		if !c.publish(cmd) {
			return true
		}
	case protocol.OpSub:
		c.sentUpstream = true
		if !c.subscribe(cmd) {
			return true
		}
	case protocol.OpUnsub:
		c.sentUpstream = true
		c.unsubscribe(cmd)
	}
	if c.opts.Verbose {
		c.queueControl(protocol.OK)
	}
	return true
}

func (c *conn) publish(cmd *protocol.Command) bool {
	// Views of the command's bytes, valid until this returns: whatever
	// keeps one copies it (the request tables, the error coalescer and the
	// matcher's cache do), so a publish allocates no string.
	subject, reply := bytesView(cmd.Subject), bytesView(cmd.Reply)
	now := c.arrived
	if matcher.ValidateSubject(subject) != nil || (reply != "" && matcher.ValidateSubject(reply) != nil) {
		// Dropped and counted. nats-server checks a publish's subjects for
		// a pedantic client only, and tells it so; to any other client an
		// error would cost the connection, since nats.go closes on an
		// -ERR it does not know as transient.
		c.srv.invalid.Add(1)
		if c.opts.Pedantic {
			c.refuse(subject, now, func() string { return "Invalid Publish Subject" }) // nats-server's text
		}
		return false
	}
	// A reply to a request the application received: time its answer for
	// the automatic kill switch, and allow it once.
	e, isReply := c.srv.answerable.answered(subject)
	if isReply && !e.late {
		c.srv.kills.RecordReplyLatency(e.policy, time.Duration(monotonic(now)-e.delivered), now)
	}
	pol := c.srv.policy.Load()
	var topic *policy.Topic
	topic, c.topics = pol.Governing(subject, c.topics)
	if rule := pol.CheckPublish(subject, topic); rule != policy.Allowed {
		// The one reply to a request the pod received is allowed past the
		// publish rules only to an inbox, as the broker's allow_responses
		// is: a requester that names orders.secret or $JS.API... as its
		// reply subject cannot steer the pod's answer there.
		replyToInbox := isReply && inInboxSpace(subject)
		if isReply && !replyToInbox {
			c.srv.repliesOutsideInbox.Add(1)
		}
		if replyToInbox {
			c.srv.repliesAllowed.Add(1)
		} else if c.srv.denied(OpPublish, rule, subject, pol.Audit()) {
			topic.RefuseAccess()
			c.refuse(subject, now, func() string { return policy.PublishViolation(subject, rule.Explain()) })
			return false
		}
	}
	// A reply subject under the application's inbox prefix goes up in the
	// pod's own inbox space (inbox.go), where its replies are the pod's
	// alone.
	upReply := cmd.Reply
	if reply != "" {
		translated, ok, err := c.srv.translateReply(c.replyScratch[:0], reply, pol)
		if err != nil {
			c.srv.inboxPending.Add(1)
			topic.RefuseAccess()
			c.refuse(subject, now, func() string { return policy.PublishViolation(subject, "its reply subject: "+err.Error()) })
			return false
		}
		if ok {
			c.replyScratch = translated[:0]
			upReply, reply = translated, bytesView(translated)
		}
	}
	if v := topic.Check(len(cmd.Body), now); v != policy.Allow {
		c.refuse(subject, now, func() string { return topic.Refusal(v, subject, len(cmd.Body)) })
		return false
	}
	// The frame goes up as it came, but for the reserved headers: an
	// application's own are removed, and the sidecar's inserted as lines,
	// with no decoding of the header block.
	var header []byte
	if cmd.Op == protocol.OpHPub {
		header = cmd.Header()
		if !validHeader(header) {
			c.srv.invalid.Add(1)
			c.refuse(subject, now, func() string { return "Parser Error: invalid headers" })
			return false
		}
		var r reserved
		header, r = stripReserved(c.headerScratch[:0], header)
		if r.removed > 0 {
			c.headerScratch = header[:0]
			c.srv.strippedStamps.Add(uint64(r.removed)) // the headers are reserved for sidecars
		}
		if len(header) == 0 {
			header = nil
		}
	}
	extra := c.extraScratch[:0]
	if shouldStamp(topic.Policy.StampHeader, subject) {
		if c.stamp == nil || !now.Equal(c.stampedAt) {
			c.stamp, c.stampedAt = appendStamp(c.stamp[:0], now), now
		}
		extra = append(extra, c.stamp...)
	}
	// echo:false. Not on '$' subjects, whose headers belong to NATS (a KV
	// put would store it): there the echo is delivered, as documented.
	if c.origin != "" && !isDollar(subject) {
		extra = appendOrigin(extra, c.origin)
	}
	c.extraScratch = extra[:0]
	if len(extra) == 0 {
		extra = nil
	}
	// A request is timed from before it leaves: its reply can come back
	// before the write returns.
	if reply != "" {
		c.requests.start(reply, monotonic(now))
	}
	// Publish copies the frame into the upstream connection's outbound
	// buffer, so the reader's buffers can be reused at once; it goes out
	// when this reader next waits for its client (flushingReader).
	if err := c.srv.up.Publish(cmd.Subject, upReply, header, extra, cmd.Payload()); err != nil {
		if reply != "" {
			c.requests.finish(reply) // it never left
		}
		// The broker is away and the bounded outage buffer is full, or the
		// message is larger than the broker takes.
		topic.Counters.FailedUpstream.Add(1)
		why := "the broker is unavailable"
		if errors.Is(err, upstream.ErrMaxPayload) || errors.Is(err, upstream.ErrOutageBufferFull) {
			why = err.Error() // the size and the broker's max_payload, or the outage buffer's bound
		}
		c.refuse(subject, now, func() string { return policy.PublishViolation(subject, why) })
		return false
	}
	c.upstreamQueued = true
	topic.Counters.Forwarded.Add(1)
	return true
}

// refuseBody refuses a PUB or HPUB whose body found no room in the memory
// budget within ReadBudgetWait: the reader skipped it unread, and the
// connection goes on. Counted, and told as a Permissions Violation, which
// stock clients survive, naming the limit.
func (c *conn) refuseBody(cmd *protocol.Command, refused *protocol.BodyRefused) {
	c.srv.bodiesRefused.Add(1)
	subject := string(cmd.Subject)
	c.refuse(subject, c.arrived, func() string {
		return policy.PublishViolation(subject, fmt.Sprintf("its body of %d bytes found no room in the sidecar's memory budget (-memory-budget %d bytes, shared by the read buffers and the pending messages) within -read-budget-wait %s",
			refused.Size, c.srv.opts.MemoryBudget, c.srv.opts.ReadBudgetWait))
	})
}

// flushingReader reads the application's socket, first writing what the
// connection's publishes queued upstream: the reader asks for more bytes
// only when its buffer holds no whole command, so a burst of publishes goes
// up in one write, and a lone publish at once, on this goroutine.
type flushingReader struct {
	c    *conn
	sock *rawsock.Reader // the application's socket, read with raw system calls
	// The read deadline in force, and the allowance it was set for.
	deadline time.Time
	idle     time.Duration
	// filled: the last read filled all the room it was offered, so the
	// application has probably sent more already (OverlapUpstreamWrites).
	filled bool
}

// deadlineSlack is the part of a command's allowance (MaxIdle, or
// ConnectTimeout) that the reader may leave unrenewed: the deadline is
// renewed when a command starts only if less than idle - idle/deadlineSlack
// of it is left, so a busy connection renews it about every MaxIdle/16 (19
// s by default), not for every command, and a command is given between
// 15/16 of its allowance and all of it.
const deadlineSlack = 16

// It also keeps a read deadline that works as an idle timer: when a
// command starts, the deadline is at least 15/16 of ConnectTimeout (until
// CONNECT arrived) or MaxIdle (after) away, so a command that dribbles in
// (a slow-loris) or a silent client is closed. The allowance switches to
// MaxIdle at the first read after CONNECT even mid-command: a command that
// arrived in the same read as CONNECT (a large body sent with it) must not
// be held to what was left of ConnectTimeout.
func (r *flushingReader) Read(p []byte) (int, error) {
	r.c.writeUpstream(r.filled && r.c.srv.opts.OverlapUpstreamWrites)
	idle := r.c.srv.opts.MaxIdle
	if !r.c.connected {
		idle = r.c.srv.opts.ConnectTimeout
	}
	if idle != r.idle || r.c.reader.Buffered() == 0 { // a new allowance, or a new command: its time starts
		now := time.Now()
		if idle != r.idle || r.deadline.Sub(now) < idle-idle/deadlineSlack {
			r.deadline, r.idle = now.Add(idle), idle
			_ = r.c.netConn.SetReadDeadline(r.deadline)
		}
	}
	n, err := r.sock.Read(p)
	r.filled = n == len(p)
	if n > 0 {
		r.c.arrived = time.Now()
	}
	return n, err
}

// writeUpstream writes the publishes this connection queued upstream
// since it last did, if any: itself, or with handOff by leaving them to the
// upstream writer goroutine (OverlapUpstreamWrites).
func (c *conn) writeUpstream(handOff bool) {
	if !c.upstreamQueued {
		return
	}
	c.upstreamQueued = false
	if handOff {
		c.srv.up.WriteSoon()
	} else {
		c.srv.up.WriteQueued()
	}
}

// owedPong is one client PING's answer.
type owedPong struct{ ready bool }

// pong answers a client's PING. A client's PING/PONG (nats.go's Flush)
// promises that the server has everything sent before it; through a proxy,
// the server that matters is the broker. So when the client sent something
// upstream since its last PING, the PONG waits for the broker's
// confirmation, at most UpstreamFlushTimeout, without holding up this
// reader; the PONGs still go out in the order of the PINGs.
//
// Every PONG owed counts against MaxControlBytes, so a client that sends
// PINGs faster than they can be answered is closed as a slow consumer, and
// one confirmation is asked for at a time: the PINGs that arrive while it
// is under way wait for the next, one timer and one broker PING for them
// all, not one each (so a PING waits at most twice UpstreamFlushTimeout).
func (c *conn) pong(sentUpstream bool) {
	owed := &owedPong{}
	c.mu.Lock()
	if c.controlOwedLocked()+len(protocol.Pong) > c.srv.opts.MaxControlBytes {
		c.mu.Unlock()
		c.close() // a slow consumer of its own PONGs
		return
	}
	c.pongs = append(c.pongs, owed)
	if !sentUpstream {
		c.mu.Unlock()
		// Nothing went up since the previous PING: this PONG waits for
		// nothing but the ones before it, which pongReady keeps.
		c.pongReady(owed)
		return
	}
	confirming := c.confirming
	if confirming {
		c.confirmNext = append(c.confirmNext, owed)
	}
	c.confirming = true
	c.mu.Unlock()
	c.writeUpstream(false)
	if !confirming {
		c.confirm([]*owedPong{owed})
	}
}

// confirm asks the broker to confirm what was sent before batch's PINGs,
// and makes their PONGs answerable once it did, or UpstreamFlushTimeout
// passed; then the PINGs that came meanwhile get their confirmation.
func (c *conn) confirm(batch []*owedPong) {
	var once sync.Once
	done := func() {
		once.Do(func() {
			c.pongReady(batch...)
			c.mu.Lock()
			next := c.confirmNext
			c.confirmNext = nil
			c.confirming = len(next) > 0
			c.mu.Unlock()
			if len(next) > 0 {
				c.confirm(next)
			}
		})
	}
	timeout := time.AfterFunc(c.srv.opts.UpstreamFlushTimeout, done)
	c.srv.up.FlushAsync(func(error) {
		timeout.Stop()
		done()
	})
}

// heldPong is a PONG that goes out once every SUB of its connection has
// taken (or dropped) the messages queued before it: until each queue's
// count of what left it reaches the mark it had when the PONG became
// answerable (pending.Queue.Position).
type heldPong struct{ barrier []queueMark }

type queueMark struct {
	ls    *localSub
	until uint64
}

// passed reports whether every message queued before the PONG has left
// its queue (taken into a write, or dropped); a removed SUB holds nothing.
func (h heldPong) passed() bool {
	for _, m := range h.barrier {
		if left, _ := m.ls.queue.Position(); !m.ls.removed.Load() && left < m.until {
			return false
		}
	}
	return true
}

// pongReady marks owed as answerable and sends every PONG from the oldest
// that can go: at once when nothing is queued for the client, else behind
// what is (fill). Held PONGs count against MaxControlBytes.
func (c *conn) pongReady(owed ...*owedPong) {
	c.mu.Lock()
	for _, o := range owed {
		o.ready = true
	}
	n := 0
	for n < len(c.pongs) && c.pongs[n].ready {
		n++
	}
	c.pongs = c.pongs[n:]
	var barrier []queueMark
	if n > 0 {
		for _, ls := range c.subsInOrder() {
			if left, until := ls.queue.Position(); until > left {
				barrier = append(barrier, queueMark{ls, until})
			}
		}
	}
	if n == 0 || (barrier == nil && len(c.heldPongs) == 0) {
		c.mu.Unlock()
		for range n {
			c.queueControl(protocol.Pong)
		}
		return
	}
	if c.controlOwedLocked()+len(protocol.Pong)*n > c.srv.opts.MaxControlBytes {
		c.mu.Unlock()
		c.close() // a slow consumer of its own PONGs
		return
	}
	for range n {
		c.heldPongs = append(c.heldPongs, heldPong{barrier})
	}
	c.controlOwed.Store(true)
	c.mu.Unlock()
	c.wakeWriter()
}

// controlOwedLocked is the bytes of control replies the client has not
// taken yet, the PONGs held behind its messages and those still waiting
// for the broker included: what MaxControlBytes bounds. c.mu is held.
func (c *conn) controlOwedLocked() int {
	return len(c.control) + len(protocol.Pong)*(len(c.heldPongs)+len(c.pongs))
}

// refuse tells the client a publish was refused. Repeats for one subject
// within a second are coalesced and counted, not sent, and their text is
// not even built: refusals come fastest when the sidecar is overloaded.
func (c *conn) refuse(subject string, now time.Time, text func() string) {
	if c.errs.Allow(subject, now) {
		c.queueErr(text())
	}
}

func (c *conn) subscribe(cmd *protocol.Command) bool {
	subject := string(cmd.Subject)
	if matcher.ValidatePattern(subject) != nil {
		c.srv.invalid.Add(1)
		c.refuse(subject, time.Now(), func() string { return "Invalid Subject" })
		return false
	}
	pol := c.srv.policy.Load()
	if rule := pol.CheckSubscribe(subject); rule != policy.Allowed && c.srv.denied(OpSubscribe, rule, subject, pol.Audit()) {
		c.refuse(subject, time.Now(), func() string {
			return fmt.Sprintf("Permissions Violation for Subscription to %q: %s", subject, rule.Explain())
		})
		return false
	}
	// An inbox goes up in the pod's own inbox space (inbox.go): whatever
	// inbox pattern the application names, it receives only the pod's.
	// Before the space is known the SUB waits for it, unregistered.
	upSubject, inbox, err := c.srv.translateSub(subject, pol)
	waitsForInbox := errors.Is(err, errInboxPending)
	if waitsForInbox {
		upSubject = ""
	}
	sid := string(cmd.SID)
	c.mu.Lock()
	_, dup := c.subs[sid]
	count := len(c.subs)
	c.mu.Unlock()
	if dup {
		c.queueErr("Parser Error: duplicate sid " + sid)
		return false
	}
	if count >= c.srv.opts.MaxSubscriptions {
		c.srv.subsRefusedMax.Add(1)
		c.queueErr("Maximum Subscriptions Exceeded") // nats-server's text
		return false
	}
	// What a SUB holds is charged to the memory budget (a non-essential
	// queue's messages are shed for it, as for an essential message): one
	// is small, but 256 connections' 10,000 each are not.
	charged := subscriptionBytes(subject, upSubject, string(cmd.Queue), sid)
	if waitsForInbox {
		charged += int64(len(subject) + MaxInboxPrefixBytes) // its subject at the broker, once known
	}
	if !c.srv.budget.Acquire(charged, 0, nil) {
		c.srv.subsRefusedMemory.Add(1)
		c.queueErr(fmt.Sprintf("Permissions Violation for Subscription to %q: the sidecar's memory budget has no room for another subscription (-memory-budget %d bytes, shared with the pending messages and the read buffers)",
			subject, c.srv.opts.MemoryBudget))
		return false
	}
	limits, essential, policyName := c.srv.subscriptionPolicy(subject)
	ls := &localSub{conn: c, sid: sid, subject: subject, key: upstream.Key{Subject: upSubject, Queue: string(cmd.Queue)}, inbox: inbox, charged: charged,
		queue: pending.New(limits).WithConnectionLimit(c.pendingLimit).WithBudget(c.srv.budget, essential)}
	ls.binding.Store(&subBinding{policy: policyName, latency: c.srv.latenciesFor(policyName)})
	c.mu.Lock()
	select {
	case <-c.done:
		// Closed by its writer or a slow consumer's control replies while
		// this reader went on with what it had read: close took its
		// snapshot of the SUBs (under mu, after done), and this one would
		// never be removed.
		c.mu.Unlock()
		c.srv.budget.Release(charged)
		return false
	default:
	}
	c.subs[sid] = ls
	c.addToOrderLocked(ls)
	c.mu.Unlock()
	if waitsForInbox {
		if c.srv.deferInboxSub(ls) {
			return true
		}
		if err := c.srv.setInboxKey(ls); err != nil { // known since
			c.removeSub(ls, pending.ReasonUnsubscribed)
			return false
		}
	}
	if err := c.srv.subscribe(ls); err != nil {
		c.removeSub(ls, pending.ReasonUnsubscribed)
		why := "the broker refused it"
		if errors.Is(err, upstream.ErrDraining) {
			why = upstream.ErrDraining.Error()
		}
		// A Permissions Violation, which stock clients survive.
		c.queueErr("Permissions Violation for Subscription to " + `"` + subject + `": ` + why)
		return false
	}
	return true
}

// subscriptionBytes is what a SUB holds in the sidecar, about: its local
// subscription and queue, its route and its upstream interest (1 KiB),
// and its subject on the application's side and the broker's (the same
// string but for an inbox), its queue group twice and its sid. Measured:
// 1.3 KiB for a 10-byte subject, 3 KiB for a 1,000-byte one.
func subscriptionBytes(subject, upSubject, queue, sid string) int64 {
	return 1024 + int64(len(subject)+len(upSubject)+2*len(queue)+len(sid))
}

func (c *conn) unsubscribe(cmd *protocol.Command) {
	c.mu.Lock()
	ls := c.subs[string(cmd.SID)]
	c.mu.Unlock()
	if ls == nil {
		return // nats-server ignores an unknown sid too
	}
	if max := int64(cmd.MaxMsgs); max > 0 && ls.delivered.Load() < max {
		ls.maxMsgs.Store(max)
		// A write that settled meanwhile read no count: whichever of it
		// and this sees the other's store removes the SUB (settle adds to
		// delivered before it loads maxMsgs).
		if ls.delivered.Load() < max {
			c.wakeWriter() // the writer removes it when the count is reached
			return
		}
	}
	c.removeSub(ls, pending.ReasonUnsubscribed)
}

// removeSub forgets a subscription once, drops what it still had pending,
// and releases its upstream interest.
func (c *conn) removeSub(ls *localSub, reason pending.Reason) {
	if !c.srv.startSettling(ls) {
		return
	}
	c.mu.Lock()
	delete(c.subs, ls.sid)
	current := c.subsInOrder()
	order := make([]*localSub, 0, len(current))
	for _, x := range current {
		if x != ls {
			order = append(order, x)
		}
	}
	c.order.Store(&order)
	c.mu.Unlock()
	_ = c.srv.unsubscribe(ls) // an error means the upstream connection is gone; its interest went with it
	c.srv.budget.Release(ls.charged)
	ls.queue.Close(reason)
	ls.queueClosed.Store(true)
	ls.retireWhenSettled()
	c.wakeWriter() // a PONG held for what it had queued may go now
}

// subsInOrder is the connection's SUBs, oldest first: not to be changed.
func (c *conn) subsInOrder() []*localSub {
	if o := c.order.Load(); o != nil {
		return *o
	}
	return nil
}

// addToOrderLocked appends ls to order (c.mu is held).
func (c *conn) addToOrderLocked(ls *localSub) {
	order := append(append([]*localSub(nil), c.subsInOrder()...), ls)
	c.order.Store(&order)
}

func (c *conn) queueControl(b []byte) {
	c.mu.Lock()
	if c.controlOwedLocked()+len(b) > c.srv.opts.MaxControlBytes {
		c.mu.Unlock()
		c.close() // a slow consumer of its own PONGs and errors
		return
	}
	c.control = append(c.control, b...)
	c.controlOwed.Store(true)
	c.mu.Unlock()
	c.wakeWriter()
}

func (c *conn) queueErr(text string) { c.queueControl(protocol.AppendErr(nil, text)) }

// sendErrAndClose tells the client why before closing, waiting at most a
// second for a client that does not read.
func (c *conn) sendErrAndClose(text string) {
	_ = c.netConn.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.netConn.Write(protocol.AppendErr(nil, text))
	c.close()
}

func (c *conn) close() {
	c.closeOnce.Do(func() {
		close(c.done)
		_ = c.netConn.Close()
		c.mu.Lock()
		subs := make([]*localSub, 0, len(c.subs))
		for _, ls := range c.subs {
			subs = append(subs, ls)
		}
		c.mu.Unlock()
		reason := pending.ReasonClosed
		if c.srv.final.Load() {
			reason = pending.ReasonShutdown // the sidecar closed it: its drain grace period is over
		}
		for _, ls := range subs {
			c.removeSub(ls, reason)
		}
		c.requests.drop() // its share of maxOutstandingBytes
		c.srv.forget(c)
	})
}
