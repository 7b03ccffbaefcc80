package desired

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/weighstation/weighstation/meshconfig"
)

// Sink is where the pod reconciler puts each pod's desired configuration:
// a Store, or the xDS publisher, which keeps a Store and serves it.
type Sink interface {
	// Set stores the configuration of the pod with the given UID and
	// reports whether it changed.
	Set(cfg meshconfig.PodConfig, uid types.UID) bool
	// Delete forgets a pod and reports whether it was known.
	Delete(pod types.NamespacedName) bool
}

// Store holds the latest desired configuration of every sidecar pod. It is
// safe for concurrent use.
type Store struct {
	mu      sync.RWMutex
	configs map[types.NamespacedName]meshconfig.PodConfig
	// changed is closed and replaced on every change, so a reader can wait
	// for the next one without polling.
	changed chan struct{}
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{configs: map[types.NamespacedName]meshconfig.PodConfig{}, changed: make(chan struct{})}
}

func keyOf(cfg meshconfig.PodConfig) types.NamespacedName {
	return types.NamespacedName{Namespace: cfg.Namespace, Name: cfg.Pod}
}

// Set stores cfg and reports whether it differs from what was stored.
func (s *Store) Set(cfg meshconfig.PodConfig, _ types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.configs[keyOf(cfg)]; ok && old.Version == cfg.Version {
		return false
	}
	s.configs[keyOf(cfg)] = cfg
	s.notifyLocked()
	return true
}

// Delete forgets a pod's configuration and reports whether there was one.
func (s *Store) Delete(pod types.NamespacedName) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.configs[pod]; !ok {
		return false
	}
	delete(s.configs, pod)
	s.notifyLocked()
	return true
}

// Get returns a pod's configuration.
func (s *Store) Get(pod types.NamespacedName) (meshconfig.PodConfig, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	cfg, ok := s.configs[pod]
	return cfg, ok
}

// Changed returns a channel that is closed at the next change.
func (s *Store) Changed() <-chan struct{} {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.changed
}

func (s *Store) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}
