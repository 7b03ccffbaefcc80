package pki

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Keys of the CA Secret. tls.crt and tls.key follow the kubernetes.io/tls
// convention, and ca.crt the one cert-manager uses for the trust bundle.
const (
	// SecretBundleKey holds every CA that is trusted, newest first.
	SecretBundleKey = "ca.crt"
	// secretCertKey and secretKeyKey hold the newest CA and its key.
	secretCertKey = corev1.TLSCertKey
	secretKeyKey  = corev1.TLSPrivateKeyKey
	// secretPreviousCertKey and secretPreviousKeyKey hold the CA the
	// newest one replaced, while it still signs leaves (SigningDelay). A
	// replica that restarts in that window can then still issue a leaf
	// that the sidecars trust.
	secretPreviousCertKey = "previous.crt"
	secretPreviousKeyKey  = "previous.key"
)

// secretKeys are the keys of the Secret this package owns. Other keys are
// left as they are.
var secretKeys = []string{SecretBundleKey, secretCertKey, secretKeyKey, secretPreviousCertKey, secretPreviousKeyKey}

// caSet is what the CA Secret holds.
type caSet struct {
	// current is the newest CA. It is nil only before the first CA exists.
	current *keyPair
	// previous is the CA that current replaced, while it still signs.
	previous *keyPair
	// trusted is the bundle: every CA that has not expired, newest first.
	trusted []*x509.Certificate
}

// parseSecret reads a caSet from a Secret's data. A Secret without any of
// the keys this package owns is an empty caSet. That is a valid starting point,
// so the chart may create the Secret empty, and then the operator needs no
// create permission on Secrets. A Secret that holds something this
// package would not have written is an error: replacing it silently would
// distrust every certificate in use.
func parseSecret(data map[string][]byte) (caSet, error) {
	var s caSet
	if !slices.ContainsFunc(secretKeys, func(k string) bool { return len(data[k]) > 0 }) {
		return s, nil
	}
	var err error
	if s.current, err = parseKeyPair(data[secretCertKey], data[secretKeyKey]); err != nil {
		return caSet{}, fmt.Errorf("%s and %s: %w", secretCertKey, secretKeyKey, err)
	}
	if len(data[secretPreviousCertKey]) > 0 || len(data[secretPreviousKeyKey]) > 0 {
		if s.previous, err = parseKeyPair(data[secretPreviousCertKey], data[secretPreviousKeyKey]); err != nil {
			return caSet{}, fmt.Errorf("%s and %s: %w", secretPreviousCertKey, secretPreviousKeyKey, err)
		}
	}
	if len(data[SecretBundleKey]) > 0 {
		if s.trusted, err = parseCerts(data[SecretBundleKey]); err != nil {
			return caSet{}, fmt.Errorf("%s: %w", SecretBundleKey, err)
		}
		for _, c := range s.trusted {
			if !c.IsCA {
				return caSet{}, fmt.Errorf("%s: certificate %q is not a CA", SecretBundleKey, c.Subject.CommonName)
			}
		}
	}
	return s, nil
}

// secretData encodes s into the keys this package owns.
func (s caSet) secretData() (map[string][]byte, error) {
	data := map[string][]byte{
		SecretBundleKey: encodeCerts(s.trusted),
		secretCertKey:   encodeCert(s.current.cert),
	}
	var err error
	if data[secretKeyKey], err = encodeKey(s.current.key); err != nil {
		return nil, err
	}
	if s.previous != nil {
		data[secretPreviousCertKey] = encodeCert(s.previous.cert)
		if data[secretPreviousKeyKey], err = encodeKey(s.previous.key); err != nil {
			return nil, err
		}
	}
	return data, nil
}

// sameOwnedData reports whether two Secrets' data agree on every key this
// package owns.
func sameOwnedData(a, b map[string][]byte) bool {
	for _, k := range secretKeys {
		if !bytes.Equal(a[k], b[k]) {
			return false
		}
	}
	return true
}

// rotation is the CA's part of Options.
type rotation struct {
	lifetime     time.Duration
	rotateAt     float64
	signingDelay time.Duration
}

// next is the caSet that should be stored at now. It makes the first CA,
// rotates the CA once the fraction rotateAt of its validity has passed,
// and drops what has expired or is no longer needed. It never changes the
// CAs of a caSet that needs nothing: replicas that read the same Secret
// compute the same next, and so write nothing.
func (r rotation) next(s caSet, now time.Time) (caSet, error) {
	out := caSet{current: s.current, previous: s.previous, trusted: slices.Clone(s.trusted)}
	if out.current == nil || !now.Before(fractionOf(out.current.cert, r.rotateAt)) {
		ca, err := newCA(now, r.lifetime)
		if err != nil {
			return caSet{}, err
		}
		out.previous = nil
		if out.current != nil && now.Before(out.current.cert.NotAfter) {
			out.previous = out.current
		}
		out.current = ca
	}
	// The current CA is always trusted, even if someone edited it out.
	if !containsCert(out.trusted, out.current.cert) {
		out.trusted = append(out.trusted, out.current.cert)
	}
	// A CA that has expired is dropped. Everything it signed has expired
	// too, because leaves never outlive their CA.
	out.trusted = slices.DeleteFunc(out.trusted, func(c *x509.Certificate) bool { return !now.Before(c.NotAfter) })
	sortCerts(out.trusted) // equal certificates end up side by side
	out.trusted = slices.CompactFunc(out.trusted, func(a, b *x509.Certificate) bool { return a.Equal(b) })
	// The previous key is kept only while it may still sign. After that it
	// is just a key that can no longer do any good.
	if p := out.previous; p != nil && (!now.Before(p.cert.NotAfter) || !now.Before(r.signingFrom(out.current.cert)) || !containsCert(out.trusted, p.cert)) {
		out.previous = nil
	}
	return out, nil
}

// signingFrom is when a new CA starts to sign leaves: SigningDelay after
// it was made (NotBefore is backdated).
func (r rotation) signingFrom(ca *x509.Certificate) time.Time {
	return ca.NotBefore.Add(backdate + r.signingDelay)
}

// signer is the CA that signs leaves at now. That is the previous CA
// until the current one has been in the bundle for SigningDelay, and the
// current one after that.
func (r rotation) signer(s caSet, now time.Time) *keyPair {
	if p := s.previous; p != nil && now.Before(r.signingFrom(s.current.cert)) && now.Before(p.cert.NotAfter) {
		return p
	}
	return s.current
}
