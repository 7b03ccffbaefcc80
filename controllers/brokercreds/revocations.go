package brokercreds

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Limits bound the account's revocation list (the package doc says why
// it must be bounded, and what an entry dropped early means).
type Limits struct {
	// Retention is how long an entry is kept after the pod's deletion.
	Retention time.Duration
	// MaxEntries is the most entries; past it the oldest go first.
	MaxEntries int
}

// DefaultLimits keep a month of deletions, up to 5,000 of them: about
// 470 KB of account JWT (an entry is a 56-character key and a time, 93
// bytes once base64-encoded), half of nats-server's default max_payload
// (1 MiB), which the push to the brokers must fit in, and of the
// ConfigMap's 1 MiB.
var DefaultLimits = Limits{Retention: 30 * 24 * time.Hour, MaxEntries: 5_000}

// MaxEntriesLimit is the most MaxEntries may be: about 930 KB of JWT
// (TestTheLargestRevocationListFits).
const MaxEntriesLimit = 10_000

// Validate names the operator's flags.
func (l Limits) Validate() error {
	switch {
	case l.Retention <= 0:
		return fmt.Errorf("-broker-revocation-retention must be positive, got %s", l.Retention)
	case l.MaxEntries < 1 || l.MaxEntries > MaxEntriesLimit:
		return fmt.Errorf("-broker-max-revocations must be between 1 and %d (the account JWT must fit in 1 MiB), got %d", MaxEntriesLimit, l.MaxEntries)
	}
	return nil
}

// RevocationMargin is how far past the deletion a revocation reaches.
// nats-server refuses a user JWT issued at or before its key's revocation
// time (whole seconds), not one issued after it; a credential issued for
// the pod by a request that read the pod just before its deletion, or by a
// replica whose clock is behind, could be dated after the deletion. A
// user key belongs to one pod UID, which is never reused, so no credential
// issued later is legitimate and the margin refuses none that is.
const RevocationMargin = time.Minute

// errNothingToRevoke is returned by revoke for an empty batch.
var errNothingToRevoke = errors.New("nothing to revoke")

// revoke returns revoked with keys added at now+RevocationMargin, less the
// entries older
// than the retention and, past MaxEntries, the oldest; and how many
// entries were dropped early (before their retention ended).
func (l Limits) revoke(revoked map[string]time.Time, keys []string, now time.Time) (map[string]time.Time, int, error) {
	if len(keys) == 0 {
		return revoked, 0, errNothingToRevoke
	}
	next := maps.Clone(revoked)
	if next == nil {
		next = map[string]time.Time{}
	}
	for _, k := range keys {
		next[k] = now.Add(RevocationMargin)
	}
	for k, at := range next {
		if now.Sub(at) > l.Retention {
			delete(next, k)
		}
	}
	early := 0
	if over := len(next) - l.MaxEntries; over > 0 {
		oldest := slices.SortedFunc(maps.Keys(next), func(a, b string) int {
			if c := next[a].Compare(next[b]); c != 0 {
				return c
			}
			return strings.Compare(a, b)
		})
		for _, k := range oldest[:over] {
			delete(next, k)
			early++
		}
	}
	return next, early, nil
}
