package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/weighstation/weighstation/controllers/pki"
	"github.com/weighstation/weighstation/internal/envtestsuite"
)

// TestInjectionKeepsWorkingThroughRotations: with lifetimes of seconds
// (they are options), the webhook's serving certificate is renewed several
// times and the operator's CA rotates (the new CA is trusted, in the
// caBundle, before it signs), while the apiserver keeps calling the
// webhook with failurePolicy Fail: every pod created meanwhile is
// injected. Meanwhile the xDS server serves with certificates from the
// same Authority: a sidecar's stream opened before the rotation carries
// every change through it without reconnecting, and sidecars that start
// during it (new handshakes, trusting the bundle file as the kubelet
// refreshes it) are configured. Certificates are backdated 5 minutes (clock skew), so with
// lifetimes this short the CA is due at once and a leaf at each
// handshake: the test sees many renewals and one rotation in seconds.
func TestInjectionKeepsWorkingThroughRotations(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	operatorNS := envtestsuite.NewNamespace(t, k8sClient, "weighstation-system-")
	bundleChanged := make(chan struct{}, 1)
	authority, err := pki.New(k8sClient, k8sClient, pki.Options{
		Namespace: operatorNS, DNSNames: []string{"weighstation-xds"}, Log: testr.New(t),
		// The CA rotates after 12 s and its successor signs 5 s later; a
		// leaf is renewed after 4 s.
		CALifetime: 30 * time.Second, CARotateAt: 0.4, SigningDelay: 5 * time.Second,
		LeafLifetime: 8 * time.Second, LeafRenewAt: 0.5, CheckInterval: 500 * time.Millisecond,
		OnBundleChange: func([]byte) {
			select {
			case bundleChanged <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := authority.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &Server{
		GetCertificate: authority.NewServingCertificate([]string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)}).GetCertificate,
		Injector:       &Injector{Config: testConfig(), Keys: testKey, Namespaces: k8sClient, Excluded: ExcludedNamespaces(operatorNS)},
		Log:            testr.New(t),
	}
	cfg := webhookConfiguration(t, "rotation-"+operatorNS, fmt.Sprintf("https://%s%s", ln.Addr(), Path), operatorNS)
	cfg.Webhooks[0].NamespaceSelector.MatchLabels = map[string]string{"rotation-test": operatorNS}
	if err := k8sClient.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	bundle := &CABundle{Reader: k8sClient, Writer: k8sClient, Name: cfg.Name, Bundle: authority.Bundle, Changed: bundleChanged, Interval: time.Second, Log: testr.New(t)}
	done := make(chan error, 3)
	go func() { done <- srv.Serve(ctx, ln) }()
	go func() { done <- authority.Start(ctx) }()
	go func() { done <- bundle.Start(ctx) }()
	t.Cleanup(func() {
		_ = k8sClient.Delete(context.Background(), cfg)
		cancel()
		for range 3 {
			if err := <-done; err != nil {
				t.Errorf("a runnable ended with %v", err)
			}
		}
	})
	ns := newNamespace(t, map[string]string{"weighstation.io/inject": "enabled", "rotation-test": operatorNS})
	// Until the caBundle is written and the apiserver has loaded it, pods
	// are refused (Fail): wait for the first injected one.
	envtestsuite.Eventually(t, eventuallyTimeout, poll, "the apiserver calling the webhook", func() error {
		pod := appPod()
		pod.Name, pod.Namespace, pod.GenerateName = "", ns, "first-"
		if err := k8sClient.Create(ctx, pod); err != nil {
			return err
		}
		if _, ok := pod.Annotations[InjectedAnnotation]; !ok {
			return errors.New("a pod was stored without the sidecar")
		}
		return nil
	})

	streams := startXDSThroughRotation(ctx, t, authority)

	// Until the new CA has signed a leaf and that leaf was renewed once.
	serials, issuers := map[string]bool{}, map[string]bool{}
	maxCAs, pods := 0, 0
	deadline := time.Now().Add(40 * time.Second)
	for len(issuers) < 2 || len(serials) < 4 || !streams.sawRotation() {
		if time.Now().After(deadline) {
			t.Fatalf("after 40s: %d webhook serving certificates from %d CAs (want 4 from 2), %d xDS ones from %d CAs (want 2 from 2), bundles of up to %d CAs",
				len(serials), len(issuers), len(streams.serials), len(streams.issuers), maxCAs)
		}
		if _, ok := createPod(t, ns, nil, nil).Annotations[InjectedAnnotation]; !ok {
			t.Fatalf("pod %d was stored without the sidecar", pods)
		}
		pods++
		streams.step(ctx, t)
		leaf, cas := served(t, ln.Addr().String(), authority.Bundle())
		serials[leaf.SerialNumber.String()], issuers[leaf.Issuer.CommonName] = true, true
		maxCAs = max(maxCAs, cas)
	}
	if maxCAs < 2 {
		t.Errorf("the bundle never held the old and the new CA together (at most %d)", maxCAs)
	}
	t.Logf("%d pods injected through %d serving certificates from %d CAs", pods, len(serials), len(issuers))
	streams.check(t)
}

// served handshakes with the webhook as the apiserver does, trusting
// bundle, and returns the leaf it serves and how many CAs bundle holds.
func served(t *testing.T, addr string, bundle []byte) (*x509.Certificate, int) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		t.Fatal("the bundle holds no certificate")
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("a handshake with the webhook, trusting the current bundle: %v", err)
	}
	defer conn.Close()
	cas := 0
	for rest := bundle; ; {
		var ok bool
		if rest, ok = nextPEM(rest); !ok {
			break
		}
		cas++
	}
	return conn.ConnectionState().PeerCertificates[0], cas
}

// nextPEM skips one PEM block of data.
func nextPEM(data []byte) ([]byte, bool) {
	block, rest := pem.Decode(data)
	return rest, block != nil
}
