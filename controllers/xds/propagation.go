package xds

import (
	"sync"
	"time"

	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
)

// Version is the version the xDS cache gives a resource, and so the version
// sidecars acknowledge: a hash of its deterministic encoding. Status
// reports it, so that `kubectl get` and an ACK speak of the same thing.
func Version(res *xdsv1.Resource) string {
	b, err := cachev3.MarshalResource(res)
	if err != nil {
		return ""
	}
	return cachev3.HashResource(b)
}

// NACK is a sidecar's refusal of one version of a resource.
type NACK struct {
	Version string
	Reason  string
	At      time.Time
}

// Tracker knows, from the sidecars' ACKs and NACKs, which version of each
// resource each pod holds. It outlives streams: a sidecar keeps what it
// applied while it reconnects. It forgets a pod only when the pod is gone.
type Tracker struct {
	mu sync.Mutex
	// acked is, per pod ("<namespace>/<pod>"), the version of each
	// resource the pod's sidecar applied.
	acked map[string]map[string]string
	// nacked is, per resource, each pod's last refusal; an ACK of a later
	// version clears it.
	nacked map[string]map[string]NACK
	// changed is closed and replaced on every change.
	changed chan struct{}
	// onChange, if set, is told the names of the resources whose
	// acknowledgements changed (outside the lock).
	onChange func(resources []string)
}

// OnChange sets a function that is told, after each ACK, NACK or Forget,
// the names of the resources concerned. Set it before serving.
func (t *Tracker) OnChange(f func(resources []string)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onChange = f
}

func (t *Tracker) notify(names []string) {
	t.mu.Lock()
	f := t.onChange
	t.mu.Unlock()
	if f != nil && len(names) > 0 {
		f(names)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// NewTracker returns an empty tracker.
func NewTracker() *Tracker {
	return &Tracker{acked: map[string]map[string]string{}, nacked: map[string]map[string]NACK{}, changed: make(chan struct{})}
}

// ack records that pod applied these versions.
func (t *Tracker) ack(pod string, versions map[string]string, removed []string) {
	defer t.notify(append(keys(versions), removed...))
	t.mu.Lock()
	defer t.mu.Unlock()
	held := t.acked[pod]
	if held == nil {
		held = map[string]string{}
		t.acked[pod] = held
	}
	for name, v := range versions {
		held[name] = v
		if n, ok := t.nacked[name]; ok {
			delete(n, pod)
		}
	}
	for _, name := range removed {
		delete(held, name)
	}
	t.notifyLocked()
}

// nack records that pod refused these versions, keeping what it held.
func (t *Tracker) nack(pod string, versions map[string]string, reason string, at time.Time) {
	defer t.notify(keys(versions))
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, v := range versions {
		n := t.nacked[name]
		if n == nil {
			n = map[string]NACK{}
			t.nacked[name] = n
		}
		n[pod] = NACK{Version: v, Reason: reason, At: at}
	}
	t.notifyLocked()
}

// Forget drops a pod that no longer exists.
func (t *Tracker) Forget(pod string) {
	t.mu.Lock()
	names := keys(t.acked[pod])
	t.mu.Unlock()
	defer t.notify(names)
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.acked, pod)
	for _, n := range t.nacked {
		delete(n, pod)
	}
	t.notifyLocked()
}

// Acked returns the version of resource that pod applied ("" for none).
func (t *Tracker) Acked(pod, resource string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.acked[pod][resource]
}

// NACKs returns the pods' current refusals of resource.
func (t *Tracker) NACKs(resource string) map[string]NACK {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]NACK, len(t.nacked[resource]))
	for pod, n := range t.nacked[resource] {
		out[pod] = n
	}
	return out
}

// Changed returns a channel closed at the next ACK, NACK or Forget.
func (t *Tracker) Changed() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changed
}

func (t *Tracker) notifyLocked() {
	close(t.changed)
	t.changed = make(chan struct{})
}
