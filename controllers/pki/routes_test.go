package pki_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/weighstation/weighstation/controllers/pki"
)

// brokersService is the name the tests give the brokers' headless Service.
const brokersService = "weighstation-broker-headless"

func getRouteSecret(t *testing.T, ns string) *corev1.Secret {
	t.Helper()
	var s corev1.Secret
	if err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: pki.RouteSecretName}, &s); err != nil {
		t.Fatalf("reading the route certificate Secret: %v", err)
	}
	return &s
}

// routeCert checks that the Secret is a kubernetes.io/tls key pair whose
// certificate verifies against its ca.crt, for a broker pod's name, both
// as a server and as a client, and returns the certificate.
func routeCert(t *testing.T, s *corev1.Secret, ns string, now time.Time) *x509.Certificate {
	t.Helper()
	if s.Type != corev1.SecretTypeTLS {
		t.Fatalf("Secret type %q, want %q", s.Type, corev1.SecretTypeTLS)
	}
	pair, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
	if err != nil {
		t.Fatalf("tls.crt and tls.key: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(s.Data["ca.crt"]) {
		t.Fatal("ca.crt holds no certificate")
	}
	for _, name := range []string{"broker-1." + brokersService + "." + ns + ".svc", "broker-0." + brokersService + "." + ns + ".svc.cluster.local"} {
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			opts := x509.VerifyOptions{Roots: roots, DNSName: name, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}}
			if _, err := pair.Leaf.Verify(opts); err != nil {
				t.Fatalf("the route certificate for %s, usage %v: %v", name, usage, err)
			}
		}
	}
	if bytes.Contains(s.Data["ca.crt"], []byte("PRIVATE KEY")) {
		t.Fatal("ca.crt holds a key")
	}
	return pair.Leaf
}

func newRouteCertificate(t *testing.T, a *pki.Authority) *pki.RouteCertificate {
	t.Helper()
	r, err := pki.NewRouteCertificate(a, brokersService, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The Secret appears with a certificate for every broker, and other
// replicas leave it alone.
func TestRouteCertificateIsKeptOnce(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := newClock()
	a := newAuthority(t, testOptions(t, ns, c), nil)
	r := newRouteCertificate(t, a)
	if err := r.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	created := getRouteSecret(t, ns)
	routeCert(t, created, ns, c.Now())
	if !bytes.Equal(created.Data["ca.crt"], a.Bundle()) {
		t.Fatal("ca.crt is not the CA bundle")
	}
	other := newRouteCertificate(t, newAuthority(t, testOptions(t, ns, c), nil)) // another replica
	for range 3 {
		c.Add(time.Hour)
		for _, x := range []*pki.RouteCertificate{r, other} {
			if err := x.Ensure(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if rv := getRouteSecret(t, ns).ResourceVersion; rv != created.ResourceVersion {
		t.Fatalf("the Secret was written again: resourceVersion %s, then %s", created.ResourceVersion, rv)
	}
}

// The certificate is renewed when it is due, and when the CA rotates: the
// bundle first gains the new CA, and the certificate moves to it once it
// signs (SigningDelay later).
func TestRouteCertificateFollowsTheCA(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := newClock()
	a := newAuthority(t, testOptions(t, ns, c), nil)
	r := newRouteCertificate(t, a)
	ensure := func() *corev1.Secret {
		t.Helper()
		if err := r.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		return getRouteSecret(t, ns)
	}
	first := routeCert(t, ensure(), ns, c.Now())

	c.Add(7 * day) // past 2/3 of the 9-day certificate
	renewed := routeCert(t, ensure(), ns, c.Now())
	if renewed.Equal(first) {
		t.Fatal("the certificate was not renewed at 2/3 of its lifetime")
	}

	c.Add(53 * day) // 60 days: the CA rotates
	s := ensure()
	bundle := parseBundle(t, s.Data["ca.crt"])
	if len(bundle) != 2 || !bytes.Equal(s.Data["ca.crt"], a.Bundle()) {
		t.Fatalf("ca.crt holds %d CAs, want the old and the new one (the Authority's bundle)", len(bundle))
	}
	newCA, oldCA := bundle[0], bundle[1] // newest first
	beforeSigning := routeCert(t, s, ns, c.Now())
	if err := beforeSigning.CheckSignatureFrom(oldCA); err != nil {
		t.Fatalf("before the signing delay, the old CA must sign: %v", err)
	}

	c.Add(2 * time.Hour) // past the 1-hour signing delay; not due otherwise
	moved := routeCert(t, ensure(), ns, c.Now())
	if err := moved.CheckSignatureFrom(newCA); err != nil {
		t.Fatalf("after the signing delay, the new CA must sign: %v", err)
	}
	if moved.Equal(beforeSigning) {
		t.Fatal("the certificate was not renewed when the signer changed")
	}
}

func TestRouteCertificateNeedsAService(t *testing.T) {
	ns := newNamespace(t)
	a := newAuthority(t, testOptions(t, ns, newClock()), nil)
	if _, err := pki.NewRouteCertificate(a, "", testr.New(t)); err == nil {
		t.Fatal("no error without the headless Service's name")
	}
}
