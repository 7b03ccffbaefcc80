package brokercreds

import (
	"fmt"
	"maps"
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/weighstation/weighstation/broker"
)

// Names the JWTs carry, which the brokers' monitoring shows.
const (
	OperatorName      = "weighstation"
	SystemAccountName = "SYS"
	AccountName       = "weighstation"
)

// Trust is what the brokers need to authenticate sidecars: three public
// JWTs, written into a ConfigMap under broker.TrustOperatorFile,
// broker.TrustSystemAccountFile and broker.TrustAccountFile.
type Trust struct {
	Operator      string
	SystemAccount string
	Account       string
}

// ConfigMapData is the ConfigMap's data.
func (t Trust) ConfigMapData() map[string]string {
	return map[string]string{
		broker.TrustOperatorFile:      t.Operator,
		broker.TrustSystemAccountFile: t.SystemAccount,
		broker.TrustAccountFile:       t.Account,
	}
}

// Trust signs the JWTs for k, with revoked as the account's revocation
// list (user public key to the time it was revoked).
func (k Keys) Trust(revoked map[string]time.Time) (Trust, error) {
	op := jwt.NewOperatorClaims(publicKey(k.Operator))
	op.Name = OperatorName
	op.SystemAccount = publicKey(k.System)
	operatorJWT, err := op.Encode(k.Operator)
	if err != nil {
		return Trust{}, fmt.Errorf("signing the operator JWT: %w", err)
	}
	sys := jwt.NewAccountClaims(publicKey(k.System))
	sys.Name = SystemAccountName
	systemJWT, err := sys.Encode(k.Operator)
	if err != nil {
		return Trust{}, fmt.Errorf("signing the system account JWT: %w", err)
	}
	accountJWT, err := k.accountJWT(revoked)
	if err != nil {
		return Trust{}, err
	}
	return Trust{Operator: operatorJWT, SystemAccount: systemJWT, Account: accountJWT}, nil
}

func (k Keys) accountJWT(revoked map[string]time.Time) (string, error) {
	acc := jwt.NewAccountClaims(publicKey(k.Account))
	acc.Name = AccountName
	for pub, at := range revoked {
		acc.RevokeAt(pub, at)
	}
	s, err := acc.Encode(k.Operator)
	if err != nil {
		return "", fmt.Errorf("signing the account JWT: %w", err)
	}
	return s, nil
}

// Matches reports whether t was signed for k (the same operator, system
// account and account) and revokes exactly revoked: a ConfigMap that
// matches needs no rewrite, although its JWTs' issue times differ from
// what Trust would sign now.
func (k Keys) Matches(t Trust, revoked map[string]time.Time) bool {
	op, err := jwt.DecodeOperatorClaims(t.Operator)
	if err != nil || op.Subject != publicKey(k.Operator) || op.SystemAccount != publicKey(k.System) {
		return false
	}
	sys, err := jwt.DecodeAccountClaims(t.SystemAccount)
	if err != nil || sys.Subject != publicKey(k.System) || sys.Issuer != publicKey(k.Operator) {
		return false
	}
	acc, err := jwt.DecodeAccountClaims(t.Account)
	if err != nil || acc.Subject != publicKey(k.Account) || acc.Issuer != publicKey(k.Operator) {
		return false
	}
	return maps.Equal(map[string]int64(acc.Revocations), unixTimes(revoked))
}

// RevokedIn returns the revocation list of an account JWT that k signed,
// or an error naming why it is not one: a ConfigMap from other keys is
// not trusted for its list.
func (k Keys) RevokedIn(accountJWT string) (map[string]time.Time, error) {
	acc, err := jwt.DecodeAccountClaims(accountJWT)
	if err != nil {
		return nil, fmt.Errorf("decoding the account JWT: %w", err)
	}
	if acc.Subject != publicKey(k.Account) || acc.Issuer != publicKey(k.Operator) {
		return nil, fmt.Errorf("the account JWT is for account %s from operator %s, not this operator's %s from %s",
			acc.Subject, acc.Issuer, publicKey(k.Account), publicKey(k.Operator))
	}
	revoked := make(map[string]time.Time, len(acc.Revocations))
	for pub, at := range acc.Revocations {
		revoked[pub] = time.Unix(at, 0)
	}
	return revoked, nil
}

func unixTimes(m map[string]time.Time) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, t := range m {
		out[k] = t.Unix()
	}
	return out
}

// Credential is one sidecar's broker credential.
type Credential struct {
	// JWT is the user JWT, signed by the account key.
	JWT string
	// Seed is the user nkey's seed (SU...), which signs the broker's nonce.
	Seed []byte
	// PublicKey is the user nkey, the JWT's subject: what revocation
	// names.
	PublicKey string
}

// Issue returns the credential of the pod namespace/pod with uid. It
// carries no expiry (the package doc says why).
func (k Keys) Issue(namespace, pod, uid string) (Credential, error) {
	user, err := k.UserKey(uid)
	if err != nil {
		return Credential{}, err
	}
	seed, err := user.Seed()
	if err != nil {
		return Credential{}, fmt.Errorf("encoding the user seed: %w", err)
	}
	pub := publicKey(user)
	claims := jwt.NewUserClaims(pub)
	// The broker's monitoring (connz) shows the name: the pod a connection
	// belongs to.
	claims.Name = namespace + "/" + pod
	claims.Tags.Add("pod-uid:" + uid)
	claims.BearerToken = false // the holder must sign the broker's nonce with the seed
	token, err := claims.Encode(k.Account)
	if err != nil {
		return Credential{}, fmt.Errorf("signing the user JWT of %s/%s: %w", namespace, pod, err)
	}
	return Credential{JWT: token, Seed: seed, PublicKey: pub}, nil
}

// SystemUser returns a credential in the system account, for the
// operator's own connection to the brokers, which pushes account updates.
func (k Keys) SystemUser(name string) (Credential, error) {
	user, err := k.UserKey("operator system user " + name)
	if err != nil {
		return Credential{}, err
	}
	seed, err := user.Seed()
	if err != nil {
		return Credential{}, fmt.Errorf("encoding the system user seed: %w", err)
	}
	claims := jwt.NewUserClaims(publicKey(user))
	claims.Name = name
	token, err := claims.Encode(k.System)
	if err != nil {
		return Credential{}, fmt.Errorf("signing the system user JWT: %w", err)
	}
	return Credential{JWT: token, Seed: seed, PublicKey: publicKey(user)}, nil
}
