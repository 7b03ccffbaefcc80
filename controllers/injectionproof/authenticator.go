package injectionproof

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/controllers/xds"
)

// Verdicts are kept this long: a proven pod is read again after a minute
// (its proof cannot change once the ValidatingAdmissionPolicy is in place,
// but a cluster may run without it), an unproven one after ten seconds, so
// that a valid token replayed by a pod without a proof costs the
// apiserver one read per ten seconds, not one per call.
const (
	ProvenTTL   = time.Minute
	UnprovenTTL = 10 * time.Second
)

// MaxVerdicts bounds the verdicts kept: past it the oldest half goes.
const MaxVerdicts = 20_000

// Authenticator admits to the xDS server (configuration, reports and
// broker credentials) only the sidecars the injector injected: after Next
// authenticated the token, the pod it is bound to must carry a proof
// (VerifyPod). Labels and annotations a pod acquires later prove nothing.
type Authenticator struct {
	Next xds.Authenticator
	// Reader reads pods from the apiserver (the manager's APIReader).
	Reader client.Reader
	Keys   KeySource

	mu       sync.Mutex
	verdicts map[types.UID]verdict
}

type verdict struct {
	err error
	at  time.Time
}

// Authenticate implements xds.Authenticator.
func (a *Authenticator) Authenticate(ctx context.Context, token string) (xds.Identity, error) {
	id, err := a.Next.Authenticate(ctx, token)
	if err != nil {
		return xds.Identity{}, err
	}
	uid := types.UID(id.PodUID)
	now := time.Now()
	a.mu.Lock()
	v, ok := a.verdicts[uid]
	a.mu.Unlock()
	if !ok || now.Sub(v.at) > ttlOf(v.err) {
		v = verdict{err: VerifyPod(ctx, a.Reader, a.Keys, id.Namespace, id.Pod, uid), at: now}
		if errors.Is(v.err, ErrNotProven) || v.err == nil {
			a.remember(uid, v)
		}
	}
	switch {
	case v.err == nil:
		return id, nil
	case errors.Is(v.err, ErrNotProven):
		return xds.Identity{}, xds.Refuse(codes.PermissionDenied, "not_injected", v.err.Error()+": configuration and broker credentials go only to sidecars the injector injected")
	default:
		return xds.Identity{}, xds.Refuse(codes.Unavailable, "proof_unchecked", fmt.Sprintf("checking the injection proof of pod %s/%s: %v", id.Namespace, id.Pod, v.err))
	}
}

func ttlOf(err error) time.Duration {
	if err == nil {
		return ProvenTTL
	}
	return UnprovenTTL
}

func (a *Authenticator) remember(uid types.UID, v verdict) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.verdicts == nil {
		a.verdicts = map[types.UID]verdict{}
	}
	if len(a.verdicts) >= MaxVerdicts {
		// Expired ones first; if none, any half (map order): a verdict
		// dropped early costs one read more.
		for k, old := range a.verdicts {
			if time.Since(old.at) > ttlOf(old.err) {
				delete(a.verdicts, k)
			}
		}
		for k := range a.verdicts {
			if len(a.verdicts) < MaxVerdicts/2 {
				break
			}
			delete(a.verdicts, k)
		}
	}
	a.verdicts[uid] = v
}
