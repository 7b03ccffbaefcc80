package brokercreds

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/jwt/v2"
)

// Limits bound the credentials and the revocation lists (the package doc
// says why).
type Limits struct {
	// Lifetime is how long a credential is valid; the sidecar renews it
	// before. A revocation is kept for Lifetime past its time: by then
	// every credential it refuses has expired.
	Lifetime time.Duration
	// MaxEntries is the most entries over every namespace's list. Past
	// it, the oldest entries of a namespace are folded into one revocation
	// of every user of the namespace (jwt.All) at the latest of their
	// times: no revoked credential comes back, at the cost of renewing the
	// namespace's sidecars whose credentials are older.
	MaxEntries int
}

// DefaultLimits: credentials valid for an hour, and 5,000 revocations (an
// hour of pod deletions in a busy cluster): about 400 KB of ConfigMap.
var DefaultLimits = Limits{Lifetime: time.Hour, MaxEntries: 5_000}

// MaxEntriesLimit is the most MaxEntries may be: the trust ConfigMap must
// stay under 1 MiB (TestTheLargestRevocationListFits), and so must one
// namespace's account JWT, which the brokers take in one message.
const MaxEntriesLimit = 10_000

// MinLifetime is the shortest credential lifetime: a sidecar renews at
// two thirds of it, and a renewal is a new connection.
const MinLifetime = 5 * time.Second

// Validate names the operator's flags.
func (l Limits) Validate() error {
	switch {
	case l.Lifetime < MinLifetime:
		return fmt.Errorf("-broker-credential-lifetime must be at least %s, got %s", MinLifetime, l.Lifetime)
	case l.MaxEntries < 1 || l.MaxEntries > MaxEntriesLimit:
		return fmt.Errorf("-broker-max-revocations must be between 1 and %d (the revocation lists must fit in 1 MiB), got %d", MaxEntriesLimit, l.MaxEntries)
	}
	return nil
}

// Retention is how long a revocation is kept past its time: a credential
// it refuses was issued at or before that time and expires at most
// Lifetime later, so a revocation dropped after Retention refuses nothing
// still valid. The minute more allows for the replicas' clocks.
func (l Limits) Retention() time.Duration { return l.Lifetime + time.Minute }

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

// revocation is one user key to revoke in a namespace, at a time.
type revocation struct {
	namespace, user string
	at              time.Time
}

// revoke returns revoked with batch added (a later time wins over an
// earlier one for the same key), less the entries whose retention ended
// and, past MaxEntries, with the oldest folded into their namespace's
// jwt.All entry; and how many entries were folded.
func (l Limits) revoke(revoked Revocations, batch []revocation, now time.Time) (Revocations, int, error) {
	if len(batch) == 0 {
		return revoked, 0, errNothingToRevoke
	}
	next := revoked.Clone()
	for _, r := range batch {
		if next[r.namespace] == nil {
			next[r.namespace] = map[string]time.Time{}
		}
		if old, ok := next[r.namespace][r.user]; !ok || r.at.After(old) {
			next[r.namespace][r.user] = r.at
		}
	}
	return l.compact(next, now)
}

// compact drops what retention allows and folds the oldest entries past
// MaxEntries.
func (l Limits) compact(next Revocations, now time.Time) (Revocations, int, error) {
	type entry struct {
		namespace, user string
		at              time.Time
	}
	var entries []entry
	for ns, list := range next {
		for user, at := range list {
			if now.Sub(at) > l.Retention() {
				delete(list, user)
				continue
			}
			if user != jwt.All {
				entries = append(entries, entry{ns, user, at})
			}
		}
		if len(list) == 0 {
			delete(next, ns)
		}
	}
	over := next.Len() - l.MaxEntries
	if over <= 0 {
		return next, 0, nil
	}
	slices.SortFunc(entries, func(a, b entry) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.user, b.user))
	})
	folded := 0
	for _, e := range entries {
		if next.Len() <= l.MaxEntries {
			break
		}
		list := next[e.namespace]
		if _, ok := list[e.user]; !ok {
			continue // folded with an earlier one
		}
		delete(list, e.user)
		folded++
		// Every user of the namespace issued at or before e.at: e's key
		// among them. Not later than a second ago, though: a deletion's
		// entry reaches RevocationMargin into the future, and a jwt.All
		// there would refuse the credentials the namespace's sidecars
		// renew meanwhile. What the fold gives up is that margin for the
		// folded keys, whose pods are gone.
		at := e.at
		if limit := now.Add(-time.Second).Truncate(time.Second); at.After(limit) {
			at = limit
		}
		if all, ok := list[jwt.All]; !ok || at.After(all) {
			list[jwt.All] = at
		}
		// Entries at or before the namespace's jwt.All are redundant.
		for user, at := range list {
			if user != jwt.All && !at.After(list[jwt.All]) {
				delete(list, user)
				folded++
			}
		}
	}
	return next, folded, nil
}
