package upstream

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/weighstation/weighstation/sidecar/rawsock"
)

// Credentials present the sidecar to the broker: a token, a user and
// password, or an nkey (NkeyPublic) or user JWT (UserJWT) that signs the
// broker's nonce with Sign.
type Credentials struct {
	Token          string
	User, Password string
	NkeyPublic     string
	UserJWT        func() (string, error)
	Sign           func(nonce []byte) ([]byte, error)
}

// connectOptions is the CONNECT a sidecar sends: headers and no_responders
// (the sidecar relays both), echo on (one connection carries every local
// application, which must hear each other), and no +OK.
type connectOptions struct {
	Verbose      bool   `json:"verbose"`
	Pedantic     bool   `json:"pedantic"`
	TLSRequired  bool   `json:"tls_required"`
	Name         string `json:"name,omitempty"`
	Lang         string `json:"lang"`
	Version      string `json:"version"`
	Protocol     int    `json:"protocol"`
	Echo         bool   `json:"echo"`
	Headers      bool   `json:"headers"`
	NoResponders bool   `json:"no_responders"`
	Token        string `json:"auth_token,omitempty"`
	User         string `json:"user,omitempty"`
	Pass         string `json:"pass,omitempty"`
	JWT          string `json:"jwt,omitempty"`
	Nkey         string `json:"nkey,omitempty"`
	Sig          string `json:"sig,omitempty"`
}

// connect makes one attempt: dial, INFO, TLS when asked for, CONNECT, and
// the broker's PONG (or its -ERR). On success the connection is installed
// with its subscriptions renewed ahead of the held publishes.
func (c *Client) connect() error {
	// The handshake's reads run the beforeRead hook, which only one
	// goroutine may run at a time (dispatch orders it), and no reader
	// should still hand over the previous connection's messages while the
	// next one's arrive: the previous connection's reader must have
	// stopped (it does soon: lost closed its connection).
	c.mu.Lock()
	previous := c.readerStopped
	c.mu.Unlock()
	if previous != nil {
		select {
		case <-previous:
		case <-c.done:
			return ErrClosed
		}
	}
	l, err := c.dial()
	if err != nil {
		return err
	}
	return c.install(l)
}

// dial makes one connection to the broker with the current Credentials:
// TCP within ConnectTimeout, then the handshake within DialTimeout. Its
// reader is not started.
func (c *Client) dial() (*link, error) {
	connectTimeout := c.opts.DialTimeout
	if c.opts.ConnectTimeout > 0 {
		connectTimeout = min(c.opts.ConnectTimeout, c.opts.DialTimeout)
	}
	conn, err := net.DialTimeout("tcp", c.server.Host, connectTimeout)
	if err != nil {
		return nil, err
	}
	conn, l, err := c.handshake(conn)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	return l, nil
}

// handshake reads the broker's INFO, starts TLS when asked for, sends
// CONNECT and waits for the broker's PONG. It returns the connection (the
// TLS one once started), to be closed on an error.
func (c *Client) handshake(conn net.Conn) (net.Conn, *link, error) {
	_ = conn.SetDeadline(time.Now().Add(c.opts.DialTimeout))
	hr := &hookedReader{r: rawsock.NewReader(conn), c: c}
	fr := c.framesFrom(hr, maxServerPayload)
	line, err := readLine(fr)
	if err != nil {
		return conn, nil, fmt.Errorf("reading the broker's INFO: %w", err)
	}
	info, err := parseInfo(line)
	if err != nil {
		return conn, nil, err
	}
	useTLS := c.opts.TLS != nil || info.TLSRequired || c.server.Scheme == "tls"
	if useTLS {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.opts.TLS != nil {
			cfg = c.opts.TLS.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = c.server.Hostname()
		}
		tc := tls.Client(conn, cfg)
		if err := tc.Handshake(); err != nil {
			return conn, nil, fmt.Errorf("TLS with the broker: %w", err)
		}
		conn = tc
		hr = &hookedReader{r: rawsock.NewReader(conn), c: c}
		fr = c.framesFrom(hr, maxServerPayload)
	}
	connect, err := c.connectLine(info, useTLS)
	if err != nil {
		return conn, nil, err
	}
	if _, err := conn.Write(connect); err != nil {
		return conn, nil, fmt.Errorf("sending CONNECT: %w", err)
	}
	for {
		line, err := readLine(fr)
		if err != nil {
			return conn, nil, fmt.Errorf("waiting for the broker to accept CONNECT: %w", err)
		}
		switch {
		case bytes.Equal(line, []byte("PONG")):
			_ = conn.SetDeadline(time.Time{})
			return conn, newLink(conn, fr, hr, info), nil
		case bytes.HasPrefix(line, []byte("-ERR")):
			return conn, nil, &BrokerError{Text: errText(line)}
		case bytes.HasPrefix(line, []byte("INFO ")):
			if newer, err := parseInfo(line); err == nil {
				info = newer
			}
		case bytes.Equal(line, []byte("PING")):
			if _, err := conn.Write([]byte("PONG\r\n")); err != nil {
				return conn, nil, err
			}
		}
	}
}

// BrokerError is a -ERR from the broker.
type BrokerError struct{ Text string }

func (e *BrokerError) Error() string { return "the broker answered: " + e.Text }

// IsAuthorization reports whether the broker refused the credentials.
func (e *BrokerError) IsAuthorization() bool {
	t := strings.ToLower(e.Text)
	return strings.Contains(t, "authorization") || strings.Contains(t, "authentication") || strings.Contains(t, "revoked") || strings.Contains(t, "expired")
}

func errText(line []byte) string {
	t := strings.TrimSpace(string(bytes.TrimPrefix(line, []byte("-ERR"))))
	return strings.Trim(t, "'")
}

func parseInfo(line []byte) (*ServerInfo, error) {
	js, ok := bytes.CutPrefix(line, []byte("INFO "))
	if !ok {
		return nil, fmt.Errorf("the broker sent %q where INFO was due: is it a NATS server?", truncate(line))
	}
	var info ServerInfo
	if err := json.Unmarshal(js, &info); err != nil {
		return nil, fmt.Errorf("the broker's INFO: %w", err)
	}
	if !info.Headers {
		return nil, errors.New("the broker does not support headers (nats-server 2.2 or later is needed)")
	}
	return &info, nil
}

func truncate(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "..."
	}
	return string(b)
}

func (c *Client) connectLine(info *ServerInfo, useTLS bool) ([]byte, error) {
	o := connectOptions{TLSRequired: useTLS, Name: c.opts.Name, Lang: "go", Version: "weighstation", Protocol: 1,
		Echo: true, Headers: true, NoResponders: true}
	cr := c.opts.Credentials
	if cr.Token == "" && cr.User == "" && cr.UserJWT == nil && cr.NkeyPublic == "" {
		cr = credentialsFromURL(c.server.User.Username(), c.server.User)
	}
	o.Token, o.User, o.Pass = cr.Token, cr.User, cr.Password
	if cr.UserJWT != nil {
		jwt, err := cr.UserJWT()
		if err != nil {
			return nil, fmt.Errorf("the broker credential: %w", err)
		}
		o.JWT = jwt
	}
	o.Nkey = cr.NkeyPublic
	if (o.JWT != "" || o.Nkey != "") && info.Nonce != "" {
		if cr.Sign == nil {
			return nil, errors.New("the broker credential has no key to sign the broker's nonce")
		}
		sig, err := cr.Sign([]byte(info.Nonce))
		if err != nil {
			return nil, fmt.Errorf("signing the broker's nonce: %w", err)
		}
		o.Sig = base64.RawURLEncoding.EncodeToString(sig)
	}
	js, err := json.Marshal(o)
	if err != nil {
		return nil, fmt.Errorf("encoding CONNECT: %w", err)
	}
	line := append([]byte("CONNECT "), js...)
	return append(line, "\r\nPING\r\n"...), nil
}

// credentialsFromURL: nats://user:pass@host, or nats://token@host.
func credentialsFromURL(user string, ui interface{ Password() (string, bool) }) Credentials {
	if user == "" {
		return Credentials{}
	}
	if pass, ok := ui.Password(); ok {
		return Credentials{User: user, Password: pass}
	}
	return Credentials{Token: user}
}

// install makes l the live connection: the subscriptions go first, then
// what was held (less what exceeds the broker's max_payload).
func (c *Client) install(l *link) error {
	conn, info := l.conn, l.info
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = conn.Close()
		return ErrClosed
	}
	// The subscriptions are read under mu: a Subscribe that added one
	// before this either is in the snapshot or, finding the connection
	// installed when it takes mu, sends its own SUB (a duplicate sid is
	// ignored by the broker).
	c.subsMu.RLock()
	ctl := make([]byte, 0, 64*len(c.subs))
	for sid, s := range c.subs {
		if !s.draining { // withdrawn: its UNSUB went with the old connection
			ctl = appendSub(ctl, s.Subject, s.Queue, sid)
		}
	}
	c.subsMu.RUnlock()
	c.info.Store(info)
	if c.heldMax > 0 && int64(c.heldMax) > info.MaxPayload {
		kept, dropped := dropOversize(c.out, int(info.MaxPayload))
		c.out, c.outMsgs = kept, c.outMsgs-dropped
		c.unsent.Add(uint64(dropped))
		c.opts.Log.Error(ErrMaxPayload, "the broker refused publishes held until it was reached", "refused", dropped, "maxPayload", info.MaxPayload)
	}
	c.heldMax = 0
	c.conn, c.live = conn, l
	c.connWriter = rawsock.NewWriter(conn, len(c.iovArray))
	c.readerStopped = l.stopped
	c.ctl = ctl
	c.pingsOut, c.unconfirmed, c.lastPing = 0, 0, time.Time{}
	first := c.connects.Add(1) == 1
	outage := time.Duration(0)
	if !c.lostAt.IsZero() {
		outage = time.Since(c.lostAt)
	}
	c.lastAuthErr = ""
	callbacks := append([]func(){}, c.onConnect...)
	c.room.Broadcast()
	c.mu.Unlock()

	c.wg.Add(1)
	go c.readLoop(l)
	c.kick()
	if first {
		c.opts.Log.Info("connected to the broker", "url", c.URL(), "server", info.ServerName, "version", info.Version)
	} else {
		n := c.reconnects.Add(1)
		c.opts.Log.Info("reconnected to the broker; subscriptions renewed", "url", c.URL(), "server", info.ServerName,
			"outage", outage.String(), "reconnects", n)
	}
	for _, f := range callbacks {
		f()
	}
	return nil
}

// lost takes conn down after err, once: what was written since the broker
// last confirmed is counted in doubt, waiting flushes fail, and the
// reconnection loop takes over. Held publishes stay.
//
// A connection that is not the live one is closed: a renewal's new one
// that failed, or the old one, whose drain then ends (what it carried
// unconfirmed is counted in doubt, and its flushes fail).
func (c *Client) lost(conn net.Conn, err error) {
	c.mu.Lock()
	if c.conn != conn || c.closed {
		var inDoubt int
		var waiters []func(error)
		if d := c.draining; d != nil && d.conn == conn && !c.closed {
			inDoubt, waiters = d.takePings()
			c.endDrainLocked(d, err)
		}
		c.mu.Unlock()
		_ = conn.Close()
		c.inDoubt.Add(uint64(inDoubt))
		for _, w := range waiters {
			w(ErrNotConnected)
		}
		c.kick() // publishes held for the drain may go
		return
	}
	c.conn, c.connWriter, c.live = nil, nil, nil
	c.ctl = c.ctl[:0]
	// What waited for the socket is held now, within the outage buffer's
	// bound like what is published from here on: the newest beyond it
	// are dropped, counted as unsent.
	if len(c.out) > c.opts.OutageBufferBytes {
		kept, dropped := keepHeld(c.out, c.opts.OutageBufferBytes)
		c.out, c.outMsgs = kept, c.outMsgs-dropped
		c.unsent.Add(uint64(dropped))
		c.opts.Log.Info("publishes waiting for the broker when it was lost exceed the outage buffer; the newest were dropped",
			"dropped", dropped, "outageBufferBytes", c.opts.OutageBufferBytes)
	}
	inDoubt := c.takeInDoubtLocked()
	waiters := c.failPingsLocked()
	c.lostAt = time.Now()
	c.room.Broadcast()
	c.mu.Unlock()
	_ = conn.Close()
	c.inDoubt.Add(uint64(inDoubt))
	for _, w := range waiters {
		w(ErrNotConnected)
	}
	select {
	case c.reconnect <- struct{}{}:
	default:
	}
	reason := "the connection ended"
	if err != nil {
		reason = err.Error()
	}
	c.opts.Log.Info("disconnected from the broker; reconnecting, publishes buffered meanwhile", "reason", reason,
		"retryEvery", c.opts.ReconnectWait.String(), "outageBufferBytes", c.opts.OutageBufferBytes, "inDoubt", inDoubt)
}

// Interrupt gives up the connection to the broker now, as if it were lost
// (reason is logged, and a reconnection follows unless the client is
// closed): a write blocked on it fails, and publishers waiting for room
// stop waiting (what they publish next is held, within OutageBufferBytes).
// For a sidecar that must stop without waiting for a broker that takes
// nothing, which PINGs would give up on only after PingInterval ×
// MaxPingsOut.
func (c *Client) Interrupt(reason error) {
	c.mu.Lock()
	conn := c.conn
	c.mu.Unlock()
	if conn != nil {
		c.lost(conn, reason)
	}
}

// takeInDoubtLocked is how many publishes were written and not yet
// confirmed (a write in progress included: writeLocked moves its messages
// here before it lets go of mu), which a lost or closed connection leaves
// in doubt; they are counted here once. c.mu is held; c.sent is left to
// failPingsLocked.
func (c *Client) takeInDoubtLocked() int {
	n := c.unconfirmed
	for _, p := range c.sent {
		n += p.confirms
	}
	c.unconfirmed = 0
	return n
}

// failPingsLocked forgets every PING of the connection and returns the
// flushes that waited on them, to be failed outside the lock.
func (c *Client) failPingsLocked() []func(error) {
	var waiters []func(error)
	for _, p := range c.sent {
		waiters = append(waiters, p.waiters...)
	}
	waiters = append(waiters, c.waiting...)
	c.sent, c.waiting, c.pingWanted = nil, nil, false
	return waiters
}

// keepConnected reconnects whenever the connection is down, until Close.
func (c *Client) keepConnected() {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		down := c.conn == nil
		c.mu.Unlock()
		if down {
			wait := c.opts.ReconnectWait
			if c.opts.ReconnectJitter > 0 {
				wait += rand.N(c.opts.ReconnectJitter)
			}
			select {
			case <-c.done:
				return
			case <-time.After(wait):
			}
			if err := c.connect(); err != nil {
				c.noteFailure(err)
			}
			continue
		}
		select {
		case <-c.done:
			return
		case <-c.reconnect:
		}
	}
}

// noteFailure logs a failed attempt when its reason is new: a broker that
// refuses the credential is retried every ReconnectWait, and one line per
// attempt would flood the log.
func (c *Client) noteFailure(err error) {
	var refused *BrokerError
	if c.opts.OnRefused != nil && errors.As(err, &refused) && refused.IsAuthorization() {
		c.opts.OnRefused(err)
	}
	c.mu.Lock()
	repeat := c.lastAuthErr == err.Error()
	c.lastAuthErr = err.Error()
	c.mu.Unlock()
	if repeat {
		return
	}
	var be *BrokerError
	if errors.As(err, &be) {
		c.opts.Log.Error(err, "the broker refused the connection; retrying", "url", c.URL())
		return
	}
	c.opts.Log.V(1).Info("the broker is not reachable; retrying", "url", c.URL(), "reason", err.Error())
}

// NkeyFromSeedFile reads an nkey seed (as nsc and nk write it) and returns
// the credentials that present its public key and sign with it.
func NkeyFromSeedFile(path string) (Credentials, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Credentials{}, err
	}
	seed := bytes.TrimSpace(raw)
	if i := bytes.Index(seed, []byte("SU")); i > 0 {
		seed = seed[i:] // a creds-style file: the seed line among others
		if eol := bytes.IndexAny(seed, "\r\n"); eol >= 0 {
			seed = seed[:eol]
		}
	}
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		return Credentials{}, fmt.Errorf("%s holds no nkey seed: %w", path, err)
	}
	public, err := kp.PublicKey()
	if err != nil {
		return Credentials{}, err
	}
	return Credentials{NkeyPublic: public, Sign: kp.Sign}, nil
}

// TLSFromCAFile returns a TLS configuration that verifies the broker
// against the CAs in a PEM file.
func TLSFromCAFile(path string) (*tls.Config, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
