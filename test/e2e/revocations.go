package e2e

import (
	"encoding/json"
	"fmt"
)

// The operator's broker trust: the ConfigMap it writes in its namespace
// (controllers/brokercreds/keeper.go TrustConfigMapName) and the key of
// the revocation lists in it (controllers/brokercreds/trust.go
// TrustRevocationsKey): per namespace, each revoked user key with the time
// at or before which the broker refuses its credentials.
const (
	TrustConfigMapName    = "weighstation-broker-trust"
	TrustRevocationsKey   = "revocations.json"
	revokeEveryCredential = "*" // jwt.All: every user of the namespace
)

// Revocations reads the revocation lists of the trust ConfigMap's data:
// each revoked user key (of any namespace; "*" entries, which revoke every
// older credential of a namespace, left out), with the time (Unix
// seconds) at or before which the broker refuses its credentials.
func Revocations(data map[string]string) (map[string]int64, error) {
	text, ok := data[TrustRevocationsKey]
	if !ok {
		return nil, fmt.Errorf("the trust ConfigMap has no %s", TrustRevocationsKey)
	}
	var lists map[string]map[string]int64
	if err := json.Unmarshal([]byte(text), &lists); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", TrustRevocationsKey, err)
	}
	out := map[string]int64{}
	for _, list := range lists {
		for k, at := range list {
			if k != revokeEveryCredential {
				out[k] = at
			}
		}
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
