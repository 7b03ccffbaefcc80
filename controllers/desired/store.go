package desired

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/weighstation/weighstation/internal/broadcast"
	"github.com/weighstation/weighstation/meshconfig"
)

// Sink is where the pod reconciler puts the desired configuration: a
// Store, or the xDS publisher, which keeps a Store and serves it. A pod's
// configuration is its namespace's Topics (SetTopics, once per namespace)
// and its own part (SetPod): a change of one Topic's limits is one
// SetTopics, and no pod is recomputed.
type Sink interface {
	// SetTopics stores a namespace's Topics in force, sorted by subject
	// (View.Topics), and reports whether they changed.
	SetTopics(namespace string, topics []meshconfig.TopicPolicy) bool
	// SetPod stores the part of the pod with the given UID that is its
	// own, and reports whether it changed.
	SetPod(part PodPart, uid types.UID) bool
	// Delete forgets a pod and reports whether it was known.
	Delete(pod types.NamespacedName) bool
}

// Store holds the latest desired configuration of every sidecar pod: each
// namespace's Topics once, and each pod's own part. It is safe for
// concurrent use.
type Store struct {
	mu     sync.RWMutex
	topics map[string][]meshconfig.TopicPolicy
	parts  map[types.NamespacedName]PodPart
	// changed is notified on every change, so a reader can wait
	// for the next one without polling.
	changed broadcast.Signal
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{topics: map[string][]meshconfig.TopicPolicy{}, parts: map[types.NamespacedName]PodPart{}, changed: broadcast.New()}
}

// SetTopics stores a namespace's Topics and reports whether they differ
// from what was stored.
func (s *Store) SetTopics(namespace string, topics []meshconfig.TopicPolicy) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.topics[namespace]; ok && slices.EqualFunc(old, topics, meshconfig.TopicPolicy.Equal) {
		return false
	}
	if len(topics) == 0 {
		// A namespace without Topics holds no entry: namespaces come and go.
		if _, ok := s.topics[namespace]; !ok {
			return false
		}
		delete(s.topics, namespace)
		s.changed.Notify()
		return true
	}
	s.topics[namespace] = topics
	s.changed.Notify()
	return true
}

// SetPod stores a pod's part and reports whether it differs from what was
// stored.
func (s *Store) SetPod(part PodPart, _ types.UID) bool {
	key := types.NamespacedName{Namespace: part.Namespace, Name: part.Pod}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.parts[key]; ok && old.Equal(part) {
		return false
	}
	s.parts[key] = part
	s.changed.Notify()
	return true
}

// Delete forgets a pod's configuration and reports whether there was one.
func (s *Store) Delete(pod types.NamespacedName) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.parts[pod]; !ok {
		return false
	}
	delete(s.parts, pod)
	s.changed.Notify()
	return true
}

// Topics returns a namespace's Topics as last stored (shared: callers must
// not modify them).
func (s *Store) Topics(namespace string) []meshconfig.TopicPolicy {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.topics[namespace]
}

// Part returns a pod's own part.
func (s *Store) Part(pod types.NamespacedName) (PodPart, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	part, ok := s.parts[pod]
	return part, ok
}

// Get returns a pod's whole configuration, assembled from its part and its
// namespace's Topics (see Assemble: it allocates per Topic).
func (s *Store) Get(pod types.NamespacedName) (meshconfig.PodConfig, bool) {
	s.mu.RLock()
	part, ok := s.parts[pod]
	topics := s.topics[pod.Namespace]
	s.mu.RUnlock()
	if !ok {
		return meshconfig.PodConfig{}, false
	}
	cfg, err := Assemble(topics, part)
	if err != nil {
		// Hashing JSON of plain structs cannot fail.
		return meshconfig.PodConfig{}, false
	}
	return cfg, true
}

// Changed returns a channel that is closed at the next change.
func (s *Store) Changed() <-chan struct{} {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.changed.C()
}
