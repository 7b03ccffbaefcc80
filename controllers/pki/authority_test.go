package pki_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/controllers/pki"
)

func getSecret(t *testing.T, ns string) *corev1.Secret {
	t.Helper()
	var s corev1.Secret
	if err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: pki.DefaultSecretName}, &s); err != nil {
		t.Fatalf("reading the CA Secret: %v", err)
	}
	return &s
}

func parseBundle(t *testing.T, data []byte) []*x509.Certificate {
	t.Helper()
	var certs []*x509.Certificate
	for rest := data; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		certs = append(certs, c)
	}
	return certs
}

func servedLeaf(t *testing.T, a *pki.Authority) *x509.Certificate {
	t.Helper()
	cert, err := a.GetCertificate(nil)
	if err != nil {
		t.Fatalf("GetCertificate: %v", err)
	}
	return cert.Leaf
}

// verifies checks leaf against the CAs of bundle, for name, at now.
func verifies(leaf *x509.Certificate, bundle []byte, name string, now time.Time) error {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		return errors.New("no certificate in the bundle")
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

// The first Ensure creates the Secret, and later ones (of the same replica
// or another) leave it alone.
func TestEnsureCreatesTheSecretOnce(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := newClock()
	a := newAuthority(t, testOptions(t, ns, c), nil)
	if err := a.ReadyCheck(nil); !errors.Is(err, pki.ErrNotReady) {
		t.Fatalf("ReadyCheck before Ensure: %v", err)
	}
	if err := a.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	created := getSecret(t, ns)
	if created.Type != corev1.SecretTypeTLS {
		t.Errorf("Secret type %q", created.Type)
	}
	for _, k := range []string{"tls.crt", "tls.key", "ca.crt"} {
		if len(created.Data[k]) == 0 {
			t.Errorf("the Secret has no %s", k)
		}
	}
	if !bytes.Equal(created.Data[pki.SecretBundleKey], a.Bundle()) || len(parseBundle(t, a.Bundle())) != 1 {
		t.Fatalf("Bundle() is not the Secret's one CA")
	}
	if bytes.Contains(a.Bundle(), []byte("PRIVATE KEY")) {
		t.Fatal("the bundle holds a key")
	}

	b := newAuthority(t, testOptions(t, ns, c), nil) // another replica
	for range 3 {
		c.Add(time.Hour)
		for _, x := range []*pki.Authority{a, b} {
			if err := x.Ensure(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if rv := getSecret(t, ns).ResourceVersion; rv != created.ResourceVersion {
		t.Fatalf("the Secret was written again: resourceVersion %s, then %s", created.ResourceVersion, rv)
	}
	if !bytes.Equal(a.Bundle(), b.Bundle()) {
		t.Fatal("two replicas serve different bundles")
	}
	// Each replica issues its own leaf, and both verify against the bundle.
	la, lb := servedLeaf(t, a), servedLeaf(t, b)
	if la.Equal(lb) {
		t.Fatal("two replicas serve the same leaf: its key would have to be shared")
	}
	for _, leaf := range []*x509.Certificate{la, lb} {
		if err := verifies(leaf, a.Bundle(), xdsService+"."+ns+".svc", c.Now()); err != nil {
			t.Fatal(err)
		}
	}
}

// Replicas that race to create the Secret, and later to rotate the CA,
// end up with one CA set: every replica serves the same bundle, the one in
// the Secret, and every leaf verifies against it.
func TestRacingReplicasConverge(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := newClock()
	const replicas = 8
	var as []*pki.Authority
	for range replicas {
		as = append(as, newAuthority(t, testOptions(t, ns, c), nil))
	}
	ensureAll := func() {
		t.Helper()
		start := make(chan struct{})
		errs := make(chan error, replicas)
		var wg sync.WaitGroup
		for _, a := range as {
			wg.Go(func() {
				<-start
				errs <- a.Ensure(ctx)
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(what string, wantCAs int) {
		t.Helper()
		secret := getSecret(t, ns)
		if n := len(parseBundle(t, secret.Data[pki.SecretBundleKey])); n != wantCAs {
			t.Fatalf("%s: the Secret trusts %d CAs, want %d", what, n, wantCAs)
		}
		for i, a := range as {
			if !bytes.Equal(a.Bundle(), secret.Data[pki.SecretBundleKey]) {
				t.Fatalf("%s: replica %d serves another bundle than the Secret's", what, i)
			}
			if err := verifies(servedLeaf(t, a), a.Bundle(), xdsService+"."+ns, c.Now()); err != nil {
				t.Fatalf("%s: replica %d: %v", what, i, err)
			}
		}
	}
	ensureAll()
	check("created", 1)
	c.Add(60 * day)
	ensureAll()
	check("rotated", 2)
}

// A rotation keeps the old CA in the bundle until it expires. The old CA
// keeps signing for SigningDelay, including for a replica that starts in
// that window, and then the new one signs.
func TestRotationKeepsBothCAsTrusted(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := newClock()
	a := newAuthority(t, testOptions(t, ns, c), nil)
	ensure := func(as ...*pki.Authority) {
		t.Helper()
		for _, x := range as {
			if err := x.Ensure(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	ensure(a)
	first := parseBundle(t, a.Bundle())[0]

	c.Add(60 * day)
	ensure(a)
	bundle := parseBundle(t, a.Bundle())
	if len(bundle) != 2 || !bundle[1].Equal(first) {
		t.Fatalf("after the rotation the bundle holds %d CAs, the old one last: %v", len(bundle), len(bundle) == 2 && bundle[1].Equal(first))
	}
	second := bundle[0]
	secret := getSecret(t, ns)
	if len(secret.Data["previous.key"]) == 0 {
		t.Fatal("the Secret lost the old CA's key while it still signs")
	}
	b := newAuthority(t, testOptions(t, ns, c), nil) // a replica that starts now
	ensure(b)
	for name, x := range map[string]*pki.Authority{"running": a, "restarted": b} {
		if err := servedLeaf(t, x).CheckSignatureFrom(first); err != nil {
			t.Fatalf("%s replica: the leaf is not signed by the old CA during the delay: %v", name, err)
		}
	}

	c.Add(time.Hour)
	ensure(a, b)
	for name, x := range map[string]*pki.Authority{"running": a, "restarted": b} {
		if err := servedLeaf(t, x).CheckSignatureFrom(second); err != nil {
			t.Fatalf("%s replica: the leaf is not signed by the new CA after the delay: %v", name, err)
		}
		if n := len(parseBundle(t, x.Bundle())); n != 2 {
			t.Fatalf("%s replica: %d CAs trusted during the overlap, want 2", name, n)
		}
	}
	if secret := getSecret(t, ns); len(secret.Data["previous.key"]) != 0 {
		t.Fatal("the old CA's key outlived its use")
	}

	c.Add(30 * day) // the first CA has expired
	ensure(a, b)
	for name, x := range map[string]*pki.Authority{"running": a, "restarted": b} {
		bundle := parseBundle(t, x.Bundle())
		if len(bundle) != 1 || !bundle[0].Equal(second) {
			t.Fatalf("%s replica: after the old CA expired the bundle holds %d CAs", name, len(bundle))
		}
	}
}

// Start ensures at once, becomes ready, and renews the leaf when it is due,
// without anyone calling Ensure. It returns when its context ends.
func TestStartRenewsTheLeaf(t *testing.T) {
	ns := newNamespace(t)
	c := newClock()
	opts := testOptions(t, ns, c)
	opts.CheckInterval = 10 * time.Millisecond
	a := newAuthority(t, opts, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Start(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Start: %v", err)
			}
		case <-time.After(eventuallyTimeout):
			t.Errorf("Start did not return within %s of its context ending", eventuallyTimeout)
		}
	}()
	eventually(t, "ready", func() error { return a.ReadyCheck(nil) })
	first := servedLeaf(t, a)
	c.Add(6 * day)
	eventually(t, "the leaf renewed", func() error {
		if servedLeaf(t, a).Equal(first) {
			return errors.New("still the first leaf")
		}
		return nil
	})
}

// A Secret someone else created is used when it is empty (a chart may
// create it, so that the operator needs no create permission), and is
// never overwritten when it holds something else.
func TestSecretCreatedByOthers(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		data    map[string][]byte
		wantErr error
	}{
		{"empty, created by the chart", map[string][]byte{"note": []byte("kept")}, nil},
		{"not a CA", map[string][]byte{"tls.crt": []byte("garbage"), "tls.key": []byte("garbage")}, pki.ErrInvalidSecret},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := newNamespace(t)
			pre := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pki.DefaultSecretName}, Data: tt.data}
			if err := k8sClient.Create(ctx, pre); err != nil {
				t.Fatal(err)
			}
			a := newAuthority(t, testOptions(t, ns, newClock()), nil)
			err := a.Ensure(ctx)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Ensure: %v, want %v", err, tt.wantErr)
			}
			after := getSecret(t, ns)
			if tt.wantErr != nil {
				if after.ResourceVersion != pre.ResourceVersion {
					t.Fatal("the Secret was overwritten")
				}
				if _, err := a.GetCertificate(nil); !errors.Is(err, pki.ErrNotReady) {
					t.Fatalf("serving a certificate without a CA: %v", err)
				}
				return
			}
			if string(after.Data["note"]) != "kept" || after.Type != corev1.SecretTypeOpaque {
				t.Fatalf("the Secret's other data or its type changed: %q, %s", after.Data["note"], after.Type)
			}
			if !bytes.Equal(after.Data[pki.SecretBundleKey], a.Bundle()) {
				t.Fatal("the bundle was not written to the Secret")
			}
		})
	}
}

// A replica never adopts a CA it cannot read: the error names the Secret.
func TestEnsureErrorNamesTheSecret(t *testing.T) {
	ns := newNamespace(t)
	pre := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "custom-ca"}, Data: map[string][]byte{"ca.crt": []byte("garbage")}}
	if err := k8sClient.Create(context.Background(), pre); err != nil {
		t.Fatal(err)
	}
	opts := testOptions(t, ns, newClock())
	opts.SecretName = "custom-ca"
	err := newAuthority(t, opts, nil).Ensure(context.Background())
	if want := fmt.Sprintf("%s/custom-ca", ns); err == nil || !bytes.Contains([]byte(err.Error()), []byte(want)) {
		t.Fatalf("Ensure: %v, want an error naming %s", err, want)
	}
}

// afterFirstGet is a real client whose first Get is followed by hook,
// before the caller sees the result: another replica acts in the window
// between a read and the write decided from it.
type afterFirstGet struct {
	client.Client
	once sync.Once
	hook func()
}

func (c *afterFirstGet) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	err := c.Client.Get(ctx, key, obj, opts...)
	c.once.Do(c.hook)
	return err
}

// The two losing paths of a race, made certain: a create that finds the
// Secret already created, and an update that finds it already rotated.
// The loser adopts the winner's CA instead of writing its own.
func TestLoserAdoptsTheWinnersCA(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		setup time.Duration // before the race: -1 for no Secret, else the clock's advance after creating it
	}{
		{"create: AlreadyExists", -1},
		{"rotate: Conflict", 60 * day},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := newNamespace(t)
			c := newClock()
			winner := newAuthority(t, testOptions(t, ns, c), nil)
			if tt.setup >= 0 {
				if err := winner.Ensure(ctx); err != nil {
					t.Fatal(err)
				}
				c.Add(tt.setup)
			}
			racing := &afterFirstGet{Client: k8sClient, hook: func() {
				if err := winner.Ensure(ctx); err != nil {
					t.Errorf("the winner's Ensure: %v", err)
				}
			}}
			loser := newAuthority(t, testOptions(t, ns, c), racing)
			if err := loser.Ensure(ctx); err != nil {
				t.Fatal(err)
			}
			secret := getSecret(t, ns)
			if !bytes.Equal(loser.Bundle(), winner.Bundle()) || !bytes.Equal(winner.Bundle(), secret.Data[pki.SecretBundleKey]) {
				t.Fatal("the loser did not adopt the winner's CAs")
			}
			if err := verifies(servedLeaf(t, loser), secret.Data[pki.SecretBundleKey], xdsService, c.Now()); err != nil {
				t.Fatalf("the loser's leaf: %v", err)
			}
		})
	}
}
