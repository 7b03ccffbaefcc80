package pki

import (
	"bytes"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math/rand/v2"
	"net"
	"slices"
	"testing"
	"time"
)

const day = 24 * time.Hour

// testRotation is a CA of 90 days rotated after 60. The old CA then stays
// trusted for 30 more days, and the new one signs after 1 hour.
var testRotation = rotation{lifetime: 90 * day, rotateAt: 2.0 / 3, signingDelay: time.Hour}

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func TestNewCAAndLeaf(t *testing.T) {
	ca, err := newCA(t0, 90*day)
	if err != nil {
		t.Fatal(err)
	}
	c := ca.cert
	if !c.IsCA || !c.MaxPathLenZero || c.MaxPathLen != 0 || c.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Fatalf("the CA: IsCA %v, MaxPathLen %d (zero %v), key usage %v", c.IsCA, c.MaxPathLen, c.MaxPathLenZero, c.KeyUsage)
	}
	if !c.NotBefore.Equal(t0.Add(-backdate)) || !c.NotAfter.Equal(t0.Add(90*day)) {
		t.Fatalf("the CA is valid from %s to %s", c.NotBefore, c.NotAfter)
	}
	req := leafRequest{dnsNames: ServiceDNSNames("weighstation-xds", "weighstation-system"), ips: []net.IP{net.IPv4(127, 0, 0, 1)}}
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)

	tests := []struct {
		name         string
		at           time.Time
		lifetime     time.Duration
		wantNotAfter time.Time
	}{
		{"full lifetime", t0, 30 * day, t0.Add(30 * day)},
		{"clamped to the CA's expiry", t0.Add(80 * day), 30 * day, t0.Add(90 * day)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cert, err := newLeaf(ca, req, tt.at, tt.lifetime)
			if err != nil {
				t.Fatal(err)
			}
			leaf := cert.Leaf
			if !leaf.NotAfter.Equal(tt.wantNotAfter) {
				t.Fatalf("NotAfter %s, want %s", leaf.NotAfter, tt.wantNotAfter)
			}
			if leaf.IsCA {
				t.Fatal("the leaf is a CA")
			}
			for _, name := range append(slices.Clone(req.dnsNames), "127.0.0.1") {
				opts := x509.VerifyOptions{Roots: roots, DNSName: name, CurrentTime: tt.at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
				if _, err := leaf.Verify(opts); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "weighstation-xds.other", CurrentTime: tt.at}); err == nil {
				t.Error("the leaf verifies for a name it does not carry")
			}
			keyPEM, err := encodeKey(cert.PrivateKey.(crypto.Signer))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tls.X509KeyPair(encodeCert(leaf), keyPEM); err != nil {
				t.Errorf("the leaf's key does not match it: %v", err)
			}
		})
	}
}

// A CA's life, step by step: created, kept, rotated (both trusted, the
// old one still signing), the new one signing, the old one expired. The
// rotation is decided from the stored certificate, not from the options
// of the day.
func TestRotationTimeline(t *testing.T) {
	type want struct {
		rotated      bool // current is a new CA
		written      bool // the Secret's data changed
		trusted      int
		previous     bool
		signsCurrent bool
	}
	steps := []struct {
		name string
		at   time.Time
		want want
	}{
		{"first CA", t0, want{rotated: true, written: true, trusted: 1, signsCurrent: true}},
		{"kept before the rotation point", t0.Add(60*day - backdate - time.Hour), want{trusted: 1, signsCurrent: true}},
		{"rotated at 2/3", t0.Add(60 * day), want{rotated: true, written: true, trusted: 2, previous: true}},
		{"the old CA signs during the delay", t0.Add(60*day + 59*time.Minute), want{trusted: 2, previous: true}},
		{"the new CA signs after the delay; its key is dropped", t0.Add(60*day + time.Hour), want{written: true, trusted: 2, signsCurrent: true}},
		{"both trusted until the old one expires", t0.Add(90*day - time.Second), want{trusted: 2, signsCurrent: true}},
		{"the expired CA leaves the bundle", t0.Add(90 * day), want{written: true, trusted: 1, signsCurrent: true}},
	}
	var s caSet
	for _, step := range steps {
		next, err := testRotation.next(s, step.at)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		got := want{
			rotated:      s.current == nil || !s.current.cert.Equal(next.current.cert),
			written:      !sameOwnedData(mustData(t, s), mustData(t, next)),
			trusted:      len(next.trusted),
			previous:     next.previous != nil,
			signsCurrent: testRotation.signer(next, step.at) == next.current,
		}
		if got != step.want {
			t.Fatalf("%s: got %+v, want %+v", step.name, got, step.want)
		}
		if !next.trusted[0].Equal(next.current.cert) {
			t.Fatalf("%s: the newest CA is not first in the bundle", step.name)
		}
		if got.rotated && next.previous != nil && !next.previous.cert.Equal(s.current.cert) {
			t.Fatalf("%s: previous is not the CA that was replaced", step.name)
		}
		s = next
	}
}

// A CA that expired while no operator ran is replaced, and not kept as the
// previous CA: it can sign nothing that anyone would accept.
func TestRotationAfterExpiry(t *testing.T) {
	s, err := testRotation.next(caSet{}, t0)
	if err != nil {
		t.Fatal(err)
	}
	next, err := testRotation.next(s, t0.Add(200*day))
	if err != nil {
		t.Fatal(err)
	}
	if next.previous != nil || len(next.trusted) != 1 || !next.trusted[0].Equal(next.current.cert) || next.current.cert.Equal(s.current.cert) {
		t.Fatalf("after expiry: previous %v, %d trusted", next.previous != nil, len(next.trusted))
	}
}

// A current CA missing from the bundle is put back; duplicates are
// dropped.
func TestRotationRepairsTheBundle(t *testing.T) {
	s, err := testRotation.next(caSet{}, t0)
	if err != nil {
		t.Fatal(err)
	}
	other, err := newCA(t0.Add(time.Hour), 90*day)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		trusted []*x509.Certificate
		want    []*x509.Certificate
	}{
		{"current missing", nil, []*x509.Certificate{s.current.cert}},
		{"current missing beside another", []*x509.Certificate{other.cert}, []*x509.Certificate{other.cert, s.current.cert}},
		{"duplicates", []*x509.Certificate{s.current.cert, other.cert, s.current.cert}, []*x509.Certificate{other.cert, s.current.cert}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next, err := testRotation.next(caSet{current: s.current, trusted: tt.trusted}, t0.Add(2*time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(next.trusted, tt.want, (*x509.Certificate).Equal) {
				t.Fatalf("trusted %v, want %v", names(next.trusted), names(tt.want))
			}
		})
	}
}

func names(certs []*x509.Certificate) []string {
	var out []string
	for _, c := range certs {
		out = append(out, c.Subject.CommonName+"/"+c.SerialNumber.Text(16)[:6])
	}
	return out
}

func mustData(t *testing.T, s caSet) map[string][]byte {
	t.Helper()
	if s.current == nil {
		return nil
	}
	d, err := s.secretData()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The Secret's data decodes to what was encoded, and encodes again to the
// same bytes.
func TestSecretDataRoundTrip(t *testing.T) {
	s, err := testRotation.next(caSet{}, t0)
	if err != nil {
		t.Fatal(err)
	}
	s, err = testRotation.next(s, t0.Add(60*day)) // with a previous CA
	if err != nil {
		t.Fatal(err)
	}
	data := mustData(t, s)
	back, err := parseSecret(data)
	if err != nil {
		t.Fatal(err)
	}
	if !back.current.cert.Equal(s.current.cert) || !back.previous.cert.Equal(s.previous.cert) || !slices.EqualFunc(back.trusted, s.trusted, (*x509.Certificate).Equal) {
		t.Fatal("the round trip changed the CAs")
	}
	if !sameOwnedData(data, mustData(t, back)) {
		t.Fatal("encoding the same CAs again gave other bytes")
	}
}

// A Secret with something this package would not write is refused, and an
// empty one is a fresh start.
func TestParseSecret(t *testing.T) {
	a, err := newCA(t0, 90*day)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newCA(t0, 90*day)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := newLeaf(a, leafRequest{dnsNames: []string{"x"}}, t0, day)
	if err != nil {
		t.Fatal(err)
	}
	keyA, _ := encodeKey(a.key)
	keyB, _ := encodeKey(b.key)
	good := func() map[string][]byte {
		return map[string][]byte{secretCertKey: encodeCert(a.cert), secretKeyKey: keyA, SecretBundleKey: encodeCert(a.cert)}
	}
	with := func(k string, v []byte) map[string][]byte {
		d := good()
		d[k] = v
		return d
	}
	tests := []struct {
		name    string
		data    map[string][]byte
		wantErr bool
	}{
		{"empty, as a chart may create it", map[string][]byte{}, false},
		{"nil", nil, false},
		{"good", good(), false},
		{"no bundle: rebuilt from the current CA", with(SecretBundleKey, nil), false},
		{"certificate without key", with(secretKeyKey, nil), true},
		{"key without certificate", with(secretCertKey, nil), true},
		{"key of another CA", with(secretKeyKey, keyB), true},
		{"a leaf as the CA", with(secretCertKey, encodeCert(leaf.Leaf)), true},
		{"two certificates as the CA", with(secretCertKey, encodeCerts([]*x509.Certificate{a.cert, b.cert})), true},
		{"garbage key", with(secretKeyKey, []byte("nope")), true},
		{"garbage bundle", with(SecretBundleKey, []byte("nope")), true},
		{"garbage after the bundle", with(SecretBundleKey, append(encodeCert(a.cert), "trailing"...)), true},
		{"a leaf in the bundle", with(SecretBundleKey, encodeCerts([]*x509.Certificate{a.cert, leaf.Leaf})), true},
		{"previous key without its certificate", with(secretPreviousKeyKey, keyB), true},
		{"a bundle without its CA", map[string][]byte{SecretBundleKey: encodeCert(a.cert)}, true},
		{"other keys only", map[string][]byte{"note": []byte("x")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseSecret(tt.data)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseSecret: %v, want an error: %v", err, tt.wantErr)
			}
		})
	}
}

// Every replica encodes the same set of CAs to the same bytes, whatever
// order it read them in.
func TestBundleOrderIsDeterministic(t *testing.T) {
	var certs []*x509.Certificate
	for i := range 4 {
		ca, err := newCA(t0.Add(time.Duration(i%3)*day), 90*day) // two share a NotBefore
		if err != nil {
			t.Fatal(err)
		}
		certs = append(certs, ca.cert)
	}
	sortCerts(certs)
	want := encodeCerts(certs)
	for range 20 {
		shuffled := slices.Clone(certs)
		rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		sortCerts(shuffled)
		if got := encodeCerts(shuffled); !bytes.Equal(got, want) {
			t.Fatal("the same CAs encoded to different bundles")
		}
	}
	if !certs[0].NotBefore.After(certs[len(certs)-1].NotBefore) {
		t.Fatal("the bundle is not newest first")
	}
}

// install serves a leaf from the signing CA, keeps it until it is due,
// and moves it to the new CA once that signs. The bundle holds both CAs
// during the overlap, and OnBundleChange hears of each change once.
func TestInstallSwitchesTheServingCertificate(t *testing.T) {
	now := t0
	var changes [][]byte
	a, err := New(nil, nil, Options{
		Namespace:      "weighstation-system",
		DNSNames:       []string{"weighstation-xds.weighstation-system.svc"},
		CALifetime:     90 * day,
		LeafLifetime:   9 * day,
		LeafRenewAt:    2.0 / 3,
		SigningDelay:   time.Hour,
		Now:            func() time.Time { return now },
		OnBundleChange: func(b []byte) { changes = append(changes, b) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.GetCertificate(nil); !errors.Is(err, ErrNotReady) {
		t.Fatalf("GetCertificate before the first install: %v", err)
	}
	if a.ReadyCheck(nil) == nil || a.Bundle() != nil {
		t.Fatal("ready before the first install")
	}
	var s caSet
	served := func() *x509.Certificate {
		t.Helper()
		cert, err := a.GetCertificate(&tls.ClientHelloInfo{ServerName: "weighstation-xds.weighstation-system.svc"})
		if err != nil {
			t.Fatal(err)
		}
		return cert.Leaf
	}
	var current *x509.Certificate
	steps := []struct {
		name        string
		at          time.Time
		newLeaf     bool
		signedByNew bool // signed by the newest CA rather than the one before
		trusted     int
		bundleEvent bool
	}{
		{"first", t0, true, true, 1, true},
		{"kept", t0.Add(6*day - 5*time.Minute), false, true, 1, false}, // the backdate moves 2/3 a little earlier
		{"renewed at 2/3", t0.Add(6 * day), true, true, 1, false},
		{"CA rotated: the old CA still signs", t0.Add(60 * day), true, false, 2, true},
		{"kept during the delay", t0.Add(60*day + 30*time.Minute), false, false, 2, false},
		{"the new CA signs", t0.Add(60*day + time.Hour), true, true, 2, false},
		{"the old CA expired", t0.Add(90 * day), true, true, 1, true},
	}
	for _, step := range steps {
		now = step.at
		if s, err = a.rot.next(s, now); err != nil {
			t.Fatal(err)
		}
		nChanges := len(changes)
		if err := a.install(s); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		leaf := served()
		if renewed := current == nil || !leaf.Equal(current); renewed != step.newLeaf {
			t.Fatalf("%s: new leaf %v, want %v", step.name, renewed, step.newLeaf)
		}
		current = leaf
		if err := leaf.CheckSignatureFrom(s.current.cert); (err == nil) != step.signedByNew {
			t.Fatalf("%s: signed by the newest CA: %v, want %v", step.name, err == nil, step.signedByNew)
		}
		bundle, err := parseCerts(a.Bundle())
		if err != nil || len(bundle) != step.trusted {
			t.Fatalf("%s: bundle of %d CAs (%v), want %d", step.name, len(bundle), err, step.trusted)
		}
		roots := x509.NewCertPool()
		for _, c := range bundle {
			roots.AddCert(c)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "weighstation-xds.weighstation-system.svc", CurrentTime: now}); err != nil {
			t.Fatalf("%s: the served leaf does not verify against the bundle: %v", step.name, err)
		}
		if got := len(changes) > nChanges; got != step.bundleEvent {
			t.Fatalf("%s: OnBundleChange called: %v, want %v", step.name, got, step.bundleEvent)
		}
		if step.bundleEvent && !bytes.Equal(changes[len(changes)-1], a.Bundle()) {
			t.Fatalf("%s: OnBundleChange got another bundle than Bundle returns", step.name)
		}
	}
	if err := a.ReadyCheck(nil); err != nil {
		t.Fatalf("not ready after install: %v", err)
	}
}

func TestOptionsValidation(t *testing.T) {
	base := Options{Namespace: "ns", DNSNames: []string{"svc"}}
	tests := []struct {
		name   string
		change func(*Options)
		ok     bool
	}{
		{"defaults", func(*Options) {}, true},
		{"an IP is enough", func(o *Options) { o.DNSNames = nil; o.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)} }, true},
		{"no namespace", func(o *Options) { o.Namespace = "" }, false},
		{"no name", func(o *Options) { o.DNSNames = nil }, false},
		{"rotate at 1", func(o *Options) { o.CARotateAt = 1 }, false},
		{"renew past 1", func(o *Options) { o.LeafRenewAt = 1.5 }, false},
		{"negative lifetime", func(o *Options) { o.CALifetime = -day }, false},
		{"the delay outlasts the overlap", func(o *Options) { o.CALifetime = 3 * time.Hour; o.SigningDelay = time.Hour }, false},
		{"the check interval outlasts the renewal window", func(o *Options) { o.LeafLifetime = 3 * time.Minute }, false},
		{"the check interval outlasts the signing delay", func(o *Options) { o.CheckInterval = DefaultSigningDelay }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := base
			tt.change(&o)
			if _, err := New(nil, nil, o); (err == nil) != tt.ok {
				t.Fatalf("New: %v, want ok: %v", err, tt.ok)
			}
		})
	}
}
