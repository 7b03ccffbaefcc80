package brokercreds

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nkeys"
)

// Keys of the Secret that holds the operator's NATS keys. The seeds are
// nkeys' own text form (SO..., SA...); the user key secret is 32 random
// bytes, from which every namespace's account key and every pod's user key
// are derived. (A Secret written by an earlier version also holds
// "account.nk", the one account all sidecars shared; it is ignored.)
const (
	SecretOperatorKey      = "operator.nk"
	SecretSystemAccountKey = "system-account.nk"
	SecretUserKeySecret    = "user-key-secret"
)

var secretKeys = []string{SecretOperatorKey, SecretSystemAccountKey, SecretUserKeySecret}

// userKeySecretBytes is the length of the secret that derives user keys.
const userKeySecretBytes = 32

// Keys are the operator's NATS signing keys.
type Keys struct {
	// Operator signs the account JWTs; the brokers trust its public key.
	Operator nkeys.KeyPair
	// System is the system account: the operator's own user in it pushes
	// account updates to the brokers.
	System nkeys.KeyPair
	// userKeySecret derives each namespace's account key (AccountKey) and
	// each pod's user key (UserKey).
	userKeySecret []byte
}

// ErrInvalidSecret wraps every reason a Secret cannot be read as Keys.
var ErrInvalidSecret = errors.New("the broker keys Secret holds something the operator did not write")

// GenerateKeys returns new, random Keys.
func GenerateKeys() (Keys, error) {
	var k Keys
	var err error
	if k.Operator, err = nkeys.CreateOperator(); err != nil {
		return Keys{}, fmt.Errorf("creating the operator key: %w", err)
	}
	if k.System, err = nkeys.CreateAccount(); err != nil {
		return Keys{}, fmt.Errorf("creating the system account key: %w", err)
	}
	k.userKeySecret = make([]byte, userKeySecretBytes)
	if _, err := rand.Read(k.userKeySecret); err != nil {
		return Keys{}, fmt.Errorf("creating the user key secret: %w", err)
	}
	return k, nil
}

// ParseKeys reads Keys from a Secret's data. It returns false, and no
// error, for data with none of the keys (a Secret the chart created
// empty); some but not all, or a seed of the wrong kind, is an error.
func ParseKeys(data map[string][]byte) (Keys, bool, error) {
	present := 0
	for _, name := range secretKeys {
		if len(data[name]) > 0 {
			present++
		}
	}
	switch present {
	case 0:
		return Keys{}, false, nil
	case len(secretKeys):
	default:
		return Keys{}, false, fmt.Errorf("%w: it has some of %v but not all", ErrInvalidSecret, secretKeys)
	}
	var k Keys
	for _, s := range []struct {
		name   string
		prefix nkeys.PrefixByte
		into   *nkeys.KeyPair
	}{
		{SecretOperatorKey, nkeys.PrefixByteOperator, &k.Operator},
		{SecretSystemAccountKey, nkeys.PrefixByteAccount, &k.System},
	} {
		kp, err := nkeys.FromSeed(data[s.name])
		if err != nil {
			return Keys{}, false, fmt.Errorf("%w: %s: %w", ErrInvalidSecret, s.name, err)
		}
		if prefix, _, err := nkeys.DecodeSeed(data[s.name]); err != nil || prefix != s.prefix {
			return Keys{}, false, fmt.Errorf("%w: %s is not a seed of kind %s", ErrInvalidSecret, s.name, s.prefix)
		}
		*s.into = kp
	}
	if len(data[SecretUserKeySecret]) != userKeySecretBytes {
		return Keys{}, false, fmt.Errorf("%w: %s must be %d bytes, it has %d", ErrInvalidSecret, SecretUserKeySecret, userKeySecretBytes, len(data[SecretUserKeySecret]))
	}
	k.userKeySecret = slices.Clone(data[SecretUserKeySecret])
	return k, true, nil
}

// SecretData encodes k as a Secret's data.
func (k Keys) SecretData() (map[string][]byte, error) {
	data := map[string][]byte{SecretUserKeySecret: slices.Clone(k.userKeySecret)}
	for name, kp := range map[string]nkeys.KeyPair{SecretOperatorKey: k.Operator, SecretSystemAccountKey: k.System} {
		seed, err := kp.Seed()
		if err != nil {
			return nil, fmt.Errorf("encoding %s: %w", name, err)
		}
		data[name] = seed
	}
	return data, nil
}

// UserKey is the user nkey of the pod with uid: the same for every
// replica and every restart, so that revocation needs no record of what
// was issued, and different for every pod, so that revoking one pod
// revokes no other.
func (k Keys) UserKey(uid string) (nkeys.KeyPair, error) {
	return k.derive(nkeys.PrefixByteUser, "weighstation pod user key", uid, "a pod UID is required to derive its user key", "the user key of pod "+uid)
}

// AccountKey is the account of namespace: every sidecar of the namespace
// is a user of it, and subjects of one account are invisible to another
// unless one exports them and the other imports them. Derived like user
// keys, so that a new leader signs the same accounts with no record of
// them.
func (k Keys) AccountKey(namespace string) (nkeys.KeyPair, error) {
	return k.derive(nkeys.PrefixByteAccount, "weighstation namespace account key", namespace, "a namespace is required to derive its account key", "the account key of namespace "+namespace)
}

// derive is the key pair of prefix whose seed is the HMAC, under the user
// key secret, of label, a NUL and id; what names it in an error.
func (k Keys) derive(prefix nkeys.PrefixByte, label, id, missing, what string) (nkeys.KeyPair, error) {
	if id == "" {
		return nil, errors.New(missing)
	}
	mac := hmac.New(sha256.New, k.userKeySecret)
	mac.Write([]byte(label + "\x00"))
	mac.Write([]byte(id))
	kp, err := nkeys.FromRawSeed(prefix, mac.Sum(nil))
	if err != nil {
		return nil, fmt.Errorf("deriving %s: %w", what, err)
	}
	return kp, nil
}

func publicKey(kp nkeys.KeyPair) string {
	pub, err := kp.PublicKey()
	if err != nil {
		// A key pair built by nkeys always has a public key.
		panic(fmt.Sprintf("brokercreds: a key pair without a public key: %v", err))
	}
	return pub
}
