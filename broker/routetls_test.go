package broker_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/broker"
	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/internal/testcert"
)

// testCA signs route certificates for a test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

var (
	bothUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	serverOnly = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
)

// issue returns the PEM of a certificate for localhost and 127.0.0.1 that
// ca signs, and of its key.
func (ca *testCA) issue(t *testing.T, usages []x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "broker"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

// secretDir writes a mounted route TLS Secret: a certificate that signer
// issues, with the given usages, and trust in trusted.
func secretDir(t *testing.T, signer *testCA, usages []x509.ExtKeyUsage, trusted *testCA) *broker.RouteTLS {
	t.Helper()
	dir := t.TempDir()
	o := &broker.RouteTLS{
		CertFile: filepath.Join(dir, "tls.crt"),
		KeyFile:  filepath.Join(dir, "tls.key"),
		CAFile:   filepath.Join(dir, "ca.crt"),
	}
	certPEM, keyPEM := signer.issue(t, usages)
	testcert.WriteAtomically(t, o.CertFile, certPEM)
	testcert.WriteAtomically(t, o.KeyFile, keyPEM)
	testcert.WriteAtomically(t, o.CAFile, trusted.pem)
	return o
}

// handshakeLog is a nats-server logger that reports the route TLS
// handshakes that failed, so that a test waits for a refusal to happen
// instead of sleeping and hoping it did.
type handshakeLog struct{ failed chan string }

func newHandshakeLog() *handshakeLog { return &handshakeLog{failed: make(chan string, 16)} }

func (l *handshakeLog) Errorf(format string, v ...any) {
	if msg := fmt.Sprintf(format, v...); strings.Contains(msg, "TLS route handshake error") {
		select {
		case l.failed <- msg:
		default: // enough are queued to show that it happens
		}
	}
}
func (*handshakeLog) Noticef(string, ...any) {}
func (*handshakeLog) Warnf(string, ...any)   {}
func (*handshakeLog) Fatalf(string, ...any)  {}
func (*handshakeLog) Debugf(string, ...any)  {}
func (*handshakeLog) Tracef(string, ...any)  {}

func (l *handshakeLog) waitForFailure(t *testing.T, who string) {
	t.Helper()
	select {
	case msg := <-l.failed:
		t.Logf("%s refused a route: %s", who, msg)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s saw no failed route handshake within 10s", who)
	}
}

// tlsBroker is a started broker with route TLS.
type tlsBroker struct {
	*server.Server
	route string // its route URL, by name, as the chart's are
	log   *handshakeLog
}

func startTLS(t *testing.T, rt *broker.RouteTLS, routes ...string) *tlsBroker {
	t.Helper()
	addr := natstest.FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	o := broker.DefaultOptions
	o.Listen, o.Token, o.ClusterListen, o.Routes, o.RouteTLS = "127.0.0.1:0", "s", addr, routes, rt
	s, err := broker.New(o)
	if err != nil {
		t.Fatal(err)
	}
	l := newHandshakeLog()
	s.SetLoggerV2(l, false, false, false)
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("broker did not start")
	}
	t.Cleanup(s.Shutdown)
	// By name: nats-server checks the peer's certificate for the route
	// URL's host, and Go sends no server name for an IP address.
	return &tlsBroker{Server: s, route: "nats://localhost:" + port, log: l}
}

// messageCrosses publishes on from until a subscriber on to receives the
// message: routes form asynchronously.
func messageCrosses(t *testing.T, from, to *tlsBroker) {
	t.Helper()
	sub := natstest.Connect(t, to.ClientURL(), nats.Token("s"))
	got := make(chan struct{}, 1)
	if _, err := sub.Subscribe("across", func(*nats.Msg) {
		select {
		case got <- struct{}{}:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	pub := natstest.Connect(t, from.ClientURL(), nats.Token("s"))
	deadline := time.After(15 * time.Second)
	for {
		if err := pub.Publish("across", []byte("hello")); err != nil {
			t.Fatal(err)
		}
		select {
		case <-got:
			return
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatal("no message crossed the route within 15s")
		}
	}
}

func TestBrokersFormAClusterOverTLS(t *testing.T) {
	ca := newTestCA(t, "route-ca")
	a := startTLS(t, secretDir(t, ca, bothUsages, ca))
	b := startTLS(t, secretDir(t, ca, bothUsages, ca), a.route)
	messageCrosses(t, b, a)
	messageCrosses(t, a, b)
}

// TestRouteTLSRefusesStrangers: a broker whose certificate the CA did not
// sign, or signed for serving only, forms no route, on either side of the
// handshake, while a good pair beside it does (the sentinel: it shows
// that the refused route had every chance to form).
func TestRouteTLSRefusesStrangers(t *testing.T) {
	ca, other := newTestCA(t, "route-ca"), newTestCA(t, "another-ca")
	tests := []struct {
		name   string
		signer *testCA
		usages []x509.ExtKeyUsage
		dials  bool // whether the stranger dials, or is dialed
	}{
		{"another CA's certificate dials", other, bothUsages, true},
		{"another CA's certificate is dialed", other, bothUsages, false},
		{"a serving-only certificate dials", ca, serverOnly, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			good := func(routes ...string) *tlsBroker {
				return startTLS(t, secretDir(t, ca, bothUsages, ca), routes...)
			}
			// The stranger trusts the right CA: only its own certificate
			// is wrong.
			stranger := secretDir(t, tc.signer, tc.usages, ca)
			a := good()
			var s, b, verifier *tlsBroker
			if tc.dials {
				s = startTLS(t, stranger, a.route)
				b = good(a.route)
				verifier = a // as the server, it checks the dialer's certificate
			} else {
				s = startTLS(t, stranger)
				b = good(a.route, s.route)
				verifier = b // as the client, it checks the server's certificate
			}
			messageCrosses(t, b, a)
			verifier.log.waitForFailure(t, "the good broker")
			if n := s.NumRoutes(); n != 0 {
				t.Fatalf("the stranger has %d routes, want none", n)
			}
		})
	}
}

// TestRotatedRouteCertificateIsUsed: a broker starts with a certificate
// its peer refuses; once the files hold a good one, the peer's next
// attempt forms the route, with no restart.
func TestRotatedRouteCertificateIsUsed(t *testing.T) {
	ca, other := newTestCA(t, "route-ca"), newTestCA(t, "another-ca")
	files := secretDir(t, other, bothUsages, ca)
	a := startTLS(t, files)
	b := startTLS(t, secretDir(t, ca, bothUsages, ca), a.route)
	b.log.waitForFailure(t, "the peer, before the rotation")
	certPEM, keyPEM := ca.issue(t, bothUsages)
	testcert.WriteAtomically(t, files.CertFile, certPEM)
	testcert.WriteAtomically(t, files.KeyFile, keyPEM)
	messageCrosses(t, b, a)
}
