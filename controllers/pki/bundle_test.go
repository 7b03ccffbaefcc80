package pki_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/weighstation/weighstation/controllers/pki"
	"github.com/weighstation/weighstation/internal/testcert"
	"github.com/weighstation/weighstation/internal/tlsreload"
)

func getConfigMap(t *testing.T, ns, name string) *corev1.ConfigMap {
	t.Helper()
	var cm corev1.ConfigMap
	if err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &cm); err != nil {
		t.Fatalf("reading ConfigMap %s/%s: %v", ns, name, err)
	}
	return &cm
}

// PublishBundle creates the ConfigMap, leaves it alone while the bundle is
// the same (its resourceVersion does not move), and updates it when the
// bundle changes, keeping what others added.
func TestPublishBundle(t *testing.T) {
	ctx := context.Background()
	opNs, appNs := newNamespace(t), newNamespace(t)
	c := newClock()
	a := newAuthority(t, testOptions(t, opNs, c), nil)
	if err := a.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := (pki.BundleConfigMap{}).Read(ctx, k8sClient, appNs); err != nil || got != nil {
		t.Fatalf("Read before publishing: %q, %v; want nothing", got, err)
	}

	if err := pki.PublishBundle(ctx, k8sClient, appNs, a.Bundle()); err != nil {
		t.Fatal(err)
	}
	cm := getConfigMap(t, appNs, pki.DefaultBundleConfigMapName)
	if cm.Data[pki.BundleKey] != string(a.Bundle()) || cm.Labels[pki.BundleLabel] != "true" {
		t.Fatalf("published ConfigMap: data %v, labels %v", cm.Data, cm.Labels)
	}

	// Someone labels it (kubectl label); the bundle's publisher keeps out of
	// their way.
	cm.Labels["team"] = "payments"
	if err := k8sClient.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := pki.PublishBundle(ctx, k8sClient, appNs, a.Bundle()); err != nil {
			t.Fatal(err)
		}
	}
	if again := getConfigMap(t, appNs, pki.DefaultBundleConfigMapName); again.ResourceVersion != cm.ResourceVersion {
		t.Fatalf("an unchanged bundle was written again: resourceVersion %s, then %s", cm.ResourceVersion, again.ResourceVersion)
	}

	c.Add(60 * day) // rotate
	if err := a.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pki.PublishBundle(ctx, k8sClient, appNs, a.Bundle()); err != nil {
		t.Fatal(err)
	}
	updated := getConfigMap(t, appNs, pki.DefaultBundleConfigMapName)
	if updated.ResourceVersion == cm.ResourceVersion || updated.Data[pki.BundleKey] != string(a.Bundle()) {
		t.Fatal("the rotated bundle was not published")
	}
	if updated.Labels["team"] != "payments" {
		t.Fatal("publishing dropped a label someone else set")
	}
	if n := len(parseBundle(t, []byte(updated.Data[pki.BundleKey]))); n != 2 {
		t.Fatalf("the published bundle holds %d CAs during the overlap, want 2", n)
	}
	if got, err := (pki.BundleConfigMap{}).Read(ctx, k8sClient, appNs); err != nil || !bytes.Equal(got, a.Bundle()) {
		t.Fatalf("Read: %v", err)
	}
	published, err := (pki.BundleConfigMap{}).ListPublished(ctx, k8sClient)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(published[appNs], a.Bundle()) {
		t.Fatalf("ListPublished does not list %s with the current bundle", appNs)
	}
	if _, ok := published[opNs]; ok {
		t.Fatalf("ListPublished lists %s, where nothing was published", opNs)
	}
}

func TestPublishBundleRefusesWhatIsNotABundle(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	a := newAuthority(t, testOptions(t, ns, newClock()), nil)
	if err := a.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	leafPEM := pemOfCert(servedLeaf(t, a))
	tests := []struct {
		name   string
		bundle []byte
	}{
		{"empty", nil},
		{"garbage", []byte("not PEM")},
		{"a leaf", leafPEM},
		{"a CA and a leaf", append(a.Bundle(), leafPEM...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := pki.PublishBundle(ctx, k8sClient, ns, tt.bundle); !errors.Is(err, pki.ErrInvalidBundle) {
				t.Fatalf("PublishBundle: %v, want ErrInvalidBundle", err)
			}
		})
	}
	if got, err := (pki.BundleConfigMap{}).Read(ctx, k8sClient, ns); err != nil || got != nil {
		t.Fatalf("something was published: %q, %v", got, err)
	}
}

// A configured name is used instead of the default.
func TestPublishBundleWithAnotherName(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	a := newAuthority(t, testOptions(t, ns, newClock()), nil)
	if err := a.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	b := pki.BundleConfigMap{Name: "mesh-ca"}
	if err := b.Publish(ctx, k8sClient, ns, a.Bundle()); err != nil {
		t.Fatal(err)
	}
	if got := getConfigMap(t, ns, "mesh-ca"); got.Data[pki.BundleKey] != string(a.Bundle()) {
		t.Fatal("not published under the configured name")
	}
}

// dialTLS completes a handshake with the server at addr and returns the
// leaf it presented.
func dialTLS(addr string, cfg *tls.Config) (*x509.Certificate, error) {
	ctx, cancel := context.WithTimeout(context.Background(), eventuallyTimeout)
	defer cancel()
	conn, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0], nil
}

// mountBundle writes the published ConfigMap's bundle to the file a
// sidecar reads, as the kubelet does (whole, by rename).
func mountBundle(t *testing.T, ns, path string) {
	t.Helper()
	cm := getConfigMap(t, ns, pki.DefaultBundleConfigMapName)
	if err := os.WriteFile(path+".tmp", []byte(cm.Data[pki.BundleKey]), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// A client that trusts the published bundle completes a real handshake with
// a server that serves GetCertificate, by each of the Service's names and
// by IP. Through a rotation, a sidecar that re-reads the mounted bundle
// keeps trusting the server, and the server never restarts. A client that
// kept the bundle from before the rotation stops trusting the server once
// the new CA signs, and that is why the delay exists.
func TestHandshakeWithThePublishedBundle(t *testing.T) {
	ctx := context.Background()
	opNs, appNs := newNamespace(t), newNamespace(t)
	c := newClock()
	a := newAuthority(t, testOptions(t, opNs, c), nil)
	ensureAndPublish := func() {
		t.Helper()
		if err := a.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		if err := pki.PublishBundle(ctx, k8sClient, appNs, a.Bundle()); err != nil {
			t.Fatal(err)
		}
	}
	ensureAndPublish()
	addr := testcert.Serve(t, a.TLSConfig(), eventuallyTimeout)

	published := x509.NewCertPool()
	if !published.AppendCertsFromPEM([]byte(getConfigMap(t, appNs, pki.DefaultBundleConfigMapName).Data[pki.BundleKey])) {
		t.Fatal("no certificate in the published bundle")
	}
	for _, name := range append(pki.ServiceDNSNames(xdsService, opNs), "127.0.0.1") {
		leaf, err := dialTLS(addr, &tls.Config{RootCAs: published, ServerName: name, Time: c.Now, MinVersion: tls.VersionTLS13})
		if err != nil {
			t.Fatalf("handshake as %s: %v", name, err)
		}
		if !leaf.Equal(servedLeaf(t, a)) {
			t.Fatal("the server presented another certificate than GetCertificate returns")
		}
	}
	if _, err := dialTLS(addr, &tls.Config{RootCAs: published, ServerName: xdsService + ".elsewhere.svc", Time: c.Now}); err == nil {
		t.Fatal("the certificate was accepted for a name it does not carry")
	}

	// The sidecar's side: the mounted ConfigMap, read again by tlsreload.
	path := filepath.Join(t.TempDir(), pki.BundleKey)
	mountBundle(t, appNs, path)
	pool, err := tlsreload.NewReloadingPool(path, tlsreload.Options{MaxAge: time.Hour, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	sidecar := pool.ClientConfig(xdsService + "." + opNs + ".svc")
	stale := &tls.Config{RootCAs: published, ServerName: xdsService + "." + opNs + ".svc", Time: c.Now, MinVersion: tls.VersionTLS13}
	steps := []struct {
		name       string
		wait       time.Duration
		staleTrust bool // whether a client with the pre-rotation bundle still trusts the server
	}{
		{"before the rotation", 0, true},
		{"rotated: the old CA still signs", 60 * day, true},
		{"the new CA signs", time.Hour, false},
		{"the old CA expired", 30 * day, false},
	}
	for _, step := range steps {
		c.Add(step.wait)
		ensureAndPublish()
		mountBundle(t, appNs, path)
		leaf, err := dialTLS(addr, sidecar)
		if err != nil {
			t.Fatalf("%s: the sidecar's handshake: %v", step.name, err)
		}
		if !leaf.Equal(servedLeaf(t, a)) {
			t.Fatalf("%s: the server did not pick up the current certificate", step.name)
		}
		if _, err := dialTLS(addr, stale); (err == nil) != step.staleTrust {
			t.Fatalf("%s: a client with the old bundle: %v, want trusted: %v", step.name, err, step.staleTrust)
		}
	}
}

func pemOfCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}
