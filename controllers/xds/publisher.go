package xds

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
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
// Cache that the xDS server serves. A pod's own resource and the
// shared resources it names go into the cache in one update, so a stream
// never sees a pod resource that names a shared resource the cache lacks.
//
// A namespace's Topics are published once, as the members of its Topic
// collection, while the namespace has a sidecar pod: a change of one
// Topic updates that one resource and no pod's. A Subscription's shared
// resource lives while some pod names it. A shared resource changes in the
// cache only when its content does: that is what keeps one change from
// resending anything else.
//
// A pod's own resource (schema 2) holds its part alone. For a sidecar of
// the previous release, which subscribes to the schema-1 name, the pod's
// schema-1 resource, which lists every Topic of the namespace, is
// published too (ServeV1), and kept while the pod lives.
type Publisher struct {
	*desired.Store
	cache   *Cache
	tracker *Tracker
	log     logr.Logger

	// mu guards the maps; it is taken before the cache's own lock (the
	// cache is updated under mu, so two updates of one shared resource
	// cannot land out of order).
	mu         sync.Mutex
	pods       map[string]publishedPod // by node ID ("<namespace>/<pod>")
	namespaces map[string]*publishedNamespace
	// v1Readers are the pods (node IDs) whose sidecar read the schema-1
	// resource: it is published for them, and only for them.
	v1Readers map[string]bool
	shared    map[string]*publishedShared
	// changedAt is when each resource last changed in the cache: the start
	// of its push latency.
	changedAt map[string]time.Time

	// synced is set once every pod has been computed since this replica
	// started or became the leader (Server refuses streams before).
	synced atomic.Bool
}

type publishedPod struct {
	resource *xdsv1.Resource // schema 2
	v1       *xdsv1.Resource // schema 1, for a v1 reader only
	part     desired.PodPart
	uid      k8stypes.UID
}

// publishedNamespace is one namespace's Topics and the pods published in it.
type publishedNamespace struct {
	topics []meshconfig.TopicPolicy // in force, sorted by subject
	// topicNames are the topics' resource names, which every schema-1 pod
	// resource of the namespace shares.
	topicNames []string
	// inCache are the names of its Topic resources the cache holds.
	inCache map[string]bool
	pods    map[string]struct{} // node IDs
}

type publishedShared struct {
	resource *xdsv1.Resource
	// topic or subscription is the policy resource was built from: a pod
	// recomputed with the same policy compares policies, not resources.
	topic        *meshconfig.TopicPolicy
	subscription *meshconfig.SubscriptionPolicy
	// users counts the pods that name a Subscription's resource.
	users int
}

// NewPublisher returns an empty publisher; a pod it deletes is forgotten
// by tracker too (nil for none).
func NewPublisher(log logr.Logger, tracker *Tracker) *Publisher {
	return &Publisher{
		Store:      desired.NewStore(),
		tracker:    tracker,
		cache:      NewCache(xdsresource.TypeURL),
		log:        log,
		pods:       map[string]publishedPod{},
		namespaces: map[string]*publishedNamespace{},
		v1Readers:  map[string]bool{},
		shared:     map[string]*publishedShared{},
		changedAt:  map[string]time.Time{},
	}
}

var _ desired.Sink = (*Publisher)(nil)

// Cache is what the xDS server serves.
func (p *Publisher) Cache() *Cache { return p.cache }

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

// changedSince calls observe with when each of resources last changed in
// the cache, for those that changed after since: one lock for a
// response, which may hold every Topic of a namespace.
func (p *Publisher) changedSince(resources []*discoveryResource, since time.Time, observe func(time.Time)) {
	var changed []time.Time
	p.mu.Lock()
	for _, r := range resources {
		if t, ok := p.changedAt[r.GetName()]; ok && t.After(since) {
			changed = append(changed, t)
		}
	}
	p.mu.Unlock()
	for _, t := range changed {
		observe(t)
	}
}

// Current returns the resource the cache holds under name: a shared
// resource, or a pod's own resource of either schema.
func (p *Publisher) Current(name string) (*xdsv1.Resource, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.shared[name]; ok {
		return s.resource, true
	}
	parsed, err := xdsresource.ParseName(name)
	if err != nil || parsed.Kind != xdsresource.KindPod {
		return nil, false
	}
	pod, ok := p.pods[xdsresource.PodName(parsed.Namespace, parsed.Name)]
	switch {
	case !ok:
		return nil, false
	case parsed.Schema == xdsresource.PreviousSchemaVersion:
		if pod.v1 == nil {
			return p.podResourceV1Locked(pod.part, pod.uid), true
		}
		return pod.v1, true
	}
	return pod.resource, true
}

// excludedFrom returns the names of the Topics whose publishers leave the
// pod (by node ID) out, sorted (shared: not to be changed).
func (p *Publisher) excludedFrom(nodeID string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pods[nodeID].part.Excluded
}

// PodUID returns the UID of the pod (by node ID) that the publisher
// computed.
func (p *Publisher) PodUID(nodeID string) (k8stypes.UID, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pod, ok := p.pods[nodeID]
	return pod.uid, ok
}

// PolicyNames returns the names of the Topics in force in a pod's
// namespace and of its Subscriptions (ok false for a pod not published).
func (p *Publisher) PolicyNames(namespace, pod string) (topics, subscriptions []string, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	published, ok := p.pods[xdsresource.PodName(namespace, pod)]
	if !ok {
		return nil, nil, false
	}
	ns := p.namespaces[namespace]
	topics = make([]string, len(ns.topics))
	for i := range ns.topics {
		topics[i] = ns.topics[i].Name
	}
	subscriptions = make([]string, len(published.part.Subscriptions))
	for i := range published.part.Subscriptions {
		subscriptions[i] = published.part.Subscriptions[i].Name
	}
	return topics, subscriptions, true
}

// ServeV1 publishes the schema-1 resource of a pod (by node ID) whose
// sidecar, of the previous release, subscribes to it, and keeps it
// published while the pod lives.
func (p *Publisher) ServeV1(nodeID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.v1Readers[nodeID] {
		return
	}
	p.v1Readers[nodeID] = true
	pod, ok := p.pods[nodeID]
	if !ok {
		return // published with the pod (SetPod)
	}
	pod.v1 = p.podResourceV1Locked(pod.part, pod.uid)
	p.pods[nodeID] = pod
	p.publishLocked(map[string]types.Resource{nodeID: pod.v1}, nil)
}

// SetTopics stores a namespace's Topics and publishes those that changed.
// No pod's own resource changes with them, but the schema-1 resources of
// previous-release sidecars, when a Topic comes, goes or changes subject.
func (p *Publisher) SetTopics(namespace string, topics []meshconfig.TopicPolicy) bool {
	storeChanged := p.Store.SetTopics(namespace, topics)
	if !storeChanged {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ns := p.namespaceLocked(namespace)
	sameShape := slices.EqualFunc(ns.topics, topics, func(a, b meshconfig.TopicPolicy) bool { return a.Name == b.Name && a.Subject == b.Subject })
	ns.topics = topics
	if !sameShape {
		ns.topicNames = make([]string, len(topics))
		for i := range topics {
			ns.topicNames[i] = xdsresource.TopicName(namespace, topics[i].Name)
		}
	}
	if len(ns.pods) == 0 {
		if len(topics) == 0 {
			delete(p.namespaces, namespace) // nothing left of it here
		}
		return true // published with the namespace's first pod
	}
	update, remove := p.topicUpdatesLocked(namespace, topics)
	if !sameShape {
		// Only a schema-1 resource lists the namespace's Topics.
		for name := range ns.pods {
			pod := p.pods[name]
			if pod.v1 == nil {
				continue
			}
			if res := p.podResourceV1Locked(pod.part, pod.uid); !proto.Equal(pod.v1, res) {
				pod.v1 = res
				p.pods[name] = pod
				update[name] = res
			}
		}
	}
	p.publishLocked(update, remove)
	return true
}

// topicUpdatesLocked returns the namespace's Topic resources that differ
// from the cache, and those of Topics no longer in force.
func (p *Publisher) topicUpdatesLocked(namespace string, topics []meshconfig.TopicPolicy) (update map[string]types.Resource, remove []string) {
	update = map[string]types.Resource{}
	ns := p.namespaceLocked(namespace)
	current := make(map[string]bool, len(topics))
	for i := range topics {
		name := xdsresource.TopicName(namespace, topics[i].Name)
		current[name] = true
		s := p.sharedLocked(name)
		if s.topic == nil || !s.topic.Equal(topics[i]) {
			policy := topics[i]
			s.topic, s.resource = &policy, xdsresource.TopicResource(policy)
			update[name] = s.resource
		}
	}
	for name := range ns.inCache {
		if !current[name] {
			delete(p.shared, name)
			remove = append(remove, name)
		}
	}
	ns.inCache = current
	return update, remove
}

// Set publishes a whole configuration, as a file or a test holds one: its
// Topics become its namespace's (SetTopics) and the rest the pod's own
// part (SetPod). It reports whether either changed.
func (p *Publisher) Set(cfg meshconfig.PodConfig, uid k8stypes.UID) bool {
	topics, part := desired.Split(cfg)
	topicsChanged := p.SetTopics(cfg.Namespace, topics)
	return p.SetPod(part, uid) || topicsChanged
}

// SetPod stores a pod's own part and publishes what changed of it.
func (p *Publisher) SetPod(part desired.PodPart, uid k8stypes.UID) bool {
	storeChanged := p.Store.SetPod(part, uid)
	name := xdsresource.PodName(part.Namespace, part.Pod)

	p.mu.Lock()
	old, known := p.pods[name]
	// A pod re-created under the same name is a new pod: what the old one
	// acknowledged is not the new one's.
	recreated := known && old.uid != uid
	if known && !recreated && !storeChanged {
		p.mu.Unlock()
		return false
	}
	ns := p.namespaceLocked(part.Namespace)
	update := map[string]types.Resource{}
	var remove []string
	if len(ns.pods) == 0 {
		// The namespace's first pod: its Topics go into the cache now.
		update, remove = p.topicUpdatesLocked(part.Namespace, ns.topics)
	}
	ns.pods[name] = struct{}{}
	podResource := p.podResourceLocked(part, uid)
	resourceName := xdsresource.PodResourceName(part.Namespace, part.Pod)
	if !known || !proto.Equal(old.resource, podResource) {
		update[resourceName] = podResource
	}
	var v1 *xdsv1.Resource
	if p.v1Readers[name] {
		v1 = p.podResourceV1Locked(part, uid)
		if !known || old.v1 == nil || !proto.Equal(old.v1, v1) {
			update[name] = v1
		}
	}
	for i := range part.Subscriptions {
		sub := &part.Subscriptions[i]
		ref := xdsresource.SubscriptionName(part.Namespace, sub.Name)
		s := p.sharedLocked(ref)
		s.users++
		if s.subscription == nil || !s.subscription.Equal(*sub) {
			// A copy: a pointer into part would keep the pod's whole list
			// alive as long as the resource.
			policy := *sub
			s.subscription, s.resource = &policy, xdsresource.SubscriptionResource(policy)
			update[ref] = s.resource
		}
	}
	if known {
		for _, sub := range old.part.Subscriptions {
			remove = append(remove, p.release(xdsresource.SubscriptionName(part.Namespace, sub.Name))...)
		}
	}
	p.pods[name] = publishedPod{resource: podResource, v1: v1, part: part, uid: uid}
	p.publishLocked(update, remove)
	p.mu.Unlock()
	if recreated && p.tracker != nil {
		p.tracker.Forget(name)
	}
	return storeChanged || len(update) > 0
}

// ownContent is what a pod's own resource holds in either schema: its
// part, with the names of its Subscriptions and of the Topics it may not
// publish under.
func ownContent(part desired.PodPart, uid k8stypes.UID) xdsresource.OwnContent {
	subscriptions := make([]string, len(part.Subscriptions))
	for i, s := range part.Subscriptions {
		subscriptions[i] = s.Name
	}
	return xdsresource.OwnContent{
		Namespace: part.Namespace, Pod: part.Pod, UID: string(uid), Default: part.Default, Access: part.Access,
		ExcludedTopics: part.Excluded, Subscriptions: subscriptions,
	}
}

// podResourceLocked is a pod's own resource.
func (p *Publisher) podResourceLocked(part desired.PodPart, uid k8stypes.UID) *xdsv1.Resource {
	return xdsresource.BuildPodResource(ownContent(part, uid))
}

// podResourceV1Locked is a pod's own resource of schema 1: the
// namespace's Topics, with whether the pod may publish under each, and its
// Subscriptions' names.
func (p *Publisher) podResourceV1Locked(part desired.PodPart, uid k8stypes.UID) *xdsv1.Resource {
	ns := p.namespaces[part.Namespace]
	return xdsresource.BuildPodResourceV1(xdsresource.PodContentV1{
		Own: ownContent(part, uid), Topics: ns.topics, TopicNames: ns.topicNames,
		MayPublish: func(i int) bool { return !part.Excludes(ns.topics[i].Name) },
	})
}

// namespaceLocked returns a namespace's record, added empty if new.
func (p *Publisher) namespaceLocked(namespace string) *publishedNamespace {
	ns, ok := p.namespaces[namespace]
	if !ok {
		ns = &publishedNamespace{pods: map[string]struct{}{}}
		p.namespaces[namespace] = ns
	}
	return ns
}

// Delete forgets a pod. Only a pod that no longer exists (or no longer
// carries the sidecar) is deleted: its stream, if any, learns of the removal.
func (p *Publisher) Delete(pod k8stypes.NamespacedName) bool {
	storeChanged := p.Store.Delete(pod)
	name := xdsresource.PodName(pod.Namespace, pod.Name)
	p.mu.Lock()
	delete(p.v1Readers, name)
	old, known := p.pods[name]
	if !known {
		p.mu.Unlock()
		return storeChanged
	}
	delete(p.pods, name)
	remove := []string{xdsresource.PodResourceName(pod.Namespace, pod.Name)}
	if old.v1 != nil {
		remove = append(remove, name)
	}
	for _, sub := range old.part.Subscriptions {
		remove = append(remove, p.release(xdsresource.SubscriptionName(pod.Namespace, sub.Name))...)
	}
	if ns := p.namespaces[pod.Namespace]; ns != nil {
		delete(ns.pods, name)
		if len(ns.pods) == 0 {
			// No sidecar reads the namespace's Topics any more; they are
			// kept (as Store keeps them) for its next pod.
			_, gone := p.topicUpdatesLocked(pod.Namespace, nil)
			remove = append(remove, gone...)
		}
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

// release drops one user of a Subscription's shared resource and returns
// its name when no pod names it any more.
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
