package brokercreds

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/weighstation/weighstation/controllers/desired"
	"github.com/weighstation/weighstation/meshconfig"
)

// Bounds keeps what every sidecar pod's credential may allow, from the
// configurations the pod reconciler computes: it sits in front of the
// reconciler's sink (the xDS publisher) and passes everything on. A
// pod's entry is its configuration's subject set, a few strings; the
// namespace-wide Subscription subjects that an audit-mode pod's bound
// takes are counted per namespace.
type Bounds struct {
	Next desired.Sink

	mu sync.RWMutex
	// configs are the pods' configurations as far as bounds need them.
	configs map[types.NamespacedName]meshconfig.PodConfig
	// subscriptions count, per namespace, the pods whose configuration
	// has each Subscription subject.
	subscriptions map[string]map[string]int
}

// NewBounds returns Bounds in front of next.
func NewBounds(next desired.Sink) *Bounds {
	return &Bounds{Next: next, configs: map[types.NamespacedName]meshconfig.PodConfig{}, subscriptions: map[string]map[string]int{}}
}

// Set implements desired.Sink.
func (b *Bounds) Set(cfg meshconfig.PodConfig, uid types.UID) bool {
	key := types.NamespacedName{Namespace: cfg.Namespace, Name: cfg.Pod}
	b.mu.Lock()
	b.forgetLocked(key)
	b.configs[key] = meshconfig.PodConfig{Namespace: cfg.Namespace, Pod: cfg.Pod, Topics: cfg.Topics, Default: cfg.Default, Subscriptions: cfg.Subscriptions, Access: cfg.Access}
	counts := b.subscriptions[cfg.Namespace]
	if counts == nil {
		counts = map[string]int{}
		b.subscriptions[cfg.Namespace] = counts
	}
	for _, s := range cfg.Subscriptions {
		counts[s.Subject]++
	}
	b.mu.Unlock()
	return b.Next.Set(cfg, uid)
}

// Delete implements desired.Sink.
func (b *Bounds) Delete(pod types.NamespacedName) bool {
	b.mu.Lock()
	b.forgetLocked(pod)
	b.mu.Unlock()
	return b.Next.Delete(pod)
}

func (b *Bounds) forgetLocked(key types.NamespacedName) {
	old, ok := b.configs[key]
	if !ok {
		return
	}
	delete(b.configs, key)
	counts := b.subscriptions[key.Namespace]
	for _, s := range old.Subscriptions {
		if counts[s.Subject]--; counts[s.Subject] <= 0 {
			delete(counts, s.Subject)
		}
	}
	if len(counts) == 0 {
		delete(b.subscriptions, key.Namespace)
	}
}

// Of returns the bound of pod's credential with inboxPrefix, or false
// while the pod's configuration is not computed.
func (b *Bounds) Of(pod types.NamespacedName, inboxPrefix string) (meshconfig.BrokerBound, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	cfg, ok := b.configs[pod]
	if !ok {
		return meshconfig.BrokerBound{}, false
	}
	var namespaceWide []string
	if cfg.Access.Mode == meshconfig.AccessAudit {
		for s := range b.subscriptions[pod.Namespace] {
			namespaceWide = append(namespaceWide, s)
		}
	}
	return meshconfig.BrokerBoundOf(cfg, inboxPrefix, namespaceWide), true
}
