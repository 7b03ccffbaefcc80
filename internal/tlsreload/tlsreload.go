// Package tlsreload gives a TLS client a set of trusted CAs that follows a
// PEM file, such as the operator's CA bundle ConfigMap mounted into a pod.
// When the operator rotates its CA and the kubelet updates the file, new
// connections trust the new CA without a restart.
//
// Trust is checked once, at the handshake, so the file is read when a
// handshake needs it: at most every MaxAge, and again at once when a
// server's certificate fails to verify against what was read before.
// Nothing runs in the background.
//
// KeyPair does the same for a server's (or a client's) own certificate and
// key, such as a mounted kubernetes.io/tls Secret: the broker's route
// certificate, and the webhook's serving certificate when cert-manager
// issues it.
//
// The sidecar uses this package, so it must import nothing from Kubernetes
// (k8s.io, sigs.k8s.io). Its test checks that.
package tlsreload

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// MaxFileBytes bounds the CA file. A bundle holds a few CA certificates of
// about 1 KiB each, so a larger file is a mistake, not a bundle.
const MaxFileBytes = 1 << 20

// DefaultMaxAge is how long a read of the file is used before handshakes
// read it again. Reads are cheap, since the file is small and in the page
// cache. The age also bounds how late a changed bundle is seen by a
// handshake that would verify anyway.
const DefaultMaxAge = 10 * time.Second

// Options configure a ReloadingPool. Zero values take the defaults.
type Options struct {
	// MaxAge is how long a read of the file is used (DefaultMaxAge).
	MaxAge time.Duration
	// Now is the clock for MaxAge and for certificate validity
	// (time.Now).
	Now func() time.Time
	// Log receives reloads and files that cannot be used.
	Log logr.Logger
}

// ReloadingPool holds the CAs of a PEM file and reads the file again when
// a handshake needs it. Use NewReloadingPool. It is safe for concurrent
// use.
type ReloadingPool struct {
	path string
	opts Options

	mu     sync.Mutex
	pool   *x509.CertPool
	data   []byte    // the file's content that pool holds
	readAt time.Time // when the file was last read, successfully or not
}

// NewReloadingPool reads path and returns a pool of its CAs. It fails if
// the file cannot be read or holds no certificate: a client that starts
// with no trust can never connect, and should say so.
func NewReloadingPool(path string, opts Options) (*ReloadingPool, error) {
	if opts.MaxAge <= 0 {
		opts.MaxAge = DefaultMaxAge
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	p := &ReloadingPool{path: path, opts: opts}
	if _, err := p.Reload(); err != nil {
		return nil, err
	}
	return p, nil
}

// Reload reads the file now. It reports whether the trusted CAs changed.
// If the file cannot be read or used, the CAs read before stay trusted and
// the error is returned. A file caught while missing or half-written then
// costs nothing. (The kubelet swaps a ConfigMap volume's files atomically,
// but not every writer does.)
func (p *ReloadingPool) Reload() (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reloadLocked()
}

func (p *ReloadingPool) reloadLocked() (bool, error) {
	p.readAt = p.opts.Now()
	data, err := readFile(p.path)
	if err != nil {
		return false, err
	}
	if p.pool != nil && bytes.Equal(data, p.data) {
		return false, nil
	}
	pool, n, err := parsePool(data)
	if err != nil {
		return false, fmt.Errorf("%s: %w", p.path, err)
	}
	p.pool, p.data = pool, data
	p.opts.Log.Info("loaded the trusted CAs", "file", p.path, "certificates", n)
	return true, nil
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%s is over the %d-byte limit", path, MaxFileBytes)
	}
	return data, nil
}

// parsePool reads every certificate of a PEM bundle. It ignores blocks
// other than certificates, as tls and openssl do, but it needs at least
// one certificate, and every certificate must parse.
func parsePool(data []byte) (*x509.CertPool, int, error) {
	pool := x509.NewCertPool()
	n := 0
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, 0, fmt.Errorf("parsing a certificate: %w", err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, 0, errors.New("no PEM certificate")
	}
	return pool, n, nil
}

// Pool returns the trusted CAs, reading the file first if the last read is
// older than MaxAge. If that read fails, the CAs read before stay in use,
// and the failure is logged.
func (p *ReloadingPool) Pool() *x509.CertPool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.opts.Now().Sub(p.readAt) >= p.opts.MaxAge {
		if _, err := p.reloadLocked(); err != nil {
			p.opts.Log.Error(err, "keeping the CAs read before")
		}
	}
	return p.pool
}

// ClientConfig returns a client tls.Config that verifies the server
// against the file's CAs as they are at each handshake. serverName is the
// name that the server's certificate must carry (a DNS name or an IP
// address). If it is empty, the name in the connection's own config is
// used, which gRPC fills in from the target address. gRPC's
// credentials.NewTLS accepts this config.
//
// The config sets InsecureSkipVerify only to replace Go's verification,
// which would use a RootCAs pool fixed when the config is copied (gRPC
// copies it for every connection). VerifyConnection does the whole
// verification instead: chain, validity, server-auth usage and name.
func (p *ReloadingPool) ClientConfig(serverName string) *tls.Config {
	return &tls.Config{
		ServerName:         serverName,
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, //nolint:gosec // VerifyConnection verifies, against the reloaded CAs.
		VerifyConnection: func(cs tls.ConnectionState) error {
			return p.VerifyConnection(cs, serverName)
		},
	}
}

// ErrNoServerName is returned when there is no name to check the server's
// certificate against. Accepting any name would accept any certificate
// that the CA signed.
var ErrNoServerName = errors.New("no server name to verify the certificate against")

// VerifyConnection verifies the server's certificate chain of cs against
// the trusted CAs, for serverName (cs.ServerName when empty). If the chain
// does not verify, it reads the file again at once and retries, so that a
// server already on a new CA is trusted as soon as the file has it.
func (p *ReloadingPool) VerifyConnection(cs tls.ConnectionState, serverName string) error {
	if serverName == "" {
		// cs.ServerName is what the client sent as SNI, which Go leaves
		// empty for an IP address.
		serverName = cs.ServerName
	}
	if serverName == "" {
		return ErrNoServerName
	}
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the server sent no certificate")
	}
	return p.verifyReloading(cs, serverName, x509.ExtKeyUsageServerAuth)
}

// VerifyClient verifies the client's certificate chain of cs (on the
// server's side of a handshake) against the trusted CAs, for client
// authentication and no name. It retries as VerifyConnection does.
func (p *ReloadingPool) VerifyClient(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the client sent no certificate")
	}
	return p.verifyReloading(cs, "", x509.ExtKeyUsageClientAuth)
}

// verifyReloading verifies cs's chain for usage and name ("": any), and
// when it does not verify reads the file again at once and retries, so
// that a peer already on a new CA is trusted as soon as the file has it.
func (p *ReloadingPool) verifyReloading(cs tls.ConnectionState, name string, usage x509.ExtKeyUsage) error {
	err := p.verify(p.Pool(), cs, name, usage)
	if err == nil {
		return nil
	}
	p.mu.Lock()
	changed, rerr := p.reloadLocked()
	pool := p.pool
	p.mu.Unlock()
	if rerr != nil {
		p.opts.Log.Error(rerr, "keeping the CAs read before")
	}
	if changed {
		err = p.verify(pool, cs, name, usage)
	}
	return err
}

func (p *ReloadingPool) verify(pool *x509.CertPool, cs tls.ConnectionState, name string, usage x509.ExtKeyUsage) error {
	opts := x509.VerifyOptions{
		Roots:         pool,
		DNSName:       name,
		Intermediates: x509.NewCertPool(),
		CurrentTime:   p.opts.Now(),
		KeyUsages:     []x509.ExtKeyUsage{usage},
	}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
	}
	return nil
}
