package brokercreds

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/broker"
	"github.com/weighstation/weighstation/internal/keep"
	"github.com/weighstation/weighstation/internal/wake"
)

// The operator keeps the broker keys Secret and the trust ConfigMap in its
// own namespace. get and update are limited to their names; create cannot
// be (the apiserver does not know the name before the object exists).
//
// +kubebuilder:rbac:groups="",namespace=weighstation-system,resources=secrets,resourceNames=weighstation-broker-keys,verbs=get;update
// +kubebuilder:rbac:groups="",namespace=weighstation-system,resources=configmaps,verbs=create
// +kubebuilder:rbac:groups="",namespace=weighstation-system,resources=configmaps,resourceNames=weighstation-broker-trust,verbs=get;update

// Names of the Secret and the ConfigMap; the RBAC rules above name them, so
// they are not options.
const (
	KeysSecretName     = "weighstation-broker-keys"
	TrustConfigMapName = "weighstation-broker-trust"
	// FieldManager labels what this package creates.
	FieldManager = "weighstation-operator"
)

// DefaultPushInterval is how often the account JWT is pushed again
// although it did not change: a broker that restarted read the ConfigMap
// as the kubelet last refreshed it, which can lag behind a revocation.
// The same JWT again costs a broker a string comparison.
const DefaultPushInterval = 30 * time.Second

// revocationBatch is how long revocations are gathered before one write
// and one push: a Deployment scaled down deletes its pods together.
const revocationBatch = 200 * time.Millisecond

// Keeper keeps the broker keys, the namespaces' accounts and their
// revocation lists. It runs on the leader: it creates the keys on first
// start (or fills the Secret the chart created empty), writes the trust
// ConfigMap that the brokers mount, revokes the credentials of sidecar pods
// that are deleted, leave the mesh or are replaced, signs each namespace's
// account (with its sharing and revocations), pushes it to the running
// brokers and answers their lookups, and issues credentials (Issue).
type Keeper struct {
	// Reader reads through the API server (the manager's APIReader), not
	// the cache, and Writer writes (the manager's client).
	Reader client.Reader
	Writer client.Writer
	// Namespace is the operator's own.
	Namespace string
	// Pods is the operator's pod cache (the metadata of the sidecar pods
	// that count): a pod that leaves it is revoked, unless Reader still
	// finds it running under the same UID. nil: nothing is revoked.
	Pods cache.Informers
	// Policies reads Topics and Subscriptions (the operator's cache),
	// whose exports and imports the namespaces' accounts carry; it is also
	// watched, when it is Pods' cache, for changes to them. nil: no
	// sharing.
	Policies client.Reader
	// BrokerURL is where the operator connects to push the account JWT;
	// empty: no push, the brokers learn revocations from the ConfigMap
	// alone (at their next start).
	BrokerURL    string
	Limits       Limits
	Accounts     AccountSettings
	PushInterval time.Duration
	Metrics      *Metrics
	Log          logr.Logger

	keys atomic.Pointer[Keys]
	// pusher is the connection to the brokers; nil without BrokerURL.
	pusher atomic.Pointer[Pusher]
	// ready is closed once keys, the revocation lists and the pusher are
	// set up: Issue waits for it.
	ready     chan struct{}
	readyOnce sync.Once

	// Lock order: mu only; no lock is held during a push or an API call.
	mu sync.Mutex
	// revoked is what the trust ConfigMap holds (written by the loop
	// only).
	revoked Revocations
	// accounts are the namespaces' signed account JWTs, by namespace,
	// and namespaces by account public key, for the brokers' lookups.
	accounts    map[string]*account
	byPublicKey map[string]string
	pending     []leftPod    // pods that left the cache, to revoke in the next batch
	replaced    []revocation // sidecars replaced, to revoke in the next batch
	wake        chan struct{}
	// issued are the pods issued a credential since startedAt, until
	// they leave the cache.
	issued    map[string]struct{}
	startedAt time.Time
	// dirty are namespaces whose sharing changed, to push.
	dirty map[string]bool
}

// account is one namespace's account JWT as last signed, and whether the
// brokers confirmed it.
type account struct {
	publicKey, jwt string
	pushed         bool
}

// Keys returns the keys once the Keeper has read or created them.
func (k *Keeper) Keys() (Keys, bool) {
	p := k.keys.Load()
	if p == nil {
		return Keys{}, false
	}
	return *p, true
}

// NeedLeaderElection is true: one replica writes the revocation list.
// Credentials are issued over the xDS connection, which only the leader
// serves.
func (k *Keeper) NeedLeaderElection() bool { return true }

// init makes the Keeper's channels and maps; New is not needed because
// the Keeper is built as a literal.
func (k *Keeper) init() {
	k.readyOnce.Do(func() {
		k.ready = make(chan struct{})
		k.wake = make(chan struct{}, 1)
		k.accounts = map[string]*account{}
		k.byPublicKey = map[string]string{}
		k.revoked = Revocations{}
		k.issued = map[string]struct{}{}
		k.dirty = map[string]bool{}
		k.startedAt = time.Now()
	})
}

// Start keeps the keys and the revocation lists until ctx ends.
func (k *Keeper) Start(ctx context.Context) error {
	k.init()
	if k.PushInterval <= 0 {
		k.PushInterval = DefaultPushInterval
	}
	if k.Accounts == (AccountSettings{}) {
		k.Accounts = DefaultAccountSettings
	}
	if err := errors.Join(k.Limits.Validate(), k.Accounts.Validate()); err != nil {
		return err
	}
	keys, err := retry(ctx, k.Log, "the broker keys", func() (Keys, error) { return k.ensureKeys(ctx) })
	if err != nil {
		return nil // ctx ended
	}
	k.keys.Store(&keys)
	if _, err := retry(ctx, k.Log, "the broker trust ConfigMap", func() (Revocations, error) { return k.sync(ctx, keys, nil) }); err != nil {
		return nil
	}
	if k.Pods != nil {
		pod := &metav1.PartialObjectMetadata{}
		pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
		informer, err := k.Pods.GetInformer(ctx, pod)
		if err != nil {
			return fmt.Errorf("watching sidecar pods for deletion: %w", err)
		}
		reg, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: k.podSeen, DeleteFunc: k.podLeft})
		if err != nil {
			return fmt.Errorf("watching sidecar pods for deletion: %w", err)
		}
		defer func() { _ = informer.RemoveEventHandler(reg) }()
		if k.Policies != nil {
			stop, err := k.watchPolicies(ctx)
			if err != nil {
				return err
			}
			defer stop()
		}
	}
	if k.BrokerURL != "" {
		pusher, err := DialPusher(k.BrokerURL, keys, k, k.Log.WithName("push"))
		if err != nil {
			return err
		}
		defer pusher.Close()
		k.pusher.Store(pusher)
	}
	close(k.ready)
	k.pushAll(ctx)
	ticker := time.NewTicker(k.PushInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			k.pushAll(ctx)
			continue
		case <-k.wake:
		}
		// Gather the rest of a burst of deletions into this batch.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(revocationBatch):
		}
		k.pushDirty(ctx)
		k.mu.Lock()
		left, replaced := k.pending, k.replaced
		k.pending, k.replaced = nil, nil
		k.mu.Unlock()
		gone, err := retry(ctx, k.Log, "the pods that left", func() ([]revocation, error) { return k.gone(ctx, keys, left) })
		if err != nil {
			return nil
		}
		batch := append(gone, replaced...)
		if len(batch) == 0 {
			continue
		}
		if _, err := retry(ctx, k.Log, "the revocation lists", func() (Revocations, error) { return k.sync(ctx, keys, batch) }); err != nil {
			return nil
		}
		k.Metrics.revoked.Add(float64(len(batch)))
		k.Log.Info("revoked broker credentials", "podsGone", len(gone), "sidecarsReplaced", len(replaced))
		namespaces := map[string]bool{}
		for _, r := range batch {
			namespaces[r.namespace] = true
		}
		for ns := range namespaces {
			if err := k.pushAccount(ctx, ns); err != nil {
				k.Log.Error(err, "pushing a namespace's account JWT to the brokers; retrying at the next interval", "namespace", ns, "interval", k.PushInterval.String())
			}
		}
	}
}

// leftPod is a pod that left the operator's pod cache.
type leftPod struct {
	namespace, name string
	uid             types.UID
}

// podLeft queues a pod that left the cache (deleted, finished, or its
// label removed) for the next batch, which revokes its credentials.
func (k *Keeper) podLeft(obj any) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(metav1.Object)
	if !ok || pod.GetUID() == "" {
		return
	}
	k.mu.Lock()
	k.pending = append(k.pending, leftPod{namespace: pod.GetNamespace(), name: pod.GetName(), uid: pod.GetUID()})
	delete(k.issued, string(pod.GetUID()))
	k.mu.Unlock()
	k.poke()
}

// podSeen learns the namespace of a sidecar pod, so that the Keeper can
// answer the brokers' lookups of its account even before the pod's
// sidecar asks for a credential (a new leader, a broker that restarted).
func (k *Keeper) podSeen(obj any) {
	pod, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	if _, err := k.accountOf(pod.GetNamespace()); err != nil {
		k.Log.Error(err, "signing a namespace's account", "namespace", pod.GetNamespace())
	}
}

func (k *Keeper) poke() { wake.Poke(k.wake) }

// runningPods is the field selector of pods that have not finished: the
// apiserver filters on it, so a list holds metadata and nothing else.
var runningPods = fields.AndSelectors(
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
)

// gone returns the revocations of the pods in left: each pod's user key,
// from RevocationMargin past now for a pod that no longer runs (not
// there, there under another UID, finished, or being deleted: a pod
// leaves the cache only once it is gone, so that is a race with its
// deletion), and from now for a pod that still runs under the same UID
// (its label was removed: it left the mesh, and a credential issued
// after now is refused to it anyway, the operator no longer serving it).
// One metadata list per namespace decides a whole batch, so a Deployment
// scaled to zero costs a request per namespace, not per pod.
func (k *Keeper) gone(ctx context.Context, keys Keys, left []leftPod) ([]revocation, error) {
	byNamespace := map[string][]leftPod{}
	for _, p := range left {
		byNamespace[p.namespace] = append(byNamespace[p.namespace], p)
	}
	now := time.Now()
	var revoke []revocation
	for ns, pods := range byNamespace {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
		if err := k.Reader.List(ctx, list, client.InNamespace(ns), client.MatchingFieldsSelector{Selector: runningPods}); err != nil {
			return nil, fmt.Errorf("listing the pods of %s: %w", ns, err)
		}
		running := map[types.UID]bool{}
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil {
				running[p.UID] = true
			}
		}
		for _, p := range pods {
			user, err := keys.UserKey(string(p.uid))
			if err != nil {
				return nil, err
			}
			at := now.Add(RevocationMargin)
			if running[p.uid] {
				k.Log.Info("a pod left the mesh but still runs (its label was removed): its broker credential is revoked", "pod", ns+"/"+p.name)
				at = now
			}
			revoke = append(revoke, revocation{namespace: ns, user: publicKey(user), at: at})
		}
	}
	return revoke, nil
}

// ensureKeys reads the keys Secret, and fills it with new keys when it is
// missing or empty.
func (k *Keeper) ensureKeys(ctx context.Context) (Keys, error) {
	key := types.NamespacedName{Namespace: k.Namespace, Name: KeysSecretName}
	var secret corev1.Secret
	err := k.Reader.Get(ctx, key, &secret)
	if err != nil && !apierrors.IsNotFound(err) {
		return Keys{}, fmt.Errorf("reading the Secret %s: %w", key, err)
	}
	found := err == nil
	if found {
		keys, ok, err := ParseKeys(secret.Data)
		if err != nil {
			return Keys{}, fmt.Errorf("the Secret %s: %w", key, err)
		}
		if ok {
			return keys, nil
		}
	}
	keys, err := GenerateKeys()
	if err != nil {
		return Keys{}, err
	}
	data, err := keys.SecretData()
	if err != nil {
		return Keys{}, err
	}
	if found {
		if secret.Data == nil {
			secret.Data = map[string][]byte{}
		}
		maps.Copy(secret.Data, data)
		// The update carries the resourceVersion read: a conflict means
		// another replica filled it first, and the retry reads its keys.
		if err := k.Writer.Update(ctx, &secret); err != nil {
			return Keys{}, fmt.Errorf("writing the broker keys into the Secret %s: %w", key, err)
		}
	} else {
		secret = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{"app.kubernetes.io/managed-by": FieldManager}},
			Type:       corev1.SecretTypeOpaque,
			Data:       data,
		}
		if err := k.Writer.Create(ctx, &secret); err != nil {
			return Keys{}, fmt.Errorf("creating the Secret %s: %w", key, err)
		}
	}
	k.Log.Info("created the broker keys", "secret", key.String(), "operator", publicKey(keys.Operator), "systemAccount", publicKey(keys.System))
	return keys, nil
}

// sync reads the trust ConfigMap, adds batch to its revocation lists,
// writes it if it differs from what keys and the lists make, and keeps
// the lists (and re-signs the accounts whose list changed).
func (k *Keeper) sync(ctx context.Context, keys Keys, batch []revocation) (Revocations, error) {
	key := types.NamespacedName{Namespace: k.Namespace, Name: TrustConfigMapName}
	var cm corev1.ConfigMap
	err := k.Reader.Get(ctx, key, &cm)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading the ConfigMap %s: %w", key, err)
	}
	found := err == nil
	stored := Trust{Operator: cm.Data[broker.TrustOperatorFile], SystemAccount: cm.Data[broker.TrustSystemAccountFile]}
	revoked := Revocations{}
	if found && keys.Matches(stored) {
		if revoked, err = ParseRevocations(cm.Data[TrustRevocationsKey]); err != nil {
			k.Log.Error(err, "the trust ConfigMap's revocation lists do not parse; starting new lists")
			revoked = Revocations{}
		}
	} else if found {
		// Written for other keys (the Secret was replaced): its lists
		// name users those keys never signed.
		k.Log.Info("the trust ConfigMap is for other keys; starting new revocation lists")
	}
	before := revoked.Clone()
	next, folded, err := k.Limits.revoke(revoked, batch, time.Now())
	if errors.Is(err, errNothingToRevoke) {
		next, folded, err = k.Limits.compact(revoked, time.Now())
	}
	if err != nil {
		return nil, err
	}
	if folded > 0 {
		k.Metrics.droppedEarly.Add(float64(folded))
		k.Log.Info("the revocation lists are full: folded their oldest entries into revocations of every older credential of their namespaces", "folded", folded, "maxEntries", k.Limits.MaxEntries)
	}
	if !found || !keys.Matches(stored) || !next.Equal(before) || cm.Data[TrustRevocationsKey] == "" {
		trust := stored
		if !keys.Matches(stored) {
			if trust, err = keys.Trust(); err != nil {
				return nil, err
			}
		}
		if cm.Data, err = trust.ConfigMapData(next); err != nil {
			return nil, err
		}
		if found {
			if err := k.Writer.Update(ctx, &cm); err != nil {
				return nil, fmt.Errorf("writing the ConfigMap %s: %w", key, err)
			}
		} else {
			cm.ObjectMeta = metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{"app.kubernetes.io/managed-by": FieldManager}}
			if err := k.Writer.Create(ctx, &cm); err != nil {
				return nil, fmt.Errorf("creating the ConfigMap %s: %w", key, err)
			}
		}
	}
	k.Metrics.revocationEntries.Set(float64(next.Len()))
	k.mu.Lock()
	signedWith := k.revoked
	k.revoked = next
	for ns := range k.accounts {
		if !maps.Equal(unixTimes(signedWith[ns]), unixTimes(next[ns])) {
			delete(k.accounts, ns) // accountOf signs it again
		}
	}
	k.mu.Unlock()
	return next, nil
}

// retry calls do until it succeeds or ctx ends, backing off from
// keep.FirstRetry (the operator's other keepers' first retry) to thirty
// seconds; a conflict with another writer is retried at once.
func retry[T any](ctx context.Context, log logr.Logger, what string, do func() (T, error)) (T, error) {
	wait := keep.FirstRetry
	for {
		v, err := do()
		if err == nil {
			return v, nil
		}
		if (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) && ctx.Err() == nil {
			continue
		}
		log.Error(err, "keeping "+what, "retryIn", wait.String())
		select {
		case <-ctx.Done():
			var zero T
			return zero, errors.Join(ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}
