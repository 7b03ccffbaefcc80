package pki

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"slices"
	"sync"
)

// ServingCertificate is a further serving certificate from the Authority's
// CA, for another server of the operator (the sidecar-injection webhook),
// under names of its own. Like the Authority's own serving certificate it
// is never stored: each replica issues its own, in memory, on the first
// handshake, and again when it is due (LeafRenewAt of LeafLifetime) or the
// Authority's signer has changed. Clients verify it with the Authority's
// bundle, which holds the new CA SigningDelay before it signs anything.
type ServingCertificate struct {
	authority *Authority
	req       leafRequest

	mu     sync.Mutex
	cert   *tls.Certificate
	signer *x509.Certificate
}

// NewServingCertificate returns a ServingCertificate for dnsNames and ips.
func (a *Authority) NewServingCertificate(dnsNames []string, ips []net.IP) *ServingCertificate {
	return &ServingCertificate{authority: a, req: leafRequest{dnsNames: slices.Clone(dnsNames), ips: slices.Clone(ips)}}
}

// GetCertificate is for tls.Config.GetCertificate: it returns the current
// certificate, issuing one first if there is none yet, it is due, or the
// Authority signs with another CA now. It fails with ErrNotReady until the
// Authority has loaded its CA.
func (c *ServingCertificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s := c.authority.served.Load()
	if s == nil {
		return nil, ErrNotReady
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.authority.opts.Now()
	if c.cert != nil && c.signer.Equal(s.signing.cert) && now.Before(fractionOf(c.cert.Leaf, c.authority.opts.LeafRenewAt)) {
		return c.cert, nil
	}
	cert, err := newLeaf(s.signing, c.req, now, c.authority.opts.LeafLifetime)
	if err != nil {
		return nil, err
	}
	c.cert, c.signer = cert, s.signing.cert
	c.authority.log.Info("issued a serving certificate", "dnsNames", c.req.dnsNames, "ca", s.signing.cert.Subject.CommonName, "notAfter", cert.Leaf.NotAfter)
	return cert, nil
}
