package broker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"

	"github.com/weighstation/weighstation/internal/tlsreload"
)

// RouteTLS is mutual TLS between brokers: each presents its certificate,
// as the server of the routes it accepts and as the client of the routes it
// dials, and verifies its peer's against the CA. The files are those of a
// mounted kubernetes.io/tls Secret (tls.crt, tls.key, ca.crt), and they are
// read again when they change, so that a renewed certificate or a rotated
// CA reaches running brokers without a restart.
type RouteTLS struct {
	CertFile string
	KeyFile  string
	CAFile   string
	// MaxAge bounds how long a read of the files is used when they look
	// unchanged (tlsreload.DefaultMaxAge).
	MaxAge time.Duration
	// Timeout bounds a route's TLS handshake (nats-server's default, 2s).
	Timeout time.Duration
	// Log receives reloads and files that cannot be used.
	Log logr.Logger
}

// ErrRouteTLSFiles is returned when some, but not all, of the files are
// given: a broker with half a configuration would run plaintext routes
// while its operator believes them encrypted.
var ErrRouteTLSFiles = errors.New("route TLS needs a certificate, its key and the CA, all three")

// tlsConfig builds the config that nats-server uses for both sides of
// every route. nats-server clones it for each route it dials (filling in
// ServerName from the route URL's host) and uses it as is for the routes
// it accepts, so the callbacks below run at every handshake.
func (o RouteTLS) tlsConfig() (*tls.Config, error) {
	if o.CertFile == "" || o.KeyFile == "" || o.CAFile == "" {
		return nil, ErrRouteTLSFiles
	}
	maxAge := o.MaxAge
	if maxAge <= 0 {
		maxAge = tlsreload.DefaultMaxAge
	}
	pair, err := tlsreload.NewKeyPair("the route certificate", o.CertFile, o.KeyFile, tlsreload.Options{MaxAge: maxAge, Log: o.Log})
	if err != nil {
		return nil, err
	}
	cas, err := tlsreload.NewReloadingPool(o.CAFile, tlsreload.Options{MaxAge: maxAge, Log: o.Log})
	if err != nil {
		return nil, fmt.Errorf("route CA: %w", err)
	}
	// The side that accepts a route: it asks for the dialer's certificate
	// and verifies it as a client's. A separate config, because nats-server
	// gives both sides the same one and VerifyConnection cannot tell them
	// apart; GetConfigForClient runs only on the accepting side.
	accept := &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: pair.GetCertificate,
		// Go's own check would use a ClientCAs pool fixed here; the
		// reloaded CAs are checked in VerifyConnection instead.
		ClientAuth:       tls.RequireAnyClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error { return verifyClient(cas, cs) },
		// Every route pays a full handshake, so that a peer whose
		// certificate has since been replaced is checked again.
		SessionTicketsDisabled: true,
	}
	return &tls.Config{
		MinVersion:           tls.VersionTLS13,
		GetConfigForClient:   func(*tls.ClientHelloInfo) (*tls.Config, error) { return accept, nil },
		GetCertificate:       pair.GetCertificate,
		GetClientCertificate: pair.GetClientCertificate,
		// The dialing side: VerifyConnection checks the server's chain,
		// usage and name against the CAs as they are now. ServerName is
		// what nats-server sets from the route URL (a broker's DNS name).
		InsecureSkipVerify: true, //nolint:gosec // VerifyConnection verifies, against the reloaded CAs.
		VerifyConnection:   func(cs tls.ConnectionState) error { return cas.VerifyConnection(cs, "") },
	}, nil
}

// verifyClient checks the certificate of a broker that dialed this one:
// it must chain to the CA and allow client authentication. Its name is not
// checked: the dialer's address is not a name, and the operator's CA
// gives client authentication to the brokers' route certificate alone.
// As for servers, a failure reads the CA file again at once and retries,
// so that a peer already on a new CA is admitted as soon as the file has
// it.
func verifyClient(cas *tlsreload.ReloadingPool, cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the dialing broker sent no certificate")
	}
	return cas.VerifyClient(cs)
}
