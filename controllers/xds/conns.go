package xds

import (
	"net"
	"sync"
	"time"
)

// refusedConnLinger is how long a connection whose stream this replica
// refused (not the leader, or not synced) stays open: long enough for the
// refusal to reach the sidecar, so that it logs why.
const refusedConnLinger = 100 * time.Millisecond

// connTracker is the listener's connections by remote address, so that the
// server can close the one a refused stream came on.
//
// Why: a sidecar holds one HTTP/2 connection to the operator's xDS Service
// and retries its streams on it. A stream refused because this replica
// does not serve (a standby, or a former leader restarted in its pod before
// it took its label off) would be retried on the same connection for ever,
// however the Service's endpoints change: found on a real node, where
// sidecars kept reaching the SIGKILLed leader's restarted container and
// never the new leader. Closing the connection makes the sidecar dial the
// Service again, which now routes to the leader.
type connTracker struct {
	net.Listener
	mu    sync.Mutex
	conns map[string]net.Conn
}

func newConnTracker(l net.Listener) *connTracker {
	return &connTracker{Listener: l, conns: map[string]net.Conn{}}
}

func (t *connTracker) Accept() (net.Conn, error) {
	c, err := t.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, t: t, key: c.RemoteAddr().String()}
	t.mu.Lock()
	t.conns[tc.key] = tc
	t.mu.Unlock()
	return tc, nil
}

// closeSoon closes the connection from remote after refusedConnLinger; it
// reports whether there is one.
func (t *connTracker) closeSoon(remote net.Addr) bool {
	if remote == nil {
		return false
	}
	t.mu.Lock()
	c := t.conns[remote.String()]
	t.mu.Unlock()
	if c == nil {
		return false
	}
	time.AfterFunc(refusedConnLinger, func() { _ = c.Close() })
	return true
}

type trackedConn struct {
	net.Conn
	t    *connTracker
	key  string
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.t.mu.Lock()
		if c.t.conns[c.key] == net.Conn(c) {
			delete(c.t.conns, c.key)
		}
		c.t.mu.Unlock()
	})
	return c.Conn.Close()
}
