package broker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
)

// Files of a trust directory: the mounted weighstation-broker-trust
// ConfigMap, which the operator writes.
const (
	TrustOperatorFile      = "operator.jwt"
	TrustSystemAccountFile = "system-account.jwt"
	TrustAccountFile       = "account.jwt"
)

// Trust is nats-server's decentralised JWT authentication, as the operator
// sets it up: the brokers trust the operator's key, know the system
// account and the one account every sidecar belongs to, and admit a client
// that presents a user JWT the account signed (and signs the broker's
// nonce with its seed) unless the account revoked it. The operator pushes
// a new account JWT (a new revocation list) over the system account; the
// files are read at start only.
type Trust struct {
	Operator      *jwt.OperatorClaims
	SystemAccount *jwt.AccountClaims
	Account       *jwt.AccountClaims
	// The JWTs as read, which the resolver serves.
	systemJWT, accountJWT string
}

// ReadTrust reads a trust directory and checks that its JWTs belong
// together: the operator's is self-signed and names the system account,
// and both accounts are signed by the operator.
func ReadTrust(dir string) (*Trust, error) {
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "", fmt.Errorf("the trust directory (-trust-dir): %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	var t Trust
	opJWT, err := read(TrustOperatorFile)
	if err != nil {
		return nil, err
	}
	if t.systemJWT, err = read(TrustSystemAccountFile); err != nil {
		return nil, err
	}
	if t.accountJWT, err = read(TrustAccountFile); err != nil {
		return nil, err
	}
	if t.Operator, err = jwt.DecodeOperatorClaims(opJWT); err != nil {
		return nil, fmt.Errorf("%s: %w", TrustOperatorFile, err)
	}
	if t.Operator.Issuer != t.Operator.Subject {
		return nil, fmt.Errorf("%s: an operator JWT must be self-signed, this one is signed by %s", TrustOperatorFile, t.Operator.Issuer)
	}
	for _, a := range []struct {
		file  string
		token string
		into  **jwt.AccountClaims
	}{{TrustSystemAccountFile, t.systemJWT, &t.SystemAccount}, {TrustAccountFile, t.accountJWT, &t.Account}} {
		claims, err := jwt.DecodeAccountClaims(a.token)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.file, err)
		}
		if claims.Issuer != t.Operator.Subject {
			return nil, fmt.Errorf("%s: the account is signed by %s, not by the trusted operator %s", a.file, claims.Issuer, t.Operator.Subject)
		}
		*a.into = claims
	}
	if t.Operator.SystemAccount != t.SystemAccount.Subject {
		return nil, fmt.Errorf("%s names system account %s, but %s is %s", TrustOperatorFile, t.Operator.SystemAccount, TrustSystemAccountFile, t.SystemAccount.Subject)
	}
	if t.Account.Subject == t.SystemAccount.Subject {
		return nil, errors.New("the sidecars' account must not be the system account")
	}
	return &t, nil
}

// apply configures opts for t: the trusted operator, the system account,
// and a resolver that holds the two accounts (updates come over the
// system account).
func (t *Trust) apply(opts *server.Options) error {
	resolver := &server.MemAccResolver{}
	if err := resolver.Store(t.SystemAccount.Subject, t.systemJWT); err != nil {
		return err
	}
	if err := resolver.Store(t.Account.Subject, t.accountJWT); err != nil {
		return err
	}
	opts.TrustedOperators = []*jwt.OperatorClaims{t.Operator}
	opts.SystemAccount = t.SystemAccount.Subject
	opts.AccountResolver = resolver
	return nil
}

// LoadAccount registers the sidecars' account in s once it runs. nats-
// server applies an account update pushed over the system account only to
// an account it has loaded, and loads one at its first client: without
// this, a revocation pushed before the first sidecar connected would be
// skipped, and that sidecar admitted under the JWT read at start.
func (t *Trust) LoadAccount(s *server.Server) error {
	if _, err := s.LookupAccount(t.Account.Subject); err != nil {
		return fmt.Errorf("loading the sidecars' account %s: %w", t.Account.Subject, err)
	}
	return nil
}
