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

// Keeper keeps the broker keys and the account's revocation list. It runs
// on the leader: it creates the keys on first start (or fills the Secret
// the chart created empty), writes the trust ConfigMap that the brokers
// mount, revokes the credential of every sidecar pod that is deleted, and
// pushes the account JWT to the running brokers.
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
	// BrokerURL is where the operator connects to push the account JWT;
	// empty: no push, the brokers learn revocations from the ConfigMap
	// alone (at their next start).
	BrokerURL    string
	Limits       Limits
	PushInterval time.Duration
	Metrics      *Metrics
	Log          logr.Logger

	keys atomic.Pointer[Keys]

	mu      sync.Mutex
	pending []leftPod // pods that left the cache, to revoke in the next batch
	wake    chan struct{}
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

// Start keeps the keys and the revocation list until ctx ends.
func (k *Keeper) Start(ctx context.Context) error {
	if k.PushInterval <= 0 {
		k.PushInterval = DefaultPushInterval
	}
	if err := k.Limits.Validate(); err != nil {
		return err
	}
	k.wake = make(chan struct{}, 1)
	keys, err := retry(ctx, k.Log, "the broker keys", func() (Keys, error) { return k.ensureKeys(ctx) })
	if err != nil {
		return nil // ctx ended
	}
	k.keys.Store(&keys)
	trust, err := retry(ctx, k.Log, "the broker trust ConfigMap", func() (Trust, error) { return k.sync(ctx, keys, nil) })
	if err != nil {
		return nil
	}
	if k.Pods != nil {
		pod := &metav1.PartialObjectMetadata{}
		pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
		informer, err := k.Pods.GetInformer(ctx, pod)
		if err != nil {
			return fmt.Errorf("watching sidecar pods for deletion: %w", err)
		}
		reg, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{DeleteFunc: k.podLeft})
		if err != nil {
			return fmt.Errorf("watching sidecar pods for deletion: %w", err)
		}
		defer func() { _ = informer.RemoveEventHandler(reg) }()
	}
	var pusher *Pusher
	if k.BrokerURL != "" {
		if pusher, err = DialPusher(k.BrokerURL, keys, k.Log.WithName("push")); err != nil {
			return err
		}
		defer pusher.Close()
		k.push(ctx, pusher, trust.Account)
	}
	ticker := time.NewTicker(k.PushInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			k.push(ctx, pusher, trust.Account)
			continue
		case <-k.wake:
		}
		// Gather the rest of a burst of deletions into this batch.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(revocationBatch):
		}
		k.mu.Lock()
		left := k.pending
		k.pending = nil
		k.mu.Unlock()
		batch, err := retry(ctx, k.Log, "the pods that left", func() ([]string, error) { return k.gone(ctx, keys, left) })
		if err != nil {
			return nil
		}
		if len(batch) == 0 {
			continue
		}
		next, err := retry(ctx, k.Log, "the revocation list", func() (Trust, error) { return k.sync(ctx, keys, batch) })
		if err != nil {
			return nil
		}
		trust = next
		k.Metrics.revoked.Add(float64(len(batch)))
		k.Log.Info("revoked the broker credentials of deleted pods", "revoked", len(batch))
		k.push(ctx, pusher, trust.Account)
	}
}

func (k *Keeper) push(ctx context.Context, p *Pusher, accountJWT string) {
	if p == nil {
		return
	}
	if err := p.Push(ctx, accountJWT); err != nil {
		k.Metrics.pushes.WithLabelValues("failed").Inc()
		k.Log.Error(err, "pushing the account JWT to the brokers; retrying at the next interval", "interval", k.PushInterval.String())
		return
	}
	k.Metrics.pushes.WithLabelValues("applied").Inc()
}

// leftPod is a pod that left the operator's pod cache.
type leftPod struct {
	namespace, name string
	uid             types.UID
}

// podLeft queues a pod that left the cache (deleted, finished, or its
// label removed) for the next batch, which decides whether to revoke it.
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
	k.mu.Unlock()
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// runningPods is the field selector of pods that have not finished: the
// apiserver filters on it, so a list holds metadata and nothing else.
var runningPods = fields.AndSelectors(
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
)

// gone returns the user keys of the pods in left that no longer run: not
// there, there under another UID (re-created), finished, or being deleted
// (a pod leaves the cache only once it is gone, so that is a race with
// its deletion). A pod still running under the same UID left because its
// label was removed: its sidecar runs on, and keeps its credential. One
// metadata list per namespace decides a whole batch, so a Deployment
// scaled to zero costs a request per namespace, not per pod.
func (k *Keeper) gone(ctx context.Context, keys Keys, left []leftPod) ([]string, error) {
	byNamespace := map[string][]leftPod{}
	for _, p := range left {
		byNamespace[p.namespace] = append(byNamespace[p.namespace], p)
	}
	var revoke []string
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
			if running[p.uid] {
				k.Log.Info("a pod left the sidecar pods but still runs (its label was removed): its broker credential stays valid", "pod", ns+"/"+p.name)
				continue
			}
			user, err := keys.UserKey(string(p.uid))
			if err != nil {
				return nil, err
			}
			revoke = append(revoke, publicKey(user))
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
	k.Log.Info("created the broker keys", "secret", key.String(), "operator", publicKey(keys.Operator), "account", publicKey(keys.Account))
	return keys, nil
}

// sync reads the trust ConfigMap, adds revoke to its revocation list, and
// writes it if it differs from what keys and the list make. It returns
// what the ConfigMap holds then.
func (k *Keeper) sync(ctx context.Context, keys Keys, revoke []string) (Trust, error) {
	key := types.NamespacedName{Namespace: k.Namespace, Name: TrustConfigMapName}
	var cm corev1.ConfigMap
	err := k.Reader.Get(ctx, key, &cm)
	if err != nil && !apierrors.IsNotFound(err) {
		return Trust{}, fmt.Errorf("reading the ConfigMap %s: %w", key, err)
	}
	found := err == nil
	stored := Trust{Operator: cm.Data[broker.TrustOperatorFile], SystemAccount: cm.Data[broker.TrustSystemAccountFile], Account: cm.Data[broker.TrustAccountFile]}
	revoked := map[string]time.Time{}
	if found && stored.Account != "" {
		if revoked, err = keys.RevokedIn(stored.Account); err != nil {
			// Written for other keys (the Secret was replaced): its list
			// names users those keys never signed.
			k.Log.Info("the trust ConfigMap is for other keys; starting a new revocation list", "reason", err.Error())
			revoked = map[string]time.Time{}
		}
	}
	if len(revoke) > 0 {
		var early int
		if revoked, early, err = k.Limits.revoke(revoked, revoke, time.Now()); err != nil {
			return Trust{}, err
		}
		if early > 0 {
			k.Metrics.droppedEarly.Add(float64(early))
			k.Log.Info("the revocation list is full: dropped its oldest entries before their retention ended", "dropped", early, "maxEntries", k.Limits.MaxEntries)
		}
	}
	if found && keys.Matches(stored, revoked) {
		return stored, nil
	}
	trust, err := keys.Trust(revoked)
	if err != nil {
		return Trust{}, err
	}
	cm.Data = trust.ConfigMapData()
	if found {
		if err := k.Writer.Update(ctx, &cm); err != nil {
			return Trust{}, fmt.Errorf("writing the ConfigMap %s: %w", key, err)
		}
	} else {
		cm.ObjectMeta = metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{"app.kubernetes.io/managed-by": FieldManager}}
		if err := k.Writer.Create(ctx, &cm); err != nil {
			return Trust{}, fmt.Errorf("creating the ConfigMap %s: %w", key, err)
		}
	}
	k.Metrics.revocationEntries.Set(float64(len(revoked)))
	return trust, nil
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
