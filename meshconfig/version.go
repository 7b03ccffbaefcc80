package meshconfig

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

	"github.com/weighstation/weighstation/matcher"
)

// Hash returns the content hash that versions cfg: SHA-256 of a canonical
// binary encoding of every field but Version (writeConfig; a test changes
// each field and checks that the hash follows). Slices are sorted by
// whoever builds the configuration, so equal content gives an equal hash on
// the operator and in the sidecar. It costs one pass over the fields and
// no reflection: a sidecar hashes its whole configuration on every change,
// and a namespace may hold thousands of Topics.
func Hash(cfg PodConfig) (string, error) {
	buf := hashBuffers.Get().(*[]byte)
	b := writeConfig((*buf)[:0], &cfg)
	sum := sha256.Sum256(b)
	*buf = b
	hashBuffers.Put(buf)
	return hex.EncodeToString(sum[:8]), nil
}

// hashBuffers reuses Hash's encoding buffers.
var hashBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// hashFormat starts every encoding: a change of the encoding changes it,
// so no two encodings share a hash by accident.
const hashFormat = "weighstation.pod-config.v2"

func writeConfig(b []byte, cfg *PodConfig) []byte {
	b = writeString(b, hashFormat)
	b = writeString(b, cfg.Namespace)
	b = writeString(b, cfg.Pod)
	b = binary.AppendUvarint(b, uint64(len(cfg.Topics)))
	for i := range cfg.Topics {
		b = writeTopic(b, &cfg.Topics[i])
	}
	b = writeTopic(b, &cfg.Default)
	b = binary.AppendUvarint(b, uint64(len(cfg.Subscriptions)))
	for i := range cfg.Subscriptions {
		b = writeSubscription(b, &cfg.Subscriptions[i])
	}
	b = writeString(b, cfg.Access.Mode)
	return writeString(b, cfg.Access.InboxPrefix)
}

func writeTopic(b []byte, t *TopicPolicy) []byte {
	b = writeString(b, t.Name)
	b = writeString(b, t.Subject)
	b = binary.AppendVarint(b, t.MaxMessageBytes)
	if r := t.PublishRate; r != nil {
		b = append(b, 1)
		b = binary.AppendVarint(b, r.MessagesPerSecond)
		b = binary.AppendVarint(b, r.MessagesBurst)
		b = binary.AppendVarint(b, r.BytesPerSecond)
		b = binary.AppendVarint(b, r.BytesBurst)
	} else {
		b = append(b, 0)
	}
	return append(b, flag(t.MayPublish), flag(t.StampHeader))
}

func writeSubscription(b []byte, s *SubscriptionPolicy) []byte {
	b = writeString(b, s.Name)
	b = writeString(b, s.Subject)
	b = writeString(b, s.QueueGroup)
	b = append(b, flag(s.Essential), flag(s.KillSwitch.Engaged))
	b = writeString(b, s.KillSwitch.Reason)
	if a := s.KillSwitch.Auto; a != nil {
		b = append(b, 1)
		b = binary.AppendVarint(b, int64(a.MaxPendingMessages))
		b = binary.AppendVarint(b, a.MaxLatencyMillis)
		b = binary.AppendVarint(b, a.WindowMillis)
		b = binary.AppendVarint(b, a.CooldownMillis)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendVarint(b, int64(s.Limits.MaxPendingMessages))
	b = binary.AppendVarint(b, s.Limits.MaxPendingBytes)
	return writeString(b, s.Limits.Overflow)
}

// writeString writes s with its length, so that no two sequences of
// strings encode alike.
func writeString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func flag(v bool) byte {
	if v {
		return 1
	}
	return 0
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
