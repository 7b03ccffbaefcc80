package brokercreds

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/weighstation/weighstation/broker"
	"github.com/weighstation/weighstation/meshconfig"
)

// Names the JWTs carry, which the brokers' monitoring shows.
const (
	OperatorName      = "weighstation"
	SystemAccountName = "SYS"
)

// TrustRevocationsKey is the key of the trust ConfigMap that keeps every
// namespace account's revocation list, so that a new leader signs the
// accounts with the revocations its predecessor made (the brokers never
// read it).
const TrustRevocationsKey = "revocations.json"

// Trust is what the brokers need to authenticate sidecars: the operator's
// JWT and the system account's, written into a ConfigMap under
// broker.TrustOperatorFile and broker.TrustSystemAccountFile. The
// namespaces' accounts are not in it: the brokers learn them at run time
// (the operator pushes them and answers the brokers' lookups), so that
// their number is not bounded by a ConfigMap's 1 MiB.
type Trust struct {
	Operator      string
	SystemAccount string
}

// ConfigMapData is the ConfigMap's data, with the revocation lists.
func (t Trust) ConfigMapData(revoked Revocations) (map[string]string, error) {
	list, err := revoked.encode()
	if err != nil {
		return nil, err
	}
	return map[string]string{
		broker.TrustOperatorFile:      t.Operator,
		broker.TrustSystemAccountFile: t.SystemAccount,
		TrustRevocationsKey:           list,
	}, nil
}

// Trust signs the operator's and the system account's JWTs.
func (k Keys) Trust() (Trust, error) {
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
	return Trust{Operator: operatorJWT, SystemAccount: systemJWT}, nil
}

// Matches reports whether t was signed for k (the same operator and
// system account): a ConfigMap that matches needs no rewrite of its JWTs,
// although their issue times differ from what Trust would sign now.
func (k Keys) Matches(t Trust) bool {
	op, err := jwt.DecodeOperatorClaims(t.Operator)
	if err != nil || op.Subject != publicKey(k.Operator) || op.SystemAccount != publicKey(k.System) {
		return false
	}
	sys, err := jwt.DecodeAccountClaims(t.SystemAccount)
	return err == nil && sys.Subject == publicKey(k.System) && sys.Issuer == publicKey(k.Operator)
}

// AccountSettings are what every namespace account JWT carries besides its
// revocations.
type AccountSettings struct {
	// MaxConnections bounds the namespace's connections to the brokers
	// (a user JWT carries no connection limit; its account does). Each
	// sidecar holds one, two while it renews its credential.
	MaxConnections int64
	// UserMaxSubscriptions bounds one credential's subscriptions at the
	// broker: a sidecar's connection carries its applications' SUBs
	// (each application connection at most the sidecar's
	// -max-subscriptions), and a credential copied out of it must not
	// fill a broker's memory with more.
	UserMaxSubscriptions int64
}

// DefaultAccountSettings: 2,000 connections, a thousand sidecars renewing
// at once; 50,000 subscriptions per credential.
var DefaultAccountSettings = AccountSettings{MaxConnections: 2_000, UserMaxSubscriptions: 50_000}

// Validate names the operator's flags.
func (s AccountSettings) Validate() error {
	switch {
	case s.MaxConnections < 1:
		return fmt.Errorf("-broker-account-max-connections must be positive, got %d", s.MaxConnections)
	case s.UserMaxSubscriptions < 1:
		return fmt.Errorf("-broker-user-max-subscriptions must be positive, got %d", s.UserMaxSubscriptions)
	}
	return nil
}

// AccountJWT signs the account of namespace, with its sharing, and revoked as its
// revocation list (user public key, or jwt.All, to the time at or before
// which the user's JWTs are refused). It returns the account's public key
// and its JWT.
func (k Keys) AccountJWT(namespace string, revoked map[string]time.Time, s AccountSettings, sharing Sharing) (string, string, error) {
	key, err := k.AccountKey(namespace)
	if err != nil {
		return "", "", err
	}
	pub := publicKey(key)
	acc := jwt.NewAccountClaims(pub)
	acc.Name = namespace
	acc.Tags.Add("namespace:" + namespace)
	acc.Limits.Conn = s.MaxConnections
	acc.Limits.LeafNodeConn = 0
	// No JetStream (its limits stay zero). One namespace's subjects stay
	// in its account, but for what it exports and imports.
	if err := k.applySharing(acc, sharing); err != nil {
		return "", "", err
	}
	for user, at := range revoked {
		acc.RevokeAt(user, at)
	}
	token, err := acc.Encode(k.Operator)
	if err != nil {
		return "", "", fmt.Errorf("signing the account JWT of namespace %s: %w", namespace, err)
	}
	return pub, token, nil
}

// Credential is one sidecar's broker credential.
type Credential struct {
	// JWT is the user JWT, signed by the namespace's account key.
	JWT string
	// Seed is the user nkey's seed (SU...), which signs the broker's nonce.
	Seed []byte
	// PublicKey is the user nkey, the JWT's subject: what revocation
	// names.
	PublicKey string
	// InboxPrefix is the only inbox space the credential may subscribe
	// under.
	InboxPrefix string
	// Expires is when the brokers stop accepting it.
	Expires time.Time
	// Bound is what it allows.
	Bound meshconfig.BrokerBound
}

// InboxPrefix is the inbox space of the pod with user key pub:
// "_INBOX." and a token that only this pod's key yields (100 bits of its
// hash), short because every reply subject carries it.
func InboxPrefix(userPublicKey string) string {
	sum := sha256.Sum256([]byte("weighstation inbox\x00" + userPublicKey))
	return "_INBOX." + strings.ToLower(base32.StdEncoding.EncodeToString(sum[:])[:20])
}

// ResponseWindow is how long after a request its responder may publish
// the one reply that allow_responses lets through: the sidecar's reply
// allowance (docs/sidecar.md).
const ResponseWindow = time.Minute

// Issue returns the credential of the pod namespace/pod with uid, allowing
// bound and no more, valid until now+lifetime, with at most
// maxSubscriptions subscriptions (jwt.NoLimit: none).
func (k Keys) Issue(namespace, pod, uid string, bound meshconfig.BrokerBound, now time.Time, lifetime time.Duration, maxSubscriptions int64) (Credential, error) {
	user, err := k.UserKey(uid)
	if err != nil {
		return Credential{}, err
	}
	account, err := k.AccountKey(namespace)
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
	expires := now.Add(lifetime).Truncate(time.Second)
	claims.Expires = expires.Unix()
	claims.Pub.Allow.Add(bound.PublishAllow...)
	claims.Pub.Deny.Add(bound.PublishDeny...)
	claims.Sub.Allow.Add(bound.SubscribeAllow...)
	claims.Resp = &jwt.ResponsePermission{MaxMsgs: 1, Expires: ResponseWindow}
	claims.Limits.Payload = bound.MaxPayload
	claims.Limits.Subs = maxSubscriptions
	token, err := claims.Encode(account)
	if err != nil {
		return Credential{}, fmt.Errorf("signing the user JWT of %s/%s: %w", namespace, pod, err)
	}
	return Credential{JWT: token, Seed: seed, PublicKey: pub, InboxPrefix: InboxPrefix(pub), Expires: expires, Bound: bound}, nil
}

// SystemUser returns a credential in the system account, for the
// operator's own connection to the brokers, which pushes account updates
// and answers the brokers' account lookups.
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

// Revocations are every namespace's revocation list: namespace, then user
// public key (or jwt.All) to the time at or before which its JWTs are
// refused.
type Revocations map[string]map[string]time.Time

// Len is the number of entries, over all namespaces.
func (r Revocations) Len() int {
	n := 0
	for _, l := range r {
		n += len(l)
	}
	return n
}

// Clone returns a deep copy.
func (r Revocations) Clone() Revocations {
	out := make(Revocations, len(r))
	for ns, l := range r {
		out[ns] = maps.Clone(l)
	}
	return out
}

// Equal reports whether r and o hold the same entries, to the second.
func (r Revocations) Equal(o Revocations) bool {
	if len(r) != len(o) {
		return false
	}
	for ns, l := range r {
		if !maps.Equal(unixTimes(l), unixTimes(o[ns])) {
			return false
		}
	}
	return true
}

func (r Revocations) encode() (string, error) {
	out := make(map[string]map[string]int64, len(r))
	for ns, l := range r {
		out[ns] = unixTimes(l)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "", fmt.Errorf("encoding the revocation lists: %w", err)
	}
	return string(b), nil
}

// ParseRevocations reads the trust ConfigMap's revocation lists; empty
// text is no lists.
func ParseRevocations(text string) (Revocations, error) {
	out := Revocations{}
	if strings.TrimSpace(text) == "" {
		return out, nil
	}
	var in map[string]map[string]int64
	if err := json.Unmarshal([]byte(text), &in); err != nil {
		return nil, fmt.Errorf("%s: %w", TrustRevocationsKey, err)
	}
	for ns, l := range in {
		out[ns] = make(map[string]time.Time, len(l))
		for k, at := range l {
			out[ns][k] = time.Unix(at, 0)
		}
	}
	return out, nil
}

func unixTimes(m map[string]time.Time) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, t := range m {
		out[k] = t.Unix()
	}
	return out
}
