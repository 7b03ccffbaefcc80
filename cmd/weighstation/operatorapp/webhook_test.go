package operatorapp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/weighstation/weighstation/controllers/pki"
	"github.com/weighstation/weighstation/controllers/webhook"
	"github.com/weighstation/weighstation/internal/testcert"
)

// writeWebhookPair writes a serving certificate from ca for the webhook
// Service's DNS names and 127.0.0.1 (a webhook registered by URL) into
// dir, as a mounted kubernetes.io/tls Secret holds it.
func writeWebhookPair(t *testing.T, dir string, ca testcert.CA) {
	t.Helper()
	testcert.WriteSecretVolume(t, dir, ca.IssueServing(t, pki.ServiceDNSNames("weighstation-sidecar-injector", "weighstation-system"), []net.IP{net.IPv4(127, 0, 0, 1)}))
}

// fakeManager is the part of a manager that webhookRunnables reads; the
// test never starts it, nor sends the webhook an admission request.
type fakeManager struct{ ctrl.Manager }

func (fakeManager) GetCache() cache.Cache       { return nil }
func (fakeManager) GetAPIReader() client.Reader { return nil }
func (fakeManager) GetClient() client.Client    { return nil }

func typesOf(runnables []manager.Runnable) string {
	types := make([]string, len(runnables))
	for i, r := range runnables {
		types[i] = fmt.Sprintf("%T", r)
	}
	return "[" + strings.Join(types, " ") + "]"
}

// With -webhook-cert-dir the operator runs the webhook server alone, with
// no caBundle writer, and the server presents the files' certificate,
// the new one at the first handshake after the files change. Without it,
// it runs the caBundle writer beside the server.
func TestWebhookRunnables(t *testing.T) {
	opts := NewOptions()
	opts.Namespace = "weighstation-system"
	opts.Webhook.Configuration, opts.Webhook.Listen = webhook.DefaultConfigurationName, "127.0.0.1:0"
	authority, err := pki.New(nil, nil, pki.Options{Namespace: opts.Namespace, DNSNames: []string{"weighstation-xds"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("from its CA", func(t *testing.T) {
		runnables := webhookRunnables(fakeManager{}, authority, &opts, webhookParts{}, logr.Discard())
		if len(runnables) != 2 {
			t.Fatalf("runnables %s, want the server and the caBundle writer", typesOf(runnables))
		}
		if _, ok := runnables[1].(*webhook.CABundle); !ok {
			t.Errorf("runnables %s, want a *webhook.CABundle second", typesOf(runnables))
		}
	})

	first, second := testcert.NewCA(t, "first"), testcert.NewCA(t, "second")
	dir := t.TempDir()
	writeWebhookPair(t, dir, first)
	opts.Webhook.CertDir = dir
	files, err := opts.servingFiles(logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	runnables := webhookRunnables(fakeManager{}, authority, &opts, webhookParts{files: files}, logr.Discard())
	if len(runnables) != 1 {
		t.Fatalf("runnables %s, want the server alone: no caBundle writer with -webhook-cert-dir", typesOf(runnables))
	}
	server, ok := runnables[0].(*webhook.Server)
	if !ok {
		t.Fatalf("runnable %T, want *webhook.Server", runnables[0])
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- server.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	// handshake connects as the apiserver does, trusting ca alone, and
	// returns the serial of the certificate the server presented.
	handshake := func(ca testcert.CA) (*big.Int, error) {
		roots := x509.NewCertPool()
		roots.AddCert(ca.Cert)
		dialer := &tls.Dialer{Config: &tls.Config{RootCAs: roots, ServerName: "weighstation-sidecar-injector.weighstation-system.svc", MinVersion: tls.VersionTLS12}}
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
		defer dcancel()
		conn, err := dialer.DialContext(dctx, "tcp", ln.Addr().String())
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		return conn.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber, nil
	}
	if _, err := handshake(first); err != nil {
		t.Fatalf("a client trusting the first CA: %v", err)
	}
	writeWebhookPair(t, dir, second)
	if _, err := handshake(second); err != nil {
		t.Fatalf("a client trusting the second CA, after the files changed: %v", err)
	}
	if _, err := handshake(first); err == nil {
		t.Fatal("a client trusting the first CA alone still verifies the server after the files changed")
	}
}

// A -webhook-cert-dir without a usable certificate and key stops the
// operator, naming the flag; one for another Service is served, and said.
func TestWebhookCertDirErrors(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Namespace: "ns", Webhook: WebhookOptions{Configuration: webhook.DefaultConfigurationName, CertDir: dir, Service: "s"}}
	if _, err := opts.servingFiles(logr.Discard()); err == nil || !strings.Contains(err.Error(), "-webhook-cert-dir "+dir+": reading the webhook's serving certificate") {
		t.Errorf("servingFiles of an empty directory: %v, want an error naming -webhook-cert-dir", err)
	}
	if err := os.WriteFile(filepath.Join(dir, corev1.TLSCertKey), testcert.NewCA(t, "ca").PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, corev1.TLSPrivateKeyKey), []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := opts.servingFiles(logr.Discard()); err == nil || !strings.Contains(err.Error(), "-webhook-cert-dir "+dir) {
		t.Errorf("servingFiles of a bad key: %v, want an error naming -webhook-cert-dir", err)
	}
	if files, err := (&Options{Webhook: WebhookOptions{Configuration: webhook.DefaultConfigurationName}}).servingFiles(logr.Discard()); files != nil || err != nil {
		t.Errorf("servingFiles without -webhook-cert-dir = %v, %v; want nothing: the operator's CA", files, err)
	}

	// A certificate for another Service is served (its issuer may fix
	// it, and the next one is read without a restart), and said.
	writeWebhookPair(t, dir, testcert.NewCA(t, "ca"))
	var logged strings.Builder
	log := funcr.New(func(prefix, args string) { logged.WriteString(args + "\n") }, funcr.Options{})
	opts.Webhook.Service, opts.Namespace = "another-injector", "weighstation-system"
	if files, err := opts.servingFiles(log); err != nil || files == nil {
		t.Fatalf("servingFiles of a certificate for another Service = %v, %v; want it served", files, err)
	}
	if !strings.Contains(logged.String(), "does not name its Service") || !strings.Contains(logged.String(), "another-injector.weighstation-system.svc") {
		t.Errorf("a certificate for another Service is not said; the logs:\n%s", logged.String())
	}
}
