package tlsreload_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weighstation/weighstation/internal/testcert"
	"github.com/weighstation/weighstation/internal/tlsreload"
)

// handshakeTimeout bounds every handshake of these tests.
const handshakeTimeout = 10 * time.Second

type testCA struct {
	cert *x509.Certificate
	key  crypto.Signer
}

var serial atomic.Int64

func newTestCA(t *testing.T, cn string) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{cert: cert, key: key}
}

// leaf issues a serving certificate for the names the operator's xDS
// Service would have, and 127.0.0.1, valid until notAfter.
func (ca testCA) leaf(t *testing.T, notAfter time.Time) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: "weighstation-xds"},
		DNSNames:     []string{"weighstation-xds", "weighstation-xds.weighstation-system.svc"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func pemOf(cas ...testCA) []byte {
	var out []byte
	for _, ca := range cas {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})...)
	}
	return out
}

// server is a TLS server on loopback whose certificate can be swapped while
// it runs, as the operator's is.
type server struct {
	addr string
	cert atomic.Pointer[tls.Certificate]
}

func startServer(t *testing.T, cert *tls.Certificate) *server {
	t.Helper()
	s := &server{}
	s.cert.Store(cert)
	s.addr = testcert.Serve(t, &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.cert.Load(), nil
		},
	}, handshakeTimeout)
	return s
}

// handshake connects to s with cfg and completes a TLS handshake.
func handshake(s *server, cfg *tls.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	defer cancel()
	conn, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", s.addr)
	if err != nil {
		return err
	}
	return conn.Close()
}

func isVerificationError(err error) bool {
	var v *tls.CertificateVerificationError
	return errors.As(err, &v)
}

// A server moved to a new CA is trusted as soon as the file holds that CA,
// without waiting for MaxAge and without a new config. A CA that left the
// file is no longer trusted once MaxAge has passed.
func TestFollowsCARotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ca.crt")
	old, next := newTestCA(t, "old"), newTestCA(t, "next")
	testcert.WriteAtomically(t, path, pemOf(old))
	now := time.Now()
	pool, err := tlsreload.NewReloadingPool(path, tlsreload.Options{MaxAge: time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	cfg := pool.ClientConfig("weighstation-xds.weighstation-system.svc")
	oldLeaf, nextLeaf := old.leaf(t, time.Now().Add(24*time.Hour)), next.leaf(t, time.Now().Add(24*time.Hour))
	s := startServer(t, oldLeaf)

	steps := []struct {
		name    string
		file    []byte        // nil: unchanged
		wait    time.Duration // advances the clock first
		leaf    *tls.Certificate
		trusted bool
	}{
		{"old CA, old leaf", nil, 0, oldLeaf, true},
		{"the server moved before the file", nil, 0, nextLeaf, false},
		{"both CAs in the file", pemOf(next, old), 0, nextLeaf, true},
		{"the old leaf during the overlap", nil, 0, oldLeaf, true},
		{"the old CA left the file", pemOf(next), 0, nextLeaf, true},
		{"the old leaf until MaxAge has passed", nil, 59 * time.Minute, oldLeaf, true},
		{"the old leaf after MaxAge", nil, time.Minute, oldLeaf, false},
	}
	for _, step := range steps {
		if step.file != nil {
			testcert.WriteAtomically(t, path, step.file)
		}
		now = now.Add(step.wait)
		s.cert.Store(step.leaf)
		err := handshake(s, cfg)
		switch {
		case step.trusted && err != nil:
			t.Fatalf("%s: handshake failed: %v", step.name, err)
		case !step.trusted && !isVerificationError(err):
			t.Fatalf("%s: handshake error %v, want a certificate verification error", step.name, err)
		}
	}
}

// The name checked is the one passed to ClientConfig or, when that is
// empty, the one set on the config's copy (as gRPC does from the target).
// With neither, nothing is trusted.
func TestServerName(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ca.crt")
	ca := newTestCA(t, "ca")
	testcert.WriteAtomically(t, path, pemOf(ca))
	pool, err := tlsreload.NewReloadingPool(path, tlsreload.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, ca.leaf(t, time.Now().Add(time.Hour)))
	tests := []struct {
		name       string
		serverName string // passed to ClientConfig
		setOnCopy  string // set on the config's clone, as gRPC does
		want       func(error) bool
	}{
		{"Service name", "weighstation-xds.weighstation-system.svc", "", isNil},
		{"short name", "weighstation-xds", "", isNil},
		{"IP address", "127.0.0.1", "", isNil},
		{"name not in the certificate", "other.weighstation-system.svc", "", isVerificationError},
		{"IP not in the certificate", "127.0.0.2", "", isVerificationError},
		{"name set on the copy", "", "weighstation-xds.weighstation-system.svc", isNil},
		{"wrong name set on the copy", "", "evil.example", isVerificationError},
		{"no name at all", "", "", func(err error) bool { return errors.Is(err, tlsreload.ErrNoServerName) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := pool.ClientConfig(tt.serverName).Clone()
			if tt.setOnCopy != "" {
				cfg.ServerName = tt.setOnCopy
			}
			if err := handshake(s, cfg); !tt.want(err) {
				t.Fatalf("handshake: %v", err)
			}
		})
	}
}

func isNil(err error) bool { return err == nil }

// A file that is missing or unusable for a while leaves the CAs read
// before in force.
func TestKeepsLastGoodCAs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ca.crt")
	ca := newTestCA(t, "ca")
	testcert.WriteAtomically(t, path, pemOf(ca))
	now := time.Now()
	clock := func() time.Time { return now }
	pool, err := tlsreload.NewReloadingPool(path, tlsreload.Options{MaxAge: time.Second, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, ca.leaf(t, time.Now().Add(time.Hour)))
	cfg := pool.ClientConfig("127.0.0.1")
	breakages := []struct {
		name      string
		breakFile func()
	}{
		{"garbage", func() { testcert.WriteAtomically(t, path, []byte("not PEM")) }},
		{"a key instead of certificates", func() {
			testcert.WriteAtomically(t, path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}}))
		}},
		{"a corrupt certificate", func() {
			testcert.WriteAtomically(t, path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2, 3}}))
		}},
		{"empty", func() { testcert.WriteAtomically(t, path, nil) }},
		{"missing", func() { os.Remove(path) }},
	}
	for _, b := range breakages {
		b.breakFile()
		now = now.Add(2 * time.Second) // past MaxAge: the next handshake reads the file
		if changed, err := pool.Reload(); err == nil || changed {
			t.Fatalf("%s: Reload = %v, %v; want an error and no change", b.name, changed, err)
		}
		if err := handshake(s, cfg); err != nil {
			t.Fatalf("%s: handshake failed with the last good CAs: %v", b.name, err)
		}
	}
}

// Pool reads the file again only once MaxAge has passed since the last
// read.
func TestPoolHonoursMaxAge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ca.crt")
	a, b := newTestCA(t, "a"), newTestCA(t, "b")
	testcert.WriteAtomically(t, path, pemOf(a))
	now := time.Now()
	pool, err := tlsreload.NewReloadingPool(path, tlsreload.Options{MaxAge: time.Minute, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	onlyA, both := x509.NewCertPool(), x509.NewCertPool()
	onlyA.AddCert(a.cert)
	both.AddCert(a.cert)
	both.AddCert(b.cert)

	testcert.WriteAtomically(t, path, pemOf(a, b))
	now = now.Add(59 * time.Second)
	if !pool.Pool().Equal(onlyA) {
		t.Fatal("the file was read again before MaxAge")
	}
	now = now.Add(time.Second)
	if !pool.Pool().Equal(both) {
		t.Fatal("the file was not read again after MaxAge")
	}
}

// Validity is judged by the injected clock.
func TestExpiredLeafIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ca.crt")
	ca := newTestCA(t, "ca")
	testcert.WriteAtomically(t, path, pemOf(ca))
	now := time.Now()
	pool, err := tlsreload.NewReloadingPool(path, tlsreload.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, ca.leaf(t, now.Add(time.Hour)))
	cfg := pool.ClientConfig("127.0.0.1")
	if err := handshake(s, cfg); err != nil {
		t.Fatalf("handshake before expiry: %v", err)
	}
	now = now.Add(2 * time.Hour)
	if err := handshake(s, cfg); !isVerificationError(err) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("handshake after expiry: %v, want an expiry error", err)
	}
}

func TestNewReloadingPoolRefusesUnusableFiles(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		data []byte // nil: no file
	}{
		{"missing", nil},
		{"empty", []byte{}},
		{"no certificate", []byte("-----BEGIN NOTHING-----\nAA==\n-----END NOTHING-----\n")},
		{"over the limit", make([]byte, tlsreload.MaxFileBytes+1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-"))
			if tt.data != nil {
				testcert.WriteAtomically(t, path, tt.data)
			}
			if _, err := tlsreload.NewReloadingPool(path, tlsreload.Options{}); err == nil {
				t.Fatal("NewReloadingPool accepted it")
			}
		})
	}
}

// The sidecar imports this package, and the sidecar carries no Kubernetes
// client.
func TestImportsNoKubernetesPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "k8s.io/") || strings.HasPrefix(pkg, "sigs.k8s.io/") {
			t.Errorf("tlsreload imports %s", pkg)
		}
	}
}
