package broker

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// keyPairFiles is a certificate and its key read from two files, such as a
// mounted kubernetes.io/tls Secret, and read again when they change: the
// kubelet updates a mounted Secret in place, and the operator renews the
// route certificate long before it expires, so a running broker must pick
// up the new pair at its next handshake rather than at its next restart.
//
// Handshakes on routes are rare (one per peer, again on reconnect), so the
// files are checked at every handshake: a stat of each, and a read when
// either looks changed or the last read is older than maxAge (a write that
// keeps size and mtime would otherwise go unseen). It is safe for
// concurrent use.
type keyPairFiles struct {
	certPath, keyPath string
	maxAge            time.Duration
	log               logr.Logger

	mu       sync.Mutex
	cert     *tls.Certificate
	certData []byte
	keyData  []byte
	certStat os.FileInfo
	keyStat  os.FileInfo
	readAt   time.Time
}

// newKeyPairFiles reads the pair once, so that a wrong path or a key that
// does not match its certificate stops the broker at start, where it is
// seen, rather than at its first route.
func newKeyPairFiles(certPath, keyPath string, maxAge time.Duration, log logr.Logger) (*keyPairFiles, error) {
	k := &keyPairFiles{certPath: certPath, keyPath: keyPath, maxAge: maxAge, log: log}
	if err := k.reloadLocked(); err != nil {
		return nil, err
	}
	return k, nil
}

// get returns the current pair, reading the files again if they changed.
// A pair that cannot be read or used keeps the one read before in use:
// the files may be caught half-written, and the old certificate is still
// valid for a while.
func (k *keyPairFiles) get() (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.changedLocked() {
		if err := k.reloadLocked(); err != nil {
			k.log.Error(err, "keeping the route certificate read before")
		}
	}
	return k.cert, nil
}

// changedLocked reports whether either file looks different from when it
// was last read, or that read is older than maxAge.
func (k *keyPairFiles) changedLocked() bool {
	if time.Since(k.readAt) >= k.maxAge {
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

func (k *keyPairFiles) reloadLocked() error {
	k.readAt = time.Now()
	// Stat before reading: a change between the two is then seen as a
	// change at the next handshake, never missed.
	certStat, err1 := os.Stat(k.certPath)
	keyStat, err2 := os.Stat(k.keyPath)
	certData, err3 := os.ReadFile(k.certPath)
	keyData, err4 := os.ReadFile(k.keyPath)
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			return fmt.Errorf("reading the route certificate: %w", err)
		}
	}
	k.certStat, k.keyStat = certStat, keyStat
	if k.cert != nil && bytes.Equal(certData, k.certData) && bytes.Equal(keyData, k.keyData) {
		return nil
	}
	cert, err := tls.X509KeyPair(certData, keyData)
	if err != nil {
		return fmt.Errorf("route certificate %s and key %s: %w", k.certPath, k.keyPath, err)
	}
	k.cert, k.certData, k.keyData = &cert, certData, keyData
	k.log.Info("loaded the route certificate", "file", k.certPath, "subject", cert.Leaf.Subject.String(), "notAfter", cert.Leaf.NotAfter)
	return nil
}
