package xds

import (
	"iter"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/internal/broadcast"
	"github.com/weighstation/weighstation/meshconfig/xdsresource"
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

// PodKey is how the Tracker names a pod: a pod re-created under the same
// name is another pod, and what the old one held is not the new one's.
func PodKey(namespace, pod, uid string) string { return namespace + "/" + pod + "@" + uid }

// Tracker knows, from the sidecars' ACKs and NACKs, which version of each
// resource each pod (by PodKey) holds. It outlives streams: a sidecar keeps what it
// applied while it reconnects. It forgets a pod only when the pod is gone.
//
// Of a collection (a namespace's Topics) a pod's entry is the one version
// of the collection it applied, not one per member: what it holds of a
// member follows from it (Acked asks the Cache). A schema-1 sidecar, which
// subscribes to each Topic by name, has an entry per Topic.
type Tracker struct {
	mu sync.Mutex
	// acked is, per pod ("<namespace>/<pod>"), the version of each
	// resource the pod's sidecar applied.
	acked map[string]map[string]string
	// nacked is, per resource, each pod's last refusal; an ACK of a later
	// version clears it.
	nacked map[string]map[string]NACK
	// lastApplied is, per resource, when a pod last applied a version of
	// it: once every pod holds one version, when the last of them did.
	lastApplied map[string]time.Time
	// changed is notified on every change.
	changed broadcast.Signal
	// onChange, if set, is told what changed (outside the lock).
	onChange func([]Change)
	// collections answers what a pod holds of a collection's member from
	// the collection version it acknowledged (the Publisher's Cache).
	collections collectionSource
}

// collectionSource is what the Tracker asks the Cache: see
// Cache.HeldMember.
type collectionSource interface {
	HeldMember(name, collectionVersion string) string
	Members(collection, held string) iter.Seq2[string, string]
	OfThisCache(collectionVersion string) bool
}

func (t *Tracker) setCollections(c collectionSource) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.collections = c
}

// Change is one pod's new state of one resource: it holds Version ("" for
// none: it dropped the resource, or the pod is gone), or, when Refused, it
// refused Version and keeps what it held.
type Change struct {
	Resource string
	Pod      string // a PodKey
	Version  string
	Refused  bool
	// Members, for a collection's new version (Resource names the
	// collection), yields the members the pod applied with it, each with
	// the version it now holds ("" for a removal): read from the
	// responses, not copied, as a new pod applies every Topic of its
	// namespace. It yields only the members whose objects count the pod
	// (not the Topics whose publishers leave it out).
	Members iter.Seq2[string, string]
}

// OnChange sets a function that is told, after each ACK, NACK or Forget,
// what changed. Set it before serving.
func (t *Tracker) OnChange(f func([]Change)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onChange = f
}

func (t *Tracker) notify(changes []Change) {
	t.mu.Lock()
	f := t.onChange
	t.mu.Unlock()
	if f != nil && len(changes) > 0 {
		f(changes)
	}
}

// NewTracker returns an empty tracker.
func NewTracker() *Tracker {
	return &Tracker{acked: map[string]map[string]string{}, nacked: map[string]map[string]NACK{}, lastApplied: map[string]time.Time{}, changed: broadcast.New()}
}

// hold records the whole set of resource versions pod's sidecar holds (has
// applied), as it reported when its stream opened. Resources it no longer
// holds are dropped.
func (t *Tracker) hold(pod string, held map[string]string, excluded []string) {
	changes := make(map[string]string, len(held))
	t.mu.Lock()
	for name := range t.acked[pod] {
		changes[name] = ""
	}
	t.mu.Unlock()
	maps.Copy(changes, held)
	// What a reconnecting sidecar holds of a collection is news for each
	// member (an operator that restarted knows nothing of it yet).
	t.apply(pod, changes, nil, excluded)
}

// apply records what pod's sidecar applied since: a version per resource,
// "" for one it dropped. A refusal of a resource is cleared once the pod
// holds a version of it other than the one it refused (the current one,
// or none). A collection's new version is told with every member it now
// holds (Change.Members), unless told names it: those whose members the
// caller tells itself.
func (t *Tracker) apply(pod string, applied map[string]string, told map[string]bool, excluded []string) {
	t.mu.Lock()
	held := t.acked[pod]
	if held == nil {
		held = map[string]string{}
		t.acked[pod] = held
	}
	var changed []Change
	now := time.Now()
	for name, v := range applied {
		before, had := held[name]
		if before == v && (had || v == "") {
			continue
		}
		if v == "" {
			delete(held, name)
		} else {
			held[name] = v
			t.lastApplied[name] = now
		}
		change := Change{Resource: name, Pod: pod, Version: v}
		if _, isCollection := xdsresource.IsCollection(name); isCollection && !told[name] && t.collections != nil {
			change.Members = withoutExcluded(t.collections.Members(name, v), excluded)
		}
		changed = append(changed, change)
		// A pod that now holds another version of a resource, or none, has
		// moved past its refusal of it (applied it after all, or a later one).
		t.forgetNACKLocked(name, pod)
	}
	if len(held) == 0 {
		delete(t.acked, pod)
	}
	t.changed.Notify()
	t.mu.Unlock()
	t.notify(changed)
}

// applyWithMembers is apply, with what the settled responses sent of
// collections: the members of a collection whose version applied names
// (the others are named in applied) are told as changes, their refusals
// cleared and their last application recorded, without an entry per pod.
// The members named in excluded (the Topics that leave the pod out,
// sorted, by Topic name) are not told: the pod does not count for them.
func (t *Tracker) applyWithMembers(pod string, applied map[string]string, members []memberChanges, excluded []string) {
	if len(members) == 0 {
		t.apply(pod, applied, nil, excluded)
		return
	}
	// The collections applied names (a stream holds one at most): a member
	// is looked up among them, not among every name applied.
	var collections []string
	for name := range applied {
		if _, ok := xdsresource.IsCollection(name); ok {
			collections = append(collections, name)
		}
	}
	isMember := func(name string) bool {
		for _, c := range collections {
			if memberOf(name, c) {
				return true
			}
		}
		return false
	}
	t.mu.Lock()
	now := time.Now()
	markers := map[string]string{}
	// told are the collections whose members the responses tell: not one
	// the pod held in another cache's version (an operator that restarted),
	// whose every member is news.
	told := map[string]bool{}
	for _, m := range members {
		for _, r := range m.resources {
			if name := r.GetName(); isMember(name) {
				t.forgetNACKLocked(name, pod)
				if !isExcluded(name, excluded) {
					t.lastApplied[name] = now
				}
			} else if _, ok := xdsresource.IsCollection(name); ok {
				// A pod's first version comes with every member (a complete
				// response); one of this cache with what changed since.
				if before, had := t.acked[pod][name]; !had || (t.collections != nil && t.collections.OfThisCache(before)) {
					markers[name] = applied[name]
					told[name] = true
				}
			}
		}
		for _, name := range m.removed {
			if isMember(name) {
				t.forgetNACKLocked(name, pod)
			}
		}
	}
	t.mu.Unlock()
	t.apply(pod, applied, told, excluded)
	changes := make([]Change, 0, len(markers))
	for collection, version := range markers {
		changes = append(changes, Change{Resource: collection, Pod: pod, Version: version, Members: func(yield func(string, string) bool) {
			for _, m := range members {
				for _, r := range m.resources {
					if name := r.GetName(); memberOf(name, collection) && !isExcluded(name, excluded) {
						if !yield(name, r.GetVersion()) {
							return
						}
					}
				}
				for _, name := range m.removed {
					if memberOf(name, collection) && !yield(name, "") {
						return
					}
				}
			}
		}})
	}
	t.notify(changes)
}

// withoutExcluded yields the members of members but those of excluded.
func withoutExcluded(members iter.Seq2[string, string], excluded []string) iter.Seq2[string, string] {
	if len(excluded) == 0 {
		return members
	}
	return func(yield func(string, string) bool) {
		for name, v := range members {
			if !isExcluded(name, excluded) && !yield(name, v) {
				return
			}
		}
	}
}

// isExcluded reports whether the Topic of member name is among excluded
// (Topic names, sorted).
func isExcluded(name string, excluded []string) bool {
	_, found := slices.BinarySearch(excluded, name[len(parentOf(name)):])
	return found
}

// notHeld returns those of versions that pod does not hold.
// A collection's member is compared with what the pod's collection
// version says it holds: a complete response names every Topic, and only
// those the pod does not hold can be what it refused.
func (t *Tracker) notHeld(pod string, versions map[string]string) map[string]string {
	out := map[string]string{}
	members := map[string]string{} // member → the pod's collection version
	t.mu.Lock()
	held := t.acked[pod]
	for name, v := range versions {
		if v == "" || held[name] == v {
			continue
		}
		if collection, ok := collectionOf(name, held); ok && t.collections != nil {
			members[name] = held[collection]
			continue
		}
		out[name] = v
	}
	source := t.collections
	t.mu.Unlock()
	// Outside the lock: Cache.mu is never taken under Tracker.mu.
	for name, cv := range members {
		if source.HeldMember(name, cv) != versions[name] {
			out[name] = versions[name]
		}
	}
	return out
}

// nack records that pod refused these versions, keeping what it held.
func (t *Tracker) nack(pod string, versions map[string]string, reason string, at time.Time) {
	changes := make([]Change, 0, len(versions))
	for name, v := range versions {
		changes = append(changes, Change{Resource: name, Pod: pod, Version: v, Refused: true})
	}
	defer t.notify(changes)
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
	t.changed.Notify()
}

// Forget drops every incarnation of a pod ("<namespace>/<pod>"), which no
// longer exists or was re-created.
func (t *Tracker) Forget(pod string) {
	prefix := pod + "@"
	t.mu.Lock()
	var changes []Change
	for key, held := range t.acked {
		if strings.HasPrefix(key, prefix) {
			for name := range held {
				change := Change{Resource: name, Pod: key}
				if _, isCollection := xdsresource.IsCollection(name); isCollection && t.collections != nil {
					// Every member the pod held is gone with it.
					change.Members = t.collections.Members(name, "")
				}
				changes = append(changes, change)
			}
			delete(t.acked, key)
		}
	}
	for name, n := range t.nacked {
		for key := range n {
			if strings.HasPrefix(key, prefix) {
				// A refusal is status too: its pod's going changes it.
				changes = append(changes, Change{Resource: name, Pod: key})
				t.forgetNACKLocked(name, key)
			}
		}
	}
	t.changed.Notify()
	t.mu.Unlock()
	t.notify(changes)
}

// forgetNACKLocked drops pod's refusal of resource, and the resource's
// entry once no pod refuses it: resource names come and go with pods.
func (t *Tracker) forgetNACKLocked(resource, pod string) {
	n, ok := t.nacked[resource]
	if !ok {
		return
	}
	delete(n, pod)
	if len(n) == 0 {
		delete(t.nacked, resource)
	}
}

// Acked returns the version of resource that pod (a PodKey) applied (""
// for none).
func (t *Tracker) Acked(pod, resource string) string {
	t.mu.Lock()
	held := t.acked[pod]
	v, ok := held[resource]
	collectionName, inCollection := collectionOf(resource, held)
	collection := held[collectionName]
	source := t.collections
	t.mu.Unlock()
	if ok || !inCollection || source == nil {
		return v
	}
	// Outside the lock: Cache.mu is never taken under Tracker.mu.
	return source.HeldMember(resource, collection)
}

// LastApplied returns when a pod last applied a version of resource (the
// zero time for never).
func (t *Tracker) LastApplied(resource string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastApplied[resource]
}

// ForgetResources drops what is known of when resources were applied: no
// pod is served them any more (the Publisher removed them).
func (t *Tracker) ForgetResources(names []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, name := range names {
		delete(t.lastApplied, name)
		delete(t.nacked, name)
	}
}

// NACKs returns the pods' current refusals of resource, by PodKey.
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
	return t.changed.C()
}
