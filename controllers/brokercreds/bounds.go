package brokercreds

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/weighstation/weighstation/controllers/desired"
	"github.com/weighstation/weighstation/meshconfig"
)

// Bounds keeps what every sidecar pod's credential may allow, from the
// configurations the pod reconciler computes: it sits in front of the
// reconciler's sink (the xDS publisher) and passes everything on. It keeps
// each pod's own part and each namespace's Topics once (shared with the
// sink, not copied), and assembles a pod's configuration only when its
// credential is issued; the namespace-wide Subscription subjects that an
// audit-mode pod's bound takes are counted per namespace.
type Bounds struct {
	Next desired.Sink

	mu     sync.RWMutex
	parts  map[types.NamespacedName]desired.PodPart
	topics map[string][]meshconfig.TopicPolicy
	// subscriptions count, per namespace, the pods whose configuration
	// has each Subscription subject.
	subscriptions map[string]map[string]int
}

// NewBounds returns Bounds in front of next.
func NewBounds(next desired.Sink) *Bounds {
	return &Bounds{Next: next, parts: map[types.NamespacedName]desired.PodPart{}, topics: map[string][]meshconfig.TopicPolicy{}, subscriptions: map[string]map[string]int{}}
}

// SetTopics implements desired.Sink.
func (b *Bounds) SetTopics(namespace string, topics []meshconfig.TopicPolicy) bool {
	b.mu.Lock()
	if len(topics) == 0 {
		delete(b.topics, namespace) // namespaces come and go
	} else {
		b.topics[namespace] = topics
	}
	b.mu.Unlock()
	return b.Next.SetTopics(namespace, topics)
}

// SetPod implements desired.Sink.
func (b *Bounds) SetPod(part desired.PodPart, uid types.UID) bool {
	key := types.NamespacedName{Namespace: part.Namespace, Name: part.Pod}
	b.mu.Lock()
	b.forgetLocked(key)
	b.parts[key] = part
	counts := b.subscriptions[part.Namespace]
	if counts == nil {
		counts = map[string]int{}
		b.subscriptions[part.Namespace] = counts
	}
	for _, s := range part.Subscriptions {
		counts[s.Subject]++
	}
	b.mu.Unlock()
	return b.Next.SetPod(part, uid)
}

// Delete implements desired.Sink.
func (b *Bounds) Delete(pod types.NamespacedName) bool {
	b.mu.Lock()
	b.forgetLocked(pod)
	b.mu.Unlock()
	return b.Next.Delete(pod)
}

func (b *Bounds) forgetLocked(key types.NamespacedName) {
	old, ok := b.parts[key]
	if !ok {
		return
	}
	delete(b.parts, key)
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
	part, ok := b.parts[pod]
	if !ok {
		return meshconfig.BrokerBound{}, false
	}
	cfg, err := desired.Assemble(b.topics[pod.Namespace], part)
	if err != nil {
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
