package brokercreds

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weighstation/weighstation/meshconfig"
)

// ErrNoBrokers is Issue's error when the operator has no connection to the
// brokers (no -broker-url): it could not give them the namespace's
// account, so a credential would be refused there.
var ErrNoBrokers = errors.New("the operator has no -broker-url: the brokers cannot learn the namespace accounts that broker credentials belong to")

// errNotReady: the keys or the revocation lists are not read yet.
var errNotReady = errors.New("the operator has not read its broker keys yet; retry")

// accountOf returns namespace's account as signed for the current
// revocation list and sharing, signing it when it is not.
func (k *Keeper) accountOf(namespace string) (*account, error) {
	k.init()
	keys, ok := k.Keys()
	if !ok {
		return nil, errNotReady
	}
	k.mu.Lock()
	a, ok := k.accounts[namespace]
	k.mu.Unlock()
	if ok {
		return a, nil
	}
	// Read outside the lock: the cache's reads are local, but a list is
	// not free. A change meanwhile deletes the entry again (policyChanged).
	var sharing Sharing
	if k.Policies != nil {
		var err error
		if sharing, err = SharingOf(context.Background(), k.Policies, namespace); err != nil {
			return nil, err
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	pub, token, err := keys.AccountJWT(namespace, k.revoked[namespace], k.Accounts, sharing)
	if err != nil {
		return nil, err
	}
	a = &account{publicKey: pub, jwt: token}
	k.accounts[namespace] = a
	k.byPublicKey[pub] = namespace
	return a, nil
}

// policyChanged marks the accounts of namespaces for signing and pushing
// again: a Topic's export or a Subscription's import changed.
func (k *Keeper) policyChanged(namespaces ...string) {
	k.init()
	k.mu.Lock()
	for _, ns := range namespaces {
		delete(k.accounts, ns)
		k.dirty[ns] = true
	}
	k.mu.Unlock()
	k.poke()
}

// pushDirty pushes the accounts whose sharing changed, of the namespaces
// the Keeper knows (others are signed when first needed).
func (k *Keeper) pushDirty(ctx context.Context) {
	k.mu.Lock()
	dirty := k.dirty
	k.dirty = map[string]bool{}
	known := map[string]bool{}
	for _, ns := range k.byPublicKey {
		known[ns] = true
	}
	k.mu.Unlock()
	for ns := range dirty {
		if !known[ns] {
			continue
		}
		if err := k.pushAccount(ctx, ns); err != nil {
			k.Log.Error(err, "pushing a namespace's account JWT to the brokers; retrying at the next interval", "namespace", ns, "interval", k.PushInterval.String())
		}
	}
}

// Lookup answers a broker's lookup of an account by its public key: the
// JWT of a namespace the Keeper has seen, or false.
func (k *Keeper) Lookup(publicKey string) (string, bool) {
	k.init()
	k.mu.Lock()
	ns, ok := k.byPublicKey[publicKey]
	k.mu.Unlock()
	if !ok {
		return "", false
	}
	a, err := k.accountOf(ns)
	if err != nil {
		k.Log.Error(err, "signing a namespace's account for a broker's lookup", "namespace", ns)
		return "", false
	}
	return a.jwt, true
}

// pushAccount sends namespace's account JWT to the brokers, unless they
// confirmed this very JWT already.
func (k *Keeper) pushAccount(ctx context.Context, namespace string) error {
	a, err := k.accountOf(namespace)
	if err != nil {
		return err
	}
	p := k.pusher.Load()
	if p == nil {
		return ErrNoBrokers
	}
	k.mu.Lock()
	pushed := a.pushed
	k.mu.Unlock()
	if pushed {
		return nil
	}
	if err := p.Push(ctx, a.publicKey, a.jwt); err != nil {
		k.Metrics.pushes.WithLabelValues("failed").Inc()
		return err
	}
	k.Metrics.pushes.WithLabelValues("applied").Inc()
	k.mu.Lock()
	a.pushed = true
	k.mu.Unlock()
	return nil
}

// pushAll sends every known namespace's account JWT again, confirmed or
// not: a broker that restarted since lost what it was pushed, unless its
// peers or a lookup gave it back.
func (k *Keeper) pushAll(ctx context.Context) {
	p := k.pusher.Load()
	if p == nil {
		return
	}
	for _, a := range k.knownAccounts() {
		if err := p.Push(ctx, a.publicKey, a.jwt); err != nil {
			k.Metrics.pushes.WithLabelValues("failed").Inc()
			k.Log.Error(err, "pushing a namespace's account JWT to the brokers; retrying at the next interval", "account", a.publicKey, "interval", k.PushInterval.String())
			continue
		}
		k.Metrics.pushes.WithLabelValues("applied").Inc()
	}
}

// knownAccounts returns every namespace's account, signed for the current
// revocation lists.
func (k *Keeper) knownAccounts() []*account {
	k.mu.Lock()
	namespaces := make([]string, 0, len(k.byPublicKey))
	for _, ns := range k.byPublicKey {
		namespaces = append(namespaces, ns)
	}
	k.mu.Unlock()
	out := make([]*account, 0, len(namespaces))
	for _, ns := range namespaces {
		if a, err := k.accountOf(ns); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// Issue signs the credential of the pod namespace/pod with uid, once the
// brokers hold the namespace's account. A request that is not a renewal
// comes from a new sidecar process: every credential issued to the pod
// until now is revoked (the replaced sidecar's), and the new one is dated
// in a later second, since a revocation refuses what was issued in its
// own second too.
//
// A pod's first sidecar replaces none: the Keeper remembers the pods it
// issued to (until they leave its cache), and a pod created after it
// started that it did not issue to has had no credential. After a leader
// change the new leader revokes at every older pod's first request.
func (k *Keeper) Issue(ctx context.Context, namespace, pod, uid string, created time.Time, bound meshconfig.BrokerBound, renewal bool) (Credential, error) {
	k.init()
	select {
	case <-k.ready:
	case <-ctx.Done():
		return Credential{}, errNotReady
	}
	keys, ok := k.Keys()
	if !ok {
		return Credential{}, errNotReady
	}
	if err := k.pushAccount(ctx, namespace); err != nil {
		return Credential{}, fmt.Errorf("giving the brokers the account of namespace %s: %w", namespace, err)
	}
	now := time.Now()
	k.mu.Lock()
	_, issuedBefore := k.issued[uid]
	k.issued[uid] = struct{}{}
	k.mu.Unlock()
	if !renewal && (issuedBefore || !created.After(k.startedAt)) {
		user, err := keys.UserKey(uid)
		if err != nil {
			return Credential{}, err
		}
		revokedAt := now.Truncate(time.Second)
		k.mu.Lock()
		k.replaced = append(k.replaced, revocation{namespace: namespace, user: publicKey(user), at: revokedAt})
		k.mu.Unlock()
		k.poke()
		next := revokedAt.Add(time.Second)
		select {
		case <-time.After(time.Until(next)):
		case <-ctx.Done():
			return Credential{}, ctx.Err()
		}
		now = time.Now()
	}
	return keys.Issue(namespace, pod, uid, bound, now, k.Limits.Lifetime, k.Accounts.UserMaxSubscriptions)
}
