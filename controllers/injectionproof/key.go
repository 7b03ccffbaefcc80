package injectionproof

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/internal/keep"
)

// The key lives in a Secret of the operator's namespace, which every
// replica reads: each serves the webhook, and so signs, and the leader
// verifies what any of them signed. get is limited to its name; create
// cannot be (the apiserver does not know the name before the object
// exists).
//
// +kubebuilder:rbac:groups="",namespace=weighstation-system,resources=secrets,verbs=create
// +kubebuilder:rbac:groups="",namespace=weighstation-system,resources=secrets,resourceNames=weighstation-injection-key,verbs=get;update

// SecretName is the key's Secret; the RBAC rules above name it, so it is
// not an option.
const SecretName = "weighstation-injection-key"

// SecretKey is the key's entry in the Secret: 32 random bytes.
const SecretKey = "hmac-sha256.key"

// keyBytes is the key's length: SHA-256's block is 64 bytes, and 32
// random bytes are as strong as the hash.
const keyBytes = 32

// DefaultKeyInterval is how often a Keeper reads the Secret again: a
// replaced key reaches every replica within it, and a deleted Secret is
// written back with the key the replicas hold.
const DefaultKeyInterval = time.Minute

// fieldManager labels the Secret as the operator's.
const fieldManager = "weighstation-operator"

// KeySource gives the key, once there is one.
type KeySource interface {
	Key() ([]byte, bool)
}

// StaticKey is a KeySource of a fixed key (tests, tools).
type StaticKey []byte

// Key implements KeySource.
func (k StaticKey) Key() ([]byte, bool) { return k, len(k) > 0 }

// ErrNoKey: the Keeper has not read or created the key yet (the Secret
// is unreadable, or the operator has just started).
var ErrNoKey = errors.New("the injection proof key is not loaded yet (Secret " + SecretName + " in the operator's namespace)")

// Keeper keeps the key: it reads the Secret, creates it with a random key
// when there is none (or fills it when the chart or an admin created it
// empty), and reads it again every Interval. It is a manager.Runnable on
// every replica.
type Keeper struct {
	// Reader reads through the apiserver (the manager's APIReader): the
	// RBAC rule allows get on one name, no list or watch.
	Reader client.Reader
	Writer client.Writer
	// Namespace is the operator's.
	Namespace string
	// Interval is DefaultKeyInterval when zero.
	Interval time.Duration
	Log      logr.Logger

	key atomic.Pointer[[]byte]
}

// Key implements KeySource.
func (k *Keeper) Key() ([]byte, bool) {
	p := k.key.Load()
	if p == nil {
		return nil, false
	}
	return *p, true
}

// Verify is Verify with the Keeper's key.
func (k *Keeper) Verify(pod *corev1.Pod) error {
	key, ok := k.Key()
	if !ok {
		return ErrNoKey
	}
	return Verify(pod, key)
}

// NeedLeaderElection is false: every replica signs.
func (k *Keeper) NeedLeaderElection() bool { return false }

// Start keeps the key until ctx ends.
func (k *Keeper) Start(ctx context.Context) error {
	interval := k.Interval
	if interval <= 0 {
		interval = DefaultKeyInterval
	}
	return keep.Run(ctx, interval, nil, k.Sync, k.Log, "the injection proof key")
}

// Sync reads the key from the Secret, creating or filling it when it
// holds none, and keeps what it read.
func (k *Keeper) Sync(ctx context.Context) error {
	held, _ := k.Key()
	key, err := k.ensure(ctx, held)
	if err != nil {
		return err
	}
	if held != nil && !bytes.Equal(held, key) {
		// Pods signed with the old key no longer verify: say so.
		k.Log.Info("the injection proof key changed in its Secret: pods injected before must be re-created to get a configuration and a credential", "secret", k.Namespace+"/"+SecretName)
	}
	k.key.Store(&key)
	return nil
}

// ensure returns the Secret's key. A missing Secret is created with held
// (the key this replica signs with, so that a deleted Secret comes back
// unchanged) or a new one; a Secret without the entry is filled. Another
// replica creating or filling it first makes the write fail, and the
// retry reads what it wrote.
func (k *Keeper) ensure(ctx context.Context, held []byte) ([]byte, error) {
	name := types.NamespacedName{Namespace: k.Namespace, Name: SecretName}
	var secret corev1.Secret
	err := k.Reader.Get(ctx, name, &secret)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading the Secret %s: %w", name, err)
	}
	found := err == nil
	if found {
		if key, ok := secret.Data[SecretKey]; ok {
			if len(key) != keyBytes {
				return nil, fmt.Errorf("the Secret %s: %s must be %d bytes, it has %d (delete the entry to have the operator write a new key)", name, SecretKey, keyBytes, len(key))
			}
			return key, nil
		}
	}
	key := held
	if key == nil {
		key = make([]byte, keyBytes)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("creating the injection proof key: %w", err)
		}
	}
	if found {
		if secret.Data == nil {
			secret.Data = map[string][]byte{}
		}
		secret.Data[SecretKey] = key
		// The resourceVersion read makes a concurrent fill conflict.
		if err := k.Writer.Update(ctx, &secret); err != nil {
			return nil, fmt.Errorf("writing the injection proof key into the Secret %s: %w", name, err)
		}
	} else {
		secret = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: name.Namespace, Name: name.Name, Labels: map[string]string{"app.kubernetes.io/managed-by": fieldManager}},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{SecretKey: key},
		}
		if err := k.Writer.Create(ctx, &secret); err != nil {
			return nil, fmt.Errorf("creating the Secret %s: %w", name, err)
		}
	}
	k.Log.Info("wrote the injection proof key", "secret", name.String())
	return key, nil
}

// VerifyPod reads the pod namespace/name through r and verifies it with
// keys' key: it must still be the pod of uid (the one a token is bound
// to) and carry a proof for it. r must read from the apiserver (the
// manager's APIReader): the manager's cache holds pod metadata alone, and
// a typed Pod read through it would start an informer of every pod in the
// cluster.
func VerifyPod(ctx context.Context, r client.Reader, keys KeySource, namespace, name string, uid types.UID) error {
	key, ok := keys.Key()
	if !ok {
		return ErrNoKey
	}
	var pod corev1.Pod
	if err := r.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: pod %s/%s does not exist", ErrNotProven, namespace, name)
		}
		return fmt.Errorf("reading pod %s/%s: %w", namespace, name, err)
	}
	if pod.UID != uid {
		return fmt.Errorf("%w: pod %s/%s has UID %s, not %s", ErrNotProven, namespace, name, pod.UID, uid)
	}
	if err := Verify(&pod, key); err != nil {
		return fmt.Errorf("pod %s/%s: %w", namespace, name, err)
	}
	return nil
}
