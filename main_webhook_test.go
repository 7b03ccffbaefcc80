package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/pki"
	"github.com/weighstation/weighstation/controllers/webhook"
	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/internal/proctest"
)

// TestOperatorServesTheInjectionWebhook: the operator process, under its
// generated RBAC, serves the webhook and reads namespaces' labels from its
// cache: a pod created in a labelled namespace is stored with the sidecar.
// Its serving certificate comes from its own CA, whose bundle it writes
// into the webhook configuration it is named, or, with -webhook-cert-dir,
// from files that another issuer (cert-manager) keeps, with the caBundle
// left to that issuer: here the test plays cert-manager and its
// cainjector, and renews the certificate from a new CA while the operator
// runs.
func TestOperatorServesTheInjectionWebhook(t *testing.T) {
	t.Run("from its CA", func(t *testing.T) {
		run := startWebhookOperator(t, nil)
		waitFor(t, "the operator writes the caBundle", func() error {
			var got admissionregistrationv1.MutatingWebhookConfiguration
			if err := run.c.Get(context.Background(), client.ObjectKeyFromObject(run.cfg), &got); err != nil {
				return err
			}
			if len(got.Webhooks[0].ClientConfig.CABundle) == 0 {
				return errors.New("no caBundle yet")
			}
			return nil
		})
		run.checkInjects(t)
		noRBACRefusals(t, run.logs.String())
	})
	t.Run("from -webhook-cert-dir", func(t *testing.T) {
		first, second := newWebhookCA(t, "first"), newWebhookCA(t, "second")
		dir := t.TempDir()
		writeWebhookPair(t, dir, first)
		run := startWebhookOperator(t, &webhookFiles{dir: dir, caBundle: first.pem})
		// Until the apiserver has read the configuration, and the
		// operator's cache is synced, calls fail: checkInjects retries.
		run.checkInjects(t)
		// cert-manager renews the certificate from another CA: its
		// cainjector writes the new CA into the configuration, and the
		// kubelet updates the mounted Secret. Pods are injected once both
		// have happened, which needs the operator to serve the new files.
		writeWebhookPair(t, dir, second)
		setCABundle(t, run.c, run.cfg.Name, second.pem)
		run.checkInjects(t)
		var got admissionregistrationv1.MutatingWebhookConfiguration
		if err := run.c.Get(context.Background(), client.ObjectKeyFromObject(run.cfg), &got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Webhooks[0].ClientConfig.CABundle, second.pem) {
			t.Errorf("caBundle is not the one the issuer wrote: the operator wrote it with -webhook-cert-dir set")
		}
		out := run.logs.String()
		if strings.Contains(out, "does not name its Service") {
			t.Errorf("the operator warns about a certificate that names its Service:\n%s", out)
		}
		noRBACRefusals(t, out)
	})
}

// webhookFiles is the -webhook-cert-dir mode of startWebhookOperator: the
// directory, and the caBundle the configuration starts with (what
// cainjector writes).
type webhookFiles struct {
	dir      string
	caBundle []byte
}

// webhookRun is an apiserver and an operator that serves its webhook.
type webhookRun struct {
	c    client.Client
	cfg  *admissionregistrationv1.MutatingWebhookConfiguration
	logs *proctest.LockedBuffer
	// xdsPort is the operator's, which the sidecar's default -operator
	// address carries.
	xdsPort string
}

// startWebhookOperator starts an apiserver with the webhook configuration
// registered by URL, and the operator serving it, with files when given.
func startWebhookOperator(t *testing.T, files *webhookFiles) webhookRun {
	t.Helper()
	const ns = "weighstation-system"
	c, kubeconfig := startAPIServer(t, ns)
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	webhookAddr, probeAddr, xdsAddr := natstest.FreeAddr(t), natstest.FreeAddr(t), natstest.FreeAddr(t)
	url := "https://" + webhookAddr + webhook.Path
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: webhook.DefaultConfigurationName},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    webhook.Name,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url},
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			TimeoutSeconds:          ptr.To[int32](5),
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{ns, "kube-system"},
			}}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
		}},
	}
	args := []string{"operator", "-namespace", ns, "-leader-elect=false",
		"-metrics-bind-address", "0", "-health-probe-bind-address", probeAddr, "-xds-listen", xdsAddr,
		"-webhook-configuration", webhook.DefaultConfigurationName, "-webhook-listen", webhookAddr,
		"-sidecar-image", "ghcr.io/weighstation/weighstation:test", "-sidecar-broker", "nats://weighstation-broker.weighstation-system.svc:4222"}
	if files != nil {
		cfg.Webhooks[0].ClientConfig.CABundle = files.caBundle
		args = append(args, "-webhook-cert-dir", files.dir)
	}
	if err := c.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}

	logs := &proctest.LockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the operator's logs:\n%s", logs)
		}
	})
	cmd := exec.Command(buildBinary(t), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	_, xdsPort, err := net.SplitHostPort(xdsAddr)
	if err != nil {
		t.Fatal(err)
	}
	return webhookRun{c: c, cfg: cfg, logs: logs, xdsPort: xdsPort}
}

// checkInjects creates a labelled namespace and waits for a pod created
// there to be stored with the sidecar. Until the apiserver trusts the
// webhook's certificate, its calls fail (and the pod with them,
// failurePolicy Fail): it retries.
func (r webhookRun) checkInjects(t *testing.T) {
	t.Helper()
	ctx, c := context.Background(), r.c
	app := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "shop-", Labels: map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled}}}
	if err := c.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a pod in a labelled namespace stored with the sidecar", func() error {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: app.Name, GenerateName: "app-"},
			Spec:       corev1.PodSpec{ServiceAccountName: "app", Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}
		if err := c.Create(ctx, pod); err != nil {
			return err
		}
		if len(pod.Spec.InitContainers) != 1 || pod.Spec.InitContainers[0].Name != webhook.ContainerName || pod.Spec.InitContainers[0].Image != "ghcr.io/weighstation/weighstation:test" {
			return fmt.Errorf("stored without the sidecar: init containers %+v", pod.Spec.InitContainers)
		}
		if got := pod.Spec.InitContainers[0].Args; !slices.Contains(got, "-operator=weighstation-xds.weighstation-system.svc:"+r.xdsPort) {
			return fmt.Errorf("sidecar args %q lack the default -operator address", got)
		}
		return nil
	})
}

// setCABundle writes bundle into every webhook of the configuration, as
// cert-manager's cainjector does.
func setCABundle(t *testing.T, c client.Client, name string, bundle []byte) {
	t.Helper()
	ctx := context.Background()
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &cfg); err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Webhooks {
		cfg.Webhooks[i].ClientConfig.CABundle = bundle
	}
	if err := c.Update(ctx, &cfg); err != nil {
		t.Fatal(err)
	}
}

// webhookCA is a CA that signs webhook serving certificates, as an issuer
// of cert-manager's would.
type webhookCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newWebhookCA(t *testing.T, name string) webhookCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
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
	return webhookCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// writeWebhookPair issues a serving certificate for the webhook Service's
// DNS names and 127.0.0.1 (the tests register the webhook by URL), and
// writes it into dir as a kubernetes.io/tls Secret volume holds it. Each
// file is replaced whole (renamed into place), as the kubelet's swap of
// the volume does.
func writeWebhookPair(t *testing.T, dir string, ca webhookCA) {
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
		SerialNumber: serial, Subject: pkix.Name{CommonName: "weighstation-sidecar-injector.weighstation-system.svc"},
		DNSNames:    []string{"weighstation-sidecar-injector.weighstation-system.svc", "weighstation-sidecar-injector.weighstation-system.svc.cluster.local"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	// A reader between the two renames sees a key that does not match
	// its certificate, keeps the pair it had, and reads again at its
	// next handshake.
	for _, f := range []struct {
		name string
		data []byte
	}{
		{corev1.TLSPrivateKeyKey, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})},
		{corev1.TLSCertKey, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})},
	} {
		tmp := filepath.Join(dir, "."+f.name+".tmp")
		if err := os.WriteFile(tmp, f.data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, f.name)); err != nil {
			t.Fatal(err)
		}
	}
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
	flags := webhookFlags{
		configuration: webhook.DefaultConfigurationName, listen: "127.0.0.1:0",
		service: "weighstation-sidecar-injector", namespace: "weighstation-system",
	}
	authority, err := pki.New(nil, nil, pki.Options{Namespace: flags.namespace, DNSNames: []string{"weighstation-xds"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("from its CA", func(t *testing.T) {
		runnables := webhookRunnables(fakeManager{}, authority, flags, webhook.Config{}, nil, logr.Discard())
		if len(runnables) != 2 {
			t.Fatalf("runnables %s, want the server and the caBundle writer", typesOf(runnables))
		}
		if _, ok := runnables[1].(*webhook.CABundle); !ok {
			t.Errorf("runnables %s, want a *webhook.CABundle second", typesOf(runnables))
		}
	})

	first, second := newWebhookCA(t, "first"), newWebhookCA(t, "second")
	dir := t.TempDir()
	writeWebhookPair(t, dir, first)
	flags.certDir = dir
	files, err := flags.servingFiles(logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	runnables := webhookRunnables(fakeManager{}, authority, flags, webhook.Config{}, files, logr.Discard())
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
	handshake := func(ca webhookCA) (*big.Int, error) {
		roots := x509.NewCertPool()
		roots.AddCert(ca.cert)
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
	flags := webhookFlags{configuration: webhook.DefaultConfigurationName, certDir: dir, service: "s", namespace: "ns"}
	if _, err := flags.servingFiles(logr.Discard()); err == nil || !strings.Contains(err.Error(), "-webhook-cert-dir "+dir+": reading the webhook's serving certificate") {
		t.Errorf("servingFiles of an empty directory: %v, want an error naming -webhook-cert-dir", err)
	}
	if err := os.WriteFile(filepath.Join(dir, corev1.TLSCertKey), newWebhookCA(t, "ca").pem, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, corev1.TLSPrivateKeyKey), []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := flags.servingFiles(logr.Discard()); err == nil || !strings.Contains(err.Error(), "-webhook-cert-dir "+dir) {
		t.Errorf("servingFiles of a bad key: %v, want an error naming -webhook-cert-dir", err)
	}
	if files, err := (webhookFlags{configuration: webhook.DefaultConfigurationName}).servingFiles(logr.Discard()); files != nil || err != nil {
		t.Errorf("servingFiles without -webhook-cert-dir = %v, %v; want nothing: the operator's CA", files, err)
	}

	// A certificate for another Service is served (its issuer may fix
	// it, and the next one is read without a restart), and said.
	writeWebhookPair(t, dir, newWebhookCA(t, "ca"))
	var logged strings.Builder
	log := funcr.New(func(prefix, args string) { logged.WriteString(args + "\n") }, funcr.Options{})
	flags.service, flags.namespace = "another-injector", "weighstation-system"
	if files, err := flags.servingFiles(log); err != nil || files == nil {
		t.Fatalf("servingFiles of a certificate for another Service = %v, %v; want it served", files, err)
	}
	if !strings.Contains(logged.String(), "does not name its Service") || !strings.Contains(logged.String(), "another-injector.weighstation-system.svc") {
		t.Errorf("a certificate for another Service is not said; the logs:\n%s", logged.String())
	}
}
