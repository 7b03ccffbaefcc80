package e2e

import (
	"fmt"

	"github.com/nats-io/jwt/v2"
)

// The operator's broker trust: the ConfigMap it writes in its namespace
// (controllers/brokercreds/keeper.go TrustConfigMapName) and the key of
// the sidecars' account JWT in it (broker/trust.go TrustAccountFile),
// whose revocation list holds every deleted pod's user key.
const (
	TrustConfigMapName = "weighstation-broker-trust"
	TrustAccountKey    = "account.jwt"
)

// Revocations reads the account JWT of the trust ConfigMap's data: each
// revoked user key, with the time (Unix seconds) at or before which the
// broker refuses its credentials.
func Revocations(data map[string]string) (map[string]int64, error) {
	token := data[TrustAccountKey]
	if token == "" {
		return nil, fmt.Errorf("the trust ConfigMap has no %s", TrustAccountKey)
	}
	claims, err := jwt.DecodeAccountClaims(token)
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w", TrustAccountKey, err)
	}
	out := make(map[string]int64, len(claims.Revocations))
	for k, at := range claims.Revocations {
		out[k] = at
	}
	return out, nil
}

// NewRevocations returns the keys in after that are not in before.
func NewRevocations(before, after map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, at := range after {
		if _, ok := before[k]; !ok {
			out[k] = at
		}
	}
	return out
}
