package upstream

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/weighstation/weighstation/sidecar/protocol"
	"github.com/weighstation/weighstation/sidecar/rawsock"
)

// link is one connection to the broker and its reader.
type link struct {
	conn net.Conn
	fr   *protocol.Buffer
	hr   *hookedReader
	// info is the broker's INFO from the handshake (and a later one while
	// the link is a renewal's pending one, under Client.mu).
	info *ServerInfo
	// stopped is closed when the link's reader returned, err set first.
	stopped chan struct{}
	err     error

	// While the link is a renewal's new one (Client.pending), under
	// Client.mu: the SUB and UNSUB lines it still needs, the PINGs the
	// broker sent it, to answer once it is live, and a signal per PONG
	// (Renew sends one PING at a time).
	ctl       []byte
	owedPongs int
	ponged    chan struct{}

	// While the link is a renewal's old one (Client.draining), under
	// Client.mu: its PINGs on the wire (one releases the publishes held
	// for the switch), the sids it subscribed, whether its UNSUBs were
	// sent (the PING after them is its last); drained is closed when that
	// PING was answered, or the link lost (drainErr).
	sent     []ping
	sids     []uint64
	unsubbed bool
	drained  chan struct{}
	drainErr error
	// released is closed when the publishes held for the switch were let
	// go (the release PING's PONG, or the end of the drain).
	released     chan struct{}
	releasedDone bool

	// overlap is set while what arrives on the link may arrive on a
	// renewal's new link too: each message is counted in the client's
	// duplicates.
	overlap atomic.Bool
}

func newLink(conn net.Conn, fr *protocol.Buffer, hr *hookedReader, info *ServerInfo) *link {
	return &link{conn: conn, fr: fr, hr: hr, info: info, stopped: make(chan struct{}),
		ponged: make(chan struct{}, 1), drained: make(chan struct{}), released: make(chan struct{})}
}

// takePings forgets the link's PINGs and returns how many publishes they
// were to confirm and the flushes that waited on them. Client.mu is held.
func (l *link) takePings() (confirms int, waiters []func(error)) {
	for _, p := range l.sent {
		confirms += p.confirms
		waiters = append(waiters, p.waiters...)
	}
	l.sent = nil
	return confirms, waiters
}

// endDrainLocked ends l's drain: the publishes held for it may go. c.mu is
// held.
func (c *Client) endDrainLocked(l *link, err error) {
	if c.draining != l {
		return
	}
	c.draining = nil
	c.releaseLocked(l)
	l.drainErr = err
	close(l.drained)
}

// releaseLocked lets the publishes held for l's switch go. c.mu is held.
func (c *Client) releaseLocked(l *link) {
	if l.releasedDone {
		return
	}
	l.releasedDone = true
	c.held = false
	close(l.released)
	c.room.Broadcast()
}

// maxRenewRounds bounds the rounds of SUBs a renewal sends its new
// connection before the switch: subscriptions made while it subscribes
// are sent in the next round, and the switch waits for a round with none.
const maxRenewRounds = 20

// Renew moves the client to a new connection made with the current
// Credentials (a renewed one), without a gap: nats-server reads a
// credential's permissions and expiry at CONNECT only. It
//
//  1. dials and handshakes a second connection;
//  2. sends it a SUB for every subscription (the same sids; those made
//     meanwhile in further rounds) and a PING, and waits for its PONG:
//     the broker routes to both connections from then on;
//  3. at one point, under the client's lock, makes it the live connection
//     for publishes and control lines: what was queued before goes out on
//     the old connection with a PING, and what is published after waits
//     until the broker answered that PING (each publisher's order is kept
//     across the two connections: a round trip);
//  4. after the overlap (RenewOverlap, or longer when the broker answers
//     slowly: overlapFor) from step 2, makes the broker's publishers match
//     their subjects again (refresh), then sends the old connection an
//     UNSUB for each of its subscriptions and a PING, reads it until that
//     PONG (every message the broker routed there was handed over; it
//     routes nothing more there), and closes it.
//
// While both connections deliver, a message may be handed over twice:
// those that arrive on the old connection from the moment the new one's
// SUBs are sent until its drain are counted as possible duplicates
// (Duplicates), and the renewal logs how many. A queue group's messages
// go to one connection or the other.
//
// The overlap covers a message whose routing the broker began before the
// new connection's SUB and ends after the old one's UNSUB: it goes to
// neither (nats-server matches a message's subscriptions, then delivers
// to those still open). A broker goroutine descheduled in between makes
// that window as long as it waits for a CPU, so the overlap grows with
// the broker's slowest answer (overlapFor; TestRenewLosesNothing). A
// broker stalled longer than the overlap can still lose that message.
//
// When the new connection fails before the switch (the broker refuses the
// credential, say), it is closed and the error returned: the old one
// serves on while it lives, and the reconnection loop, which connects with
// the current Credentials, takes over when it is lost. An old connection
// lost or silent (DialTimeout) after the switch is closed as any lost one
// is (its unconfirmed publishes counted in doubt); the renewal stands.
// While the client is not connected, there is nothing to move: the next
// connection uses the current Credentials.
//
// Renew returns once the old connection is closed: RenewOverlap plus a few
// round trips, each bounded by DialTimeout. It must not be called from a
// handler or the beforeRead hook.
func (c *Client) Renew(reason error) error {
	c.renewMu.Lock()
	defer c.renewMu.Unlock()
	why := "the connection was renewed"
	if reason != nil {
		why = reason.Error()
	}
	c.mu.Lock()
	old, closed := c.live, c.closed
	c.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case old == nil:
		c.opts.Log.Info("the broker is not connected: its next connection uses the renewed credential", "reason", why)
		return nil
	}
	start := time.Now()
	dupsBefore := c.duplicates.Load()
	nl, err := c.dial()
	if err != nil {
		return c.renewFailed(why, fmt.Errorf("connecting: %w", err))
	}

	// From here the broker may route to both: what the old connection
	// brings is counted until it is drained.
	c.mu.Lock()
	if c.closed || c.live != old {
		c.mu.Unlock()
		_ = nl.conn.Close()
		return c.renewFailed(why, errLostMeanwhile)
	}
	c.subsMu.RLock()
	for sid, s := range c.subs {
		if !s.draining {
			nl.ctl = appendSub(nl.ctl, s.Subject, s.Queue, sid)
		}
	}
	c.subsMu.RUnlock()
	c.pending = nl
	old.overlap.Store(true)
	c.wg.Add(1) // under mu, seeing the client open: Close waits for it
	go c.readLoop(nl)
	c.mu.Unlock()

	abort := func(err error) error {
		c.mu.Lock()
		if c.pending == nl {
			c.pending = nil
		}
		c.mu.Unlock()
		old.overlap.Store(false)
		_ = nl.conn.Close()
		return c.renewFailed(why, err)
	}
	var final []byte
	var callbacks []func()
	var subscribed time.Time
	var slowest time.Duration // the broker's slowest answer in this renewal
	for round := 0; ; round++ {
		c.mu.Lock()
		if round > 0 && len(nl.ctl) == 0 {
			// Every subscription is the new connection's: switch, once
			// no write to the old one is under way (its bytes must be
			// the old connection's last but the final ones).
			for c.writing && c.live == old && !c.closed {
				c.room.Wait()
			}
			if len(nl.ctl) == 0 && c.live == old && !c.closed {
				final, callbacks = c.switchLocked(old, nl)
				c.mu.Unlock()
				break
			}
		}
		if c.closed {
			c.mu.Unlock()
			return abort(ErrClosed)
		}
		if c.live != old {
			c.mu.Unlock()
			return abort(errLostMeanwhile)
		}
		if round >= maxRenewRounds {
			c.mu.Unlock()
			return abort(fmt.Errorf("the subscriptions kept changing over %d rounds of SUBs", round))
		}
		lines := append(nl.ctl, pingLine...)
		nl.ctl = nil
		c.mu.Unlock()
		sent := time.Now()
		if err := c.roundTrip(nl, lines); err != nil {
			return abort(err)
		}
		if round == 0 {
			subscribed = time.Now()
		}
		slowest = max(slowest, time.Since(sent))
	}

	// The old connection's last publishes, and the PING whose PONG lets
	// the new one's go.
	switched := time.Now()
	c.writeDraining(old, final)
	c.kick() // control lines for the new connection
	for _, f := range callbacks {
		f()
	}
	release := time.NewTimer(c.opts.DialTimeout)
	defer release.Stop()
	select {
	case <-old.released:
		slowest = max(slowest, time.Since(switched))
	case <-release.C:
		c.lost(old.conn, fmt.Errorf("the broker did not confirm the last publishes on the connection a renewal replaced within %s (DialTimeout)", c.opts.DialTimeout))
	case <-c.done:
	}

	// The overlap, then the old connection's UNSUBs and its last PING.
	overlap := time.NewTimer(time.Until(subscribed.Add(c.overlapFor(slowest))))
	defer overlap.Stop()
	select {
	case <-overlap.C:
	case <-old.drained: // lost
	case <-c.done:
	}
	c.refresh()
	c.mu.Lock()
	var unsubs []byte
	if c.draining == old {
		for _, sid := range old.sids {
			unsubs = appendUnsub(unsubs, sid)
		}
		unsubs = append(unsubs, pingLine...)
		old.sent = append(old.sent, ping{})
		old.unsubbed = true
	}
	c.mu.Unlock()
	if unsubs != nil {
		c.writeDraining(old, unsubs)
	}
	t := time.NewTimer(c.opts.DialTimeout)
	defer t.Stop()
	select {
	case <-old.drained:
	case <-t.C:
		c.lost(old.conn, fmt.Errorf("the broker did not confirm the drain of the connection a renewal replaced within %s (DialTimeout)", c.opts.DialTimeout))
	case <-c.done:
	}
	old.overlap.Store(false)
	c.mu.Lock()
	drainErr, closed := old.drainErr, c.closed // drainErr is set before drained is closed, under mu
	c.mu.Unlock()
	if closed {
		return ErrClosed
	}
	server := nl.info.ServerName
	dups := c.duplicates.Load() - dupsBefore
	if drainErr != nil {
		c.opts.Log.Error(drainErr, "renewed the connection to the broker, but the old connection was lost before it was drained: what it carried unread is lost, and its unconfirmed publishes are counted in doubt",
			"reason", why, "server", server, "duplicates", dups, "took", time.Since(start).String())
	} else {
		c.opts.Log.Info("renewed the connection to the broker: a new one carries everything, the old one was drained",
			"reason", why, "server", server, "duplicates", dups, "took", time.Since(start).String())
	}
	return nil
}

// overlapRoundTrips is how many of the broker's slowest answers during a
// renewal its overlap lasts at least: a broker slow to answer (starved of
// CPU, throttled) is as slow to finish routing what it began.
const overlapRoundTrips = 20

// overlapFor is how long a renewal keeps the old connection subscribed
// once the new one is, given the broker's slowest answer meanwhile:
// RenewOverlap, or overlapRoundTrips of those answers, at most DialTimeout
// (unless RenewOverlap is longer).
func (c *Client) overlapFor(slowest time.Duration) time.Duration {
	return max(c.opts.RenewOverlap, min(overlapRoundTrips*slowest, c.opts.DialTimeout))
}

// errLostMeanwhile: the connection a renewal was to replace was lost.
var errLostMeanwhile = errors.New("the connection to replace was lost meanwhile; the reconnection loop takes over")

func (c *Client) renewFailed(why string, err error) error {
	err = fmt.Errorf("renewing the connection to the broker: %w", err)
	c.opts.Log.Error(err, "the renewal failed: the current connection serves on until it is lost, then the reconnection loop connects with the current credential",
		"reason", why)
	return err
}

// roundTrip writes lines, which end with a PING, to a renewal's new
// connection, and waits for the broker's PONG, within DialTimeout.
func (c *Client) roundTrip(nl *link, lines []byte) error {
	_ = nl.conn.SetWriteDeadline(time.Now().Add(c.opts.DialTimeout))
	if _, err := nl.conn.Write(lines); err != nil {
		return fmt.Errorf("subscribing: %w", err)
	}
	_ = nl.conn.SetWriteDeadline(time.Time{}) // the client's writes set their own
	t := time.NewTimer(c.opts.DialTimeout)
	defer t.Stop()
	select {
	case <-nl.ponged:
		return nil
	case <-nl.stopped:
		return fmt.Errorf("subscribing: %w", nl.err)
	case <-c.done:
		return ErrClosed
	case <-t.C:
		return fmt.Errorf("subscribing: the broker did not answer within %s (DialTimeout)", c.opts.DialTimeout)
	}
}

// writeDraining writes b to a renewal's old connection (Renew alone writes
// it once it is not the live one), within DialTimeout; a failure ends its
// drain as a loss.
func (c *Client) writeDraining(old *link, b []byte) {
	_ = old.conn.SetWriteDeadline(time.Now().Add(c.opts.DialTimeout))
	if _, err := old.conn.Write(b); err != nil {
		c.lost(old.conn, fmt.Errorf("draining the connection a renewal replaced: %w", err))
	}
}

// switchLocked makes nl the live connection in old's place, and returns
// the old connection's last publishes, followed by the PING whose PONG
// releases those published since (held), and the OnConnect callbacks.
// c.mu is held; no write is under way.
func (c *Client) switchLocked(old, nl *link) (final []byte, callbacks []func()) {
	final = make([]byte, 0, len(c.ctl)+len(c.out)+len(pingLine))
	final = append(final, c.ctl...)
	final = append(final, c.out...)
	final = append(final, pingLine...)
	c.subsMu.RLock()
	old.sids = make([]uint64, 0, len(c.subs))
	for sid := range c.subs {
		old.sids = append(old.sids, sid)
	}
	c.subsMu.RUnlock()
	old.sent = append(c.sent, ping{confirms: c.unconfirmed + c.outMsgs, waiters: c.waiting, release: true})
	c.sent, c.waiting, c.pingWanted, c.unconfirmed = nil, nil, false, 0
	c.ctl, c.out, c.outMsgs = c.ctl[:0], c.out[:0], 0
	for range nl.owedPongs {
		c.ctl = append(c.ctl, pongLine...)
	}
	c.conn, c.live = nl.conn, nl
	c.connWriter = rawsock.NewWriter(nl.conn, len(c.iovArray))
	c.readerStopped = nl.stopped
	c.pingsOut, c.lastPing = 0, time.Time{}
	c.info.Store(nl.info)
	c.pending, c.draining, c.held = nil, old, true
	c.room.Broadcast()
	return final, append([]func(){}, c.onConnect...)
}

// refresh makes every publisher of the broker match its subjects again
// before the old connection's UNSUBs: it subscribes a copy of one
// subscription on the live connection, unsubscribes it, and waits for the
// broker to confirm (within DialTimeout). nats-server caches a route's
// (another broker's) match results under the subscriptions' generation,
// which it reads after the match (v2.15): a match that raced with the new
// connection's SUBs leaves a result without them until the next change,
// and the message that the old connection's UNSUB then finds closed would
// go to no connection. The copy is that change, well before the UNSUBs.
// What arrives for the copy goes to the original's handler, counted as a
// possible duplicate.
func (c *Client) refresh() {
	c.mu.Lock()
	var copied *Subscription
	c.subsMu.Lock()
	for _, s := range c.subs {
		if !s.draining {
			copied = &Subscription{Subject: s.Subject, Queue: s.Queue, sid: c.nextSID.Add(1), handler: s.handler,
				draining: true, duplicate: true}
			c.subs[copied.sid] = copied
			break
		}
	}
	c.subsMu.Unlock()
	if copied != nil && c.conn != nil {
		c.ctl = appendSub(c.ctl, copied.Subject, copied.Queue, copied.sid)
		c.ctl = appendUnsub(c.ctl, copied.sid)
	}
	c.mu.Unlock()
	if copied == nil {
		return
	}
	_ = c.Flush(c.opts.DialTimeout)
	c.subsMu.Lock()
	delete(c.subs, copied.sid)
	c.subsMu.Unlock()
}
