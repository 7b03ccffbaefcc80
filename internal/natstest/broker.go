// Package natstest starts embedded nats-servers for tests.
package natstest

import (
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/broker"
)

// StartBroker runs an embedded nats-server on loopback until the test ends,
// on opts.Port or a random port. opts may be nil; its Host, NoLog and
// NoSigs are set.
func StartBroker(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	if opts == nil {
		opts = &server.Options{}
	}
	if opts.Port == 0 {
		opts.Port = -1 // a random port
	}
	opts.Host, opts.NoLog, opts.NoSigs = "127.0.0.1", true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("configuring nats-server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start within 10s")
	}
	t.Cleanup(s.Shutdown)
	return s
}

// Connect opens a nats.go connection that closes when the test ends.
func Connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connecting to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// FreeAddr returns a loopback address with a port that was free a moment
// ago, for a server the test starts itself.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}

// FreePort returns a loopback port that was free a moment ago. It is drawn
// from below Linux's ephemeral range (32768 and up by default), from which
// the kernel hands a port to every dialer and to every listener on port 0,
// other test processes running at once among them: a port from that range
// can be taken before the test binds it, and tests that start a broker
// late, or restart one, on a port chosen earlier failed now and then
// ("nats-server did not start").
func FreePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		port := freePortsFrom + rand.IntN(freePortsCount)
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			_ = l.Close()
			return port
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0") // all taken: the kernel's choice
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// The ports FreePort draws from: below the ephemeral range, above those
// services commonly use.
const (
	freePortsFrom  = 20_000
	freePortsCount = 12_000
)

// StartTrustingBroker runs weighstation's broker as the chart runs it with
// -trust-dir: files (the trust ConfigMap's data, by file name) are written
// into a directory it reads, and it listens on listen (host:port; port 0
// for any) until the test ends.
func StartTrustingBroker(t testing.TB, files map[string]string, listen string) *server.Server {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	trust, err := broker.ReadTrust(dir)
	if err != nil {
		t.Fatal(err)
	}
	o := broker.DefaultOptions
	o.Listen, o.Trust, o.AccountDir = listen, trust, t.TempDir()
	s, err := broker.New(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("the broker did not start within 10s")
	}
	t.Cleanup(s.Shutdown)
	return s
}
