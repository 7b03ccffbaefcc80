package tlsreload

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

// KeyPair is a certificate and its key read from two files, such as a
// mounted kubernetes.io/tls Secret (tls.crt, tls.key), and read again when
// they change: the kubelet updates a mounted Secret in place when its
// issuer renews it (the operator for the brokers' routes, cert-manager for
// the webhook), so a running server must pick up the new pair at its next
// handshake rather than at its next restart.
//
// The files are checked at every handshake: a stat of each, and a read
// when either looks changed or the last read is older than MaxAge (a write
// that keeps size and mtime would otherwise go unseen). A stat is cheap
// next to a handshake, and it follows the symbolic links through which the
// kubelet swaps a Secret volume's files at once. It is safe for concurrent
// use.
type KeyPair struct {
	what              string
	certPath, keyPath string
	opts              Options

	mu       sync.Mutex
	cert     *tls.Certificate
	certData []byte
	keyData  []byte
	certStat os.FileInfo
	keyStat  os.FileInfo
	readAt   time.Time
}

// NewKeyPair reads the pair once, so that a wrong path or a key that does
// not match its certificate stops the program at start, where it is seen,
// rather than at its first handshake. what names the certificate in errors
// and logs ("the route certificate").
func NewKeyPair(what, certPath, keyPath string, opts Options) (*KeyPair, error) {
	if opts.MaxAge <= 0 {
		opts.MaxAge = DefaultMaxAge
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	k := &KeyPair{what: what, certPath: certPath, keyPath: keyPath, opts: opts}
	if err := k.reloadLocked(); err != nil {
		return nil, err
	}
	return k, nil
}

// Certificate returns the current pair, reading the files again if they
// changed. A pair that cannot be read or used keeps the one read before
// in use: the files may be caught half-written, and the old certificate
// is still valid for a while.
func (k *KeyPair) Certificate() *tls.Certificate {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.changedLocked() {
		if err := k.reloadLocked(); err != nil {
			k.opts.Log.Error(err, "keeping "+k.what+" read before")
		}
	}
	return k.cert
}

// GetCertificate is Certificate for tls.Config.GetCertificate.
func (k *KeyPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return k.Certificate(), nil
}

// GetClientCertificate is Certificate for
// tls.Config.GetClientCertificate.
func (k *KeyPair) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return k.Certificate(), nil
}

// changedLocked reports whether either file looks different from when it
// was last read, or that read is older than MaxAge.
func (k *KeyPair) changedLocked() bool {
	if k.opts.Now().Sub(k.readAt) >= k.opts.MaxAge {
		return true
	}
	for _, f := range []struct {
		path string
		seen os.FileInfo
	}{{k.certPath, k.certStat}, {k.keyPath, k.keyStat}} {
		st, err := os.Stat(f.path)
		if err != nil || f.seen == nil || !os.SameFile(st, f.seen) ||
			st.Size() != f.seen.Size() || !st.ModTime().Equal(f.seen.ModTime()) {
			return true
		}
	}
	return false
}

func (k *KeyPair) reloadLocked() error {
	k.readAt = k.opts.Now()
	// Stat before reading: a change between the two is then seen as a
	// change at the next handshake, never missed.
	certStat, err1 := os.Stat(k.certPath)
	keyStat, err2 := os.Stat(k.keyPath)
	certData, err3 := readFile(k.certPath)
	keyData, err4 := readFile(k.keyPath)
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			return fmt.Errorf("reading %s: %w", k.what, err)
		}
	}
	k.certStat, k.keyStat = certStat, keyStat
	if k.cert != nil && bytes.Equal(certData, k.certData) && bytes.Equal(keyData, k.keyData) {
		return nil
	}
	cert, err := tls.X509KeyPair(certData, keyData)
	if err != nil {
		return fmt.Errorf("%s %s and key %s: %w", k.what, k.certPath, k.keyPath, err)
	}
	k.cert, k.certData, k.keyData = &cert, certData, keyData
	k.opts.Log.Info("loaded "+k.what, "file", k.certPath, "subject", cert.Leaf.Subject.String(), "notAfter", cert.Leaf.NotAfter)
	return nil
}
