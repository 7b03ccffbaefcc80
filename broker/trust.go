package broker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
)

// Files of a trust directory: the mounted weighstation-broker-trust
// ConfigMap, which the operator writes.
const (
	TrustOperatorFile      = "operator.jwt"
	TrustSystemAccountFile = "system-account.jwt"
)

// Trust is nats-server's decentralised JWT authentication, as the operator
// sets it up: the brokers trust the operator's key and know the system
// account. Each namespace has an account of its own, which the brokers
// learn at run time, in nats-server's "full" resolver (a directory of
// account JWTs, AccountDir): the operator pushes each account over the
// system account, answers a broker's lookup of one it lacks, and the
// brokers of a cluster share what they hold. A client is admitted with a
// user JWT that its namespace's account signed (signing the broker's nonce
// with its seed), unless the account revoked it or it expired.
type Trust struct {
	Operator      *jwt.OperatorClaims
	SystemAccount *jwt.AccountClaims
	// The system account's JWT as read, which the resolver starts with.
	systemJWT string
}

// ReadTrust reads a trust directory and checks that its JWTs belong
// together: the operator's is self-signed and names the system account,
// which the operator signed.
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
	if t.Operator, err = jwt.DecodeOperatorClaims(opJWT); err != nil {
		return nil, fmt.Errorf("%s: %w", TrustOperatorFile, err)
	}
	if t.Operator.Issuer != t.Operator.Subject {
		return nil, fmt.Errorf("%s: an operator JWT must be self-signed, this one is signed by %s", TrustOperatorFile, t.Operator.Issuer)
	}
	if t.SystemAccount, err = jwt.DecodeAccountClaims(t.systemJWT); err != nil {
		return nil, fmt.Errorf("%s: %w", TrustSystemAccountFile, err)
	}
	if t.SystemAccount.Issuer != t.Operator.Subject {
		return nil, fmt.Errorf("%s: the account is signed by %s, not by the trusted operator %s", TrustSystemAccountFile, t.SystemAccount.Issuer, t.Operator.Subject)
	}
	if t.Operator.SystemAccount != t.SystemAccount.Subject {
		return nil, fmt.Errorf("%s names system account %s, but %s is %s", TrustOperatorFile, t.Operator.SystemAccount, TrustSystemAccountFile, t.SystemAccount.Subject)
	}
	return &t, nil
}

// AccountFetchTimeout bounds a broker's wait for an account it lacks (the
// operator's or a peer's answer to its lookup); the client that needed it
// is refused past it, and its sidecar retries.
const AccountFetchTimeout = 2 * time.Second

// apply configures opts for t: the trusted operator, the system account,
// and a full resolver in accountDir.
func (t *Trust) apply(opts *server.Options, accountDir string) error {
	if accountDir == "" {
		return errors.New("the operator's trust needs a directory for the namespaces' accounts (-account-dir)")
	}
	if err := os.MkdirAll(accountDir, 0o700); err != nil {
		return fmt.Errorf("the account directory (-account-dir): %w", err)
	}
	// HardDelete: an account the operator deletes goes (it never does
	// now). The sync interval is how often brokers compare what they
	// hold with their peers'.
	resolver, err := server.NewDirAccResolver(accountDir, 0, time.Minute, server.HardDelete, server.FetchTimeout(AccountFetchTimeout))
	if err != nil {
		return fmt.Errorf("the account resolver in %s: %w", accountDir, err)
	}
	if err := resolver.Store(t.SystemAccount.Subject, t.systemJWT); err != nil {
		return fmt.Errorf("storing the system account: %w", err)
	}
	opts.TrustedOperators = []*jwt.OperatorClaims{t.Operator}
	opts.SystemAccount = t.SystemAccount.Subject
	opts.AccountResolver = resolver
	return nil
}
