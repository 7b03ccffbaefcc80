// Package testcert issues certificates for tests: a CA, and serving
// certificates from it written as a kubernetes.io/tls Secret volume holds
// them. Tests only: its keys are made on the spot and never kept.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// CA is a certificate authority valid for an hour either side of now.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// PEM is Cert, PEM-encoded.
	PEM []byte
}

// NewCA makes a CA named name.
func NewCA(t testing.TB, name string) CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Pair is a certificate and its key, PEM-encoded (the key as PKCS #8).
type Pair struct{ CertPEM, KeyPEM []byte }

// IssueServing issues a serving certificate for dnsNames (the first is its
// common name) and ips, with a random serial, so that two issued in a row
// tell apart.
func (ca CA) IssueServing(t testing.TB, dnsNames []string, ips []net.IP) Pair {
	t.Helper()
	key := newKey(t)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, DNSNames: dnsNames, IPAddresses: ips,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if len(dnsNames) > 0 {
		tmpl.Subject.CommonName = dnsNames[0]
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return Pair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
}

// WriteSecretVolume writes p into dir as a kubernetes.io/tls Secret's
// volume holds it (tls.crt, tls.key). Each file is replaced whole (renamed
// into place), as the kubelet's swap of the volume does; the key goes
// first, so a reader between the two renames sees a key that does not
// match its certificate and keeps the pair it had.
func WriteSecretVolume(t testing.TB, dir string, p Pair) {
	t.Helper()
	for _, f := range []struct {
		name string
		data []byte
	}{{"tls.key", p.KeyPEM}, {"tls.crt", p.CertPEM}} {
		WriteAtomically(t, filepath.Join(dir, f.name), f.data)
	}
}

// WriteAtomically replaces path as the kubelet updates a mounted volume:
// the new content appears whole, under a new inode (written beside it,
// then renamed into place).
func WriteAtomically(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// Serve serves TLS with cfg on loopback until the test ends, and returns
// its address. It completes each handshake (the client's verdict arrives
// as an alert or a close), then holds the connection until the client
// closes it or timeout passes.
func Serve(t testing.TB, cfg *tls.Config, timeout time.Duration) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(timeout))
				_ = conn.(*tls.Conn).Handshake()
				_, _ = conn.Read(make([]byte, 1))
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}
