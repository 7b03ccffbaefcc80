package meshconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/weighstation/weighstation/matcher"
)

// Hash returns the content hash that versions cfg: its JSON form without
// the Version field. The JSON form is deterministic (slices are sorted by
// whoever builds the configuration), so equal content gives an equal hash
// on the operator and in the sidecar.
func Hash(cfg PodConfig) (string, error) {
	cfg.Version = ""
	b, err := json.Marshal(cfg)
	if err != nil {
		return "", fmt.Errorf("hashing pod configuration: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8]), nil
}

// DefaultConfig is the configuration of a pod under no Topic and no
// Subscription: defaults govern every subject, so nothing is unbounded. It
// is versioned.
func DefaultConfig(defaults Defaults) PodConfig {
	cfg := PodConfig{
		Topics:        []TopicPolicy{},
		Subscriptions: []SubscriptionPolicy{},
		Default: TopicPolicy{
			Subject:         ">",
			MaxMessageBytes: defaults.MaxMessageBytes,
			PublishRate:     RateOrNil(defaults.PublishRate),
			MayPublish:      true,
			StampHeader:     defaults.StampHeader,
		},
		Access: Access{Mode: AccessEnforce},
	}
	// The JSON form of these types cannot fail to encode.
	cfg.Version, _ = Hash(cfg)
	return cfg
}

// RateOrNil returns nil for a rate that limits nothing.
func RateOrNil(r Rate) *Rate {
	if r == (Rate{}) {
		return nil
	}
	return &r
}

// ValidateInboxPrefix checks a custom inbox prefix: a literal subject that
// does not start with '$' (those belong to NATS).
func ValidateInboxPrefix(prefix string) error {
	if err := matcher.ValidateSubject(prefix); err != nil {
		return fmt.Errorf("inbox prefix %q: %w", prefix, err)
	}
	if strings.HasPrefix(prefix, "$") {
		return fmt.Errorf("inbox prefix %q: it must not start with '$'", prefix)
	}
	return nil
}
