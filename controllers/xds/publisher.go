package xds

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/go-logr/logr"
	"google.golang.org/protobuf/proto"
	k8stypes "k8s.io/apimachinery/pkg/types"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/controllers/desired"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/meshconfig/xdsresource"
)

// Publisher is the desired state as xDS resources: it keeps every pod's
// configuration (a desired.Store, which it is) and mirrors it into the
// LinearCache that the xDS server serves. A pod's own resource and the
// shared resources it names go into the cache in one update, so a stream
// never sees a pod resource that names a shared resource the cache lacks.
//
// A shared resource lives while some pod names it, and changes in the cache
// only when its content does: that is what keeps one Topic's change from
// resending anything else.
type Publisher struct {
	*desired.Store
	cache   *cachev3.LinearCache
	tracker *Tracker
	log     logr.Logger

	// mu guards the maps; it is taken before the cache's own lock (the
	// cache is updated under mu, so two pods' updates of one shared
	// resource cannot land out of order).
	mu     sync.Mutex
	pods   map[string]publishedPod // by pod resource name
	shared map[string]*publishedShared
	// changedAt is when each resource last changed in the cache: the start
	// of its push latency.
	changedAt map[string]time.Time

	// synced is set once every pod has been computed since this replica
	// started or became the leader (Server refuses streams before).
	synced atomic.Bool
}

type publishedPod struct {
	resource *xdsv1.Resource
	refs     []string
}

type publishedShared struct {
	resource *xdsv1.Resource
	// topic or subscription is the policy resource was built from: a pod
	// recomputed with the same policy compares policies, not resources.
	topic        *meshconfig.TopicPolicy
	subscription *meshconfig.SubscriptionPolicy
	// users counts the pods that name the resource.
	users int
}

// NewPublisher returns an empty publisher; a pod it deletes is forgotten
// by tracker too (nil for none).
func NewPublisher(log logr.Logger, tracker *Tracker) *Publisher {
	return &Publisher{
		Store:     desired.NewStore(),
		tracker:   tracker,
		cache:     cachev3.NewLinearCache(xdsresource.TypeURL, cachev3.WithLogger(discardCacheLog{})),
		log:       log,
		pods:      map[string]publishedPod{},
		shared:    map[string]*publishedShared{},
		changedAt: map[string]time.Time{},
	}
}

var _ desired.Sink = (*Publisher)(nil)

// Cache is what the xDS server serves.
func (p *Publisher) Cache() *cachev3.LinearCache { return p.cache }

// MarkSynced records that every pod has been computed once: from now on
// the cache answers for every pod, and streams may open.
func (p *Publisher) MarkSynced() { p.synced.Store(true) }

// Synced reports whether MarkSynced was called.
func (p *Publisher) Synced() bool { return p.synced.Load() }

// ChangedAt returns when a resource last changed in the cache.
func (p *Publisher) ChangedAt(name string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.changedAt[name]
	return t, ok
}

// Current returns the resource the cache holds under name.
func (p *Publisher) Current(name string) (*xdsv1.Resource, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.shared[name]; ok {
		return s.resource, true
	}
	if pod, ok := p.pods[name]; ok {
		return pod.resource, true
	}
	return nil, false
}

// Names returns the names of the resources pod's sidecar should hold (its
// own and the shared ones it names), or false for a pod not published.
func (p *Publisher) Names(pod string) ([]string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	published, ok := p.pods[pod]
	if !ok {
		return nil, false
	}
	return append([]string{pod}, published.refs...), true
}

// Set stores a pod's configuration and publishes what changed of it.
func (p *Publisher) Set(cfg meshconfig.PodConfig, uid k8stypes.UID) bool {
	storeChanged := p.Store.Set(cfg, uid)
	name := xdsresource.PodName(cfg.Namespace, cfg.Pod)

	p.mu.Lock()
	old, known := p.pods[name]
	// A pod re-created under the same name is a new pod: what the old one
	// acknowledged is not the new one's.
	recreated := known && old.resource.GetPod().GetPodUid() != string(uid)
	if known && !recreated && !storeChanged {
		// The same version (a hash of the whole configuration) of the same
		// pod: everything it names is published already.
		p.mu.Unlock()
		return false
	}
	podResource := xdsresource.PodResource(cfg, string(uid))
	update := map[string]types.Resource{}
	if !known || !proto.Equal(old.resource, podResource) {
		update[name] = podResource
	}
	for i := range cfg.Topics {
		t := &cfg.Topics[i]
		if !t.MayPublish {
			continue
		}
		s := p.sharedLocked(xdsresource.TopicName(cfg.Namespace, t.Name))
		if s.topic == nil || !s.topic.Equal(*t) {
			// A copy: a pointer into cfg would keep the pod's whole list
			// of policies alive as long as the resource.
			policy := *t
			s.topic, s.resource = &policy, xdsresource.TopicResource(policy)
			update[xdsresource.TopicName(cfg.Namespace, t.Name)] = s.resource
		}
	}
	for i := range cfg.Subscriptions {
		sub := &cfg.Subscriptions[i]
		ref := xdsresource.SubscriptionName(cfg.Namespace, sub.Name)
		s := p.sharedLocked(ref)
		if s.subscription == nil || !s.subscription.Equal(*sub) {
			policy := *sub
			s.subscription, s.resource = &policy, xdsresource.SubscriptionResource(policy)
			update[ref] = s.resource
		}
	}
	refs := xdsresource.Refs(podResource.GetPod())
	for _, ref := range refs {
		p.shared[ref].users++
	}
	var remove []string
	if known {
		for _, ref := range old.refs {
			remove = append(remove, p.release(ref)...)
		}
	}
	p.pods[name] = publishedPod{resource: podResource, refs: refs}
	p.publishLocked(update, remove)
	p.mu.Unlock()
	if recreated && p.tracker != nil {
		p.tracker.Forget(name)
	}
	return storeChanged || len(update) > 0
}

// Delete forgets a pod. Only a pod that no longer exists (or no longer
// carries the sidecar) is deleted: its stream, if any, learns of the removal.
func (p *Publisher) Delete(pod k8stypes.NamespacedName) bool {
	storeChanged := p.Store.Delete(pod)
	name := xdsresource.PodName(pod.Namespace, pod.Name)
	p.mu.Lock()
	old, known := p.pods[name]
	if !known {
		p.mu.Unlock()
		return storeChanged
	}
	delete(p.pods, name)
	remove := []string{name}
	for _, ref := range old.refs {
		remove = append(remove, p.release(ref)...)
	}
	p.publishLocked(nil, remove)
	p.mu.Unlock()
	// Outside the lock: the tracker tells propagation, which may wait.
	if p.tracker != nil {
		p.tracker.Forget(name)
	}
	return true
}

// sharedLocked returns the shared resource ref, added empty if new.
func (p *Publisher) sharedLocked(ref string) *publishedShared {
	s, ok := p.shared[ref]
	if !ok {
		s = &publishedShared{}
		p.shared[ref] = s
	}
	return s
}

// release drops one user of a shared resource and returns its name when no
// pod names it any more.
func (p *Publisher) release(ref string) []string {
	s, ok := p.shared[ref]
	if !ok {
		return nil
	}
	s.users--
	if s.users > 0 {
		return nil
	}
	delete(p.shared, ref)
	return []string{ref}
}

func (p *Publisher) publishLocked(update map[string]types.Resource, remove []string) {
	if len(update) == 0 && len(remove) == 0 {
		return
	}
	now := time.Now()
	for name := range update {
		p.changedAt[name] = now
	}
	for _, name := range remove {
		delete(p.changedAt, name)
	}
	if p.tracker != nil && len(remove) > 0 {
		// Lock order: Publisher.mu, then Tracker.mu; the tracker never
		// calls the Publisher.
		p.tracker.ForgetResources(remove)
	}
	if err := p.cache.UpdateResources(update, remove); err != nil {
		// The cache fails only to marshal a resource, which our generated
		// messages cannot: this is a bug, and the streams keep what they had.
		p.log.Error(fmt.Errorf("updating the xDS cache: %w", err), "resources not published", "updated", len(update), "removed", len(remove))
	}
}

// discardCacheLog silences the LinearCache's per-watch chatter; the server
// logs what matters (streams, ACKs, NACKs) itself.
type discardCacheLog struct{}

func (discardCacheLog) Debugf(string, ...any) {}
func (discardCacheLog) Infof(string, ...any)  {}
func (discardCacheLog) Warnf(string, ...any)  {}
func (discardCacheLog) Errorf(string, ...any) {}
