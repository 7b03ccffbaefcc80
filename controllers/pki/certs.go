package pki

import (
	"bytes"
	"crypto"
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
	"slices"
	"time"
)

// backdate moves every NotBefore into the past, so that a peer whose clock
// runs a little behind the operator's does not reject a fresh certificate
// as not yet valid.
const backdate = 5 * time.Minute

// keyPair is a CA certificate with its private key.
type keyPair struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// newKey makes an ECDSA P-256 key. It is small and fast, and every TLS
// stack the mesh talks to accepts it.
func newKey() (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating an ECDSA P-256 key: %w", err)
	}
	return key, nil
}

// newSerial returns a random 128-bit serial number. RFC 5280 allows up to
// 20 octets, and randomness keeps two replicas from issuing the same one.
func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("generating a serial number: %w", err)
	}
	return serial, nil
}

// newCA makes a self-signed CA that is valid from now for lifetime. It may
// sign only leaf certificates (MaxPathLen 0).
func newCA(now time.Time, lifetime time.Duration) (*keyPair, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		// The timestamp tells one generation from the next in logs and in
		// `openssl x509`, as the Kubernetes CAs' "<name>-ca@<unix>" does.
		Subject:               pkix.Name{CommonName: fmt.Sprintf("weighstation-ca@%d", now.Unix())},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(lifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("creating the CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the new CA certificate: %w", err)
	}
	return &keyPair{cert: cert, key: key}, nil
}

// leafRequest is what a leaf certificate names, and what it is for.
type leafRequest struct {
	dnsNames []string
	ips      []net.IP
	// usages are the extended key usages; nil is a serving certificate
	// (server authentication only).
	usages []x509.ExtKeyUsage
}

// newLeaf makes a serving certificate that ca signs. It is valid from now
// for lifetime, but never after ca expires, so that no leaf outlives the
// CA that vouches for it. The bundle drops a CA once it has expired.
func newLeaf(ca *keyPair, req leafRequest, now time.Time, lifetime time.Duration) (*tls.Certificate, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	cn := "weighstation"
	if len(req.dnsNames) > 0 {
		cn = req.dnsNames[0]
	}
	usages := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	if req.usages != nil {
		usages = slices.Clone(req.usages)
	}
	notAfter := now.Add(lifetime)
	if ca.cert.NotAfter.Before(notAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn},
		DNSNames:              slices.Clone(req.dnsNames),
		IPAddresses:           slices.Clone(req.ips),
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           usages,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, fmt.Errorf("signing the serving certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the new serving certificate: %w", err)
	}
	// The chain is the leaf alone: clients hold the CA already, and
	// sending it again would only add bytes to every handshake.
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// fractionOf returns the instant at which the fraction f of cert's
// validity has passed. Rotation is decided from the certificate itself, so
// a change of the lifetime options applies to the next CA and leaves the
// current one alone.
func fractionOf(cert *x509.Certificate, f float64) time.Time {
	return cert.NotBefore.Add(time.Duration(f * float64(cert.NotAfter.Sub(cert.NotBefore))))
}

// Block types of the PEM this package writes.
const (
	pemCertificate = "CERTIFICATE"
	pemPrivateKey  = "PRIVATE KEY" // PKCS #8
)

func encodeCert(cert *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: pemCertificate, Bytes: cert.Raw})
}

// encodeCerts concatenates the PEM of certs, in order.
func encodeCerts(certs []*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range certs {
		b.Write(encodeCert(c))
	}
	return b.Bytes()
}

func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding a private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemPrivateKey, Bytes: der}), nil
}

// errNoCertificate is returned by parseCerts for input without a single
// certificate.
var errNoCertificate = errors.New("no PEM certificate")

// parseCerts reads every certificate of a PEM bundle. Any other block,
// or text that is not PEM, is an error: a bundle that is partly garbage
// was not written by this package, and guessing at it would hide that.
func parseCerts(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != pemCertificate {
			return nil, fmt.Errorf("unexpected PEM block %q", block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parsing a certificate: %w", err)
		}
		certs = append(certs, cert)
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, errors.New("text that is not PEM after the certificates")
	}
	if len(certs) == 0 {
		return nil, errNoCertificate
	}
	return certs, nil
}

// parseKeyPair reads a certificate and its private key, and checks that
// they belong together and that the certificate is a CA.
func parseKeyPair(certPEM, keyPEM []byte) (*keyPair, error) {
	certs, err := parseCerts(certPEM)
	if err != nil {
		return nil, err
	}
	if len(certs) != 1 {
		return nil, fmt.Errorf("%d certificates where one CA was expected", len(certs))
	}
	cert := certs[0]
	if !cert.IsCA {
		return nil, fmt.Errorf("certificate %q is not a CA", cert.Subject.CommonName)
	}
	block, rest := pem.Decode(keyPEM)
	if block == nil || block.Type != pemPrivateKey || len(bytes.TrimSpace(rest)) > 0 {
		return nil, errors.New("the key is not a single PKCS #8 PEM block")
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing the key: %w", err)
	}
	key, ok := parsed.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("a %T cannot sign", parsed)
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("the key does not match certificate %q", cert.Subject.CommonName)
	}
	return &keyPair{cert: cert, key: key}, nil
}

// sortCerts orders certificates newest first, with ties broken by their
// bytes. Every replica then encodes the same set to the same bytes, and a
// published bundle changes only when its content does.
func sortCerts(certs []*x509.Certificate) {
	slices.SortFunc(certs, func(a, b *x509.Certificate) int {
		if c := b.NotBefore.Compare(a.NotBefore); c != 0 {
			return c
		}
		return bytes.Compare(a.Raw, b.Raw)
	})
}

func containsCert(certs []*x509.Certificate, cert *x509.Certificate) bool {
	return slices.ContainsFunc(certs, cert.Equal)
}
