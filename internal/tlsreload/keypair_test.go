package tlsreload_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weighstation/weighstation/internal/tlsreload"
)

// pairPEM is a certificate and its key as a kubernetes.io/tls Secret
// holds them.
func pairPEM(t *testing.T, cert *tls.Certificate) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, der := range cert.Certificate {
		certPEM = append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key})
}

// secretVolume is a directory laid out as the kubelet lays out a Secret
// volume: each file is a symbolic link through ..data, which points to a
// timestamped directory; an update writes a new directory and swaps
// ..data, so that readers see every file change at once.
type secretVolume struct {
	t       *testing.T
	dir     string
	version int
}

func newSecretVolume(t *testing.T, files map[string][]byte) *secretVolume {
	t.Helper()
	v := &secretVolume{t: t, dir: t.TempDir()}
	v.update(files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(v.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

func (v *secretVolume) path(name string) string { return filepath.Join(v.dir, name) }

// update swaps in a new set of files, as the kubelet's atomic writer does.
func (v *secretVolume) update(files map[string][]byte) {
	v.t.Helper()
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	v.version++
	ts := fmt.Sprintf("..%d", v.version)
	if err := os.Mkdir(filepath.Join(v.dir, ts), 0o755); err != nil {
		v.t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(v.dir, ts, name), data, 0o600); err != nil {
			v.t.Fatal(err)
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, old)); err != nil {
			v.t.Fatal(err)
		}
	}
}

func tlsFiles(t *testing.T, cert *tls.Certificate) map[string][]byte {
	t.Helper()
	certPEM, keyPEM := pairPEM(t, cert)
	return map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM}
}

func serialOf(t *testing.T, cert *tls.Certificate) string {
	t.Helper()
	if cert == nil || len(cert.Certificate) == 0 {
		t.Fatal("no certificate")
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber.String()
}

// A Secret volume that the kubelet updates is seen at the next call,
// however long MaxAge is: the swap of ..data changes the files that the
// links lead to.
func TestKeyPairFollowsASecretVolume(t *testing.T) {
	a, b := newTestCA(t, "a").leaf(t, time.Now().Add(time.Hour)), newTestCA(t, "b").leaf(t, time.Now().Add(time.Hour))
	vol := newSecretVolume(t, tlsFiles(t, a))
	pair, err := tlsreload.NewKeyPair("the test certificate", vol.path("tls.crt"), vol.path("tls.key"), tlsreload.Options{MaxAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := serialOf(t, pair.Certificate()), serialOf(t, a); got != want {
		t.Fatalf("serving serial %s, want the first pair's %s", got, want)
	}
	vol.update(tlsFiles(t, b))
	got, err := pair.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if serialOf(t, got) != serialOf(t, b) {
		t.Fatalf("serving serial %s after the update, want the new pair's %s", serialOf(t, got), serialOf(t, b))
	}
}

// Files that are missing, half-written or do not match leave the pair
// read before in use; the next good pair replaces it.
func TestKeyPairKeepsTheLastGoodPair(t *testing.T) {
	ca := newTestCA(t, "ca")
	good := ca.leaf(t, time.Now().Add(time.Hour))
	vol := newSecretVolume(t, tlsFiles(t, good))
	pair, err := tlsreload.NewKeyPair("the test certificate", vol.path("tls.crt"), vol.path("tls.key"), tlsreload.Options{MaxAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	other := tlsFiles(t, ca.leaf(t, time.Now().Add(time.Hour)))
	goodFiles := tlsFiles(t, good)
	for _, b := range []struct {
		name  string
		files map[string][]byte
	}{
		{"a key of another certificate", map[string][]byte{"tls.crt": other["tls.crt"], "tls.key": goodFiles["tls.key"]}},
		{"garbage", map[string][]byte{"tls.crt": []byte("not PEM"), "tls.key": goodFiles["tls.key"]}},
		{"half a certificate", map[string][]byte{"tls.crt": goodFiles["tls.crt"][:len(goodFiles["tls.crt"])/2], "tls.key": goodFiles["tls.key"]}},
		{"no key", map[string][]byte{"tls.crt": goodFiles["tls.crt"]}},
	} {
		vol.update(b.files)
		if got := serialOf(t, pair.Certificate()); got != serialOf(t, good) {
			t.Fatalf("%s: serving serial %s, want the last good pair's %s", b.name, got, serialOf(t, good))
		}
	}
	vol.update(other)
	next, _ := tls.X509KeyPair(other["tls.crt"], other["tls.key"])
	if got := serialOf(t, pair.Certificate()); got != serialOf(t, &next) {
		t.Fatalf("serving serial %s once the files are good again, want %s", got, serialOf(t, &next))
	}
}

// ed25519Pair issues a certificate whose PEM has the same length for every
// serial of the same length (Ed25519 signatures have a fixed size), so a
// test can rewrite a file without changing its size.
func ed25519Pair(t *testing.T, caKey ed25519.PrivateKey, ca *x509.Certificate, serial int64) (certPEM, keyPEM []byte) {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "webhook"},
		DNSNames:     []string{"webhook.mesh.svc"},
		NotBefore:    time.Unix(1_700_000_000, 0),
		NotAfter:     time.Unix(1_900_000_000, 0),
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, pub, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

// A rewrite in place that keeps each file's size and mtime looks
// unchanged to a stat; it is read once MaxAge has passed since the last
// read, and not before.
func TestKeyPairHonoursMaxAge(t *testing.T) {
	caPub, caKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Unix(1_700_000_000, 0), NotAfter: time.Unix(1_900_000_000, 0),
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caPub, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	certA, keyA := ed25519Pair(t, caKey, ca, 10)
	certB, keyB := ed25519Pair(t, caKey, ca, 11)
	if len(certA) != len(certB) || len(keyA) != len(keyB) || bytes.Equal(certA, certB) {
		t.Fatalf("the two pairs differ in size (%d/%d, %d/%d): the test cannot hide the rewrite", len(certA), len(certB), len(keyA), len(keyB))
	}
	for path, data := range map[string][]byte{certPath: certA, keyPath: keyA} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	pair, err := tlsreload.NewKeyPair("the test certificate", certPath, keyPath, tlsreload.Options{MaxAge: time.Minute, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	// Rewrite both files in place (same inode, same size), and put their
	// mtimes back.
	for path, data := range map[string][]byte{certPath: certB, keyPath: keyB} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(59 * time.Second)
	if got := serialOf(t, pair.Certificate()); got != "10" {
		t.Fatalf("serial %s before MaxAge, want 10: the unchanged-looking files were read again", got)
	}
	now = now.Add(time.Second)
	if got := serialOf(t, pair.Certificate()); got != "11" {
		t.Fatalf("serial %s at MaxAge, want 11: the files were not read again", got)
	}
}

// A pair that cannot be used at start is an error that names it, so that
// the program stops where it is seen.
func TestNewKeyPairRefusesUnusableFiles(t *testing.T) {
	ca := newTestCA(t, "ca")
	a, b := tlsFiles(t, ca.leaf(t, time.Now().Add(time.Hour))), tlsFiles(t, ca.leaf(t, time.Now().Add(time.Hour)))
	for _, c := range []struct {
		name  string
		files map[string][]byte
		want  string
	}{
		{"no files", nil, "reading the test certificate"},
		{"no key", map[string][]byte{"tls.crt": a["tls.crt"]}, "reading the test certificate"},
		{"a key of another certificate", map[string][]byte{"tls.crt": a["tls.crt"], "tls.key": b["tls.key"]}, "the test certificate"},
		{"not PEM", map[string][]byte{"tls.crt": []byte("x"), "tls.key": []byte("y")}, "tls.crt and key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range c.files {
				if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, err := tlsreload.NewKeyPair("the test certificate", filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), tlsreload.Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("NewKeyPair = %v, want an error with %q", err, c.want)
			}
		})
	}
}
