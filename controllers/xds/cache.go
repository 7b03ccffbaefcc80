package xds

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/weighstation/weighstation/meshconfig/xdsresource"
)

// Cache holds the resources the xDS server serves and answers its delta
// watches (go-control-plane's cache.ConfigWatcher), as go-control-plane's
// LinearCache does for named resources, at a cost that follows what
// changed instead of what each stream subscribes to:
//
//   - a watch is indexed by its pod's namespace, not by each name it
//     subscribes to, so the watch that follows every ACK costs one entry
//     (LinearCache indexes it under every name: a pod under 3,000 Topics
//     cost 3,000 entries per ACK);
//   - a watch created for an ACK compares only the resources that changed
//     since the stream's last response (a change log, and the sequence
//     number each response records among the versions it returns), not
//     every resource it subscribes to;
//   - each resource is marshalled and versioned once per change, and its
//     wire form is shared by every response that carries it.
//
// Versions are LinearCache's (a hash of the deterministic encoding: see
// Version), so status and ACKs speak of the same versions as before.
//
// A name "<prefix>*" is a collection (a namespace's Topics,
// xdsresource.TopicCollectionName): a stream that subscribes to it is sent
// every resource whose name is "<prefix><member>", and, with every
// response that changes what it holds of the collection, a marker under
// the collection's name whose version is the collection's version,
// "<epoch>.<seq>.<digest>": the stream holds every member as of the
// cache's sequence number seq, and the members' names and versions sum to
// digest. What the stream's state records of a collection is that one
// version, not one entry per member. A stream that reports the current
// digest holds every member as it is (a sidecar reconnecting to an
// operator that restarted, with nothing changed, is sent nothing); one
// that reports a version of this cache (same epoch) still covered by the
// change log is sent the members changed since; any other is sent every
// member, the marker saying so (complete), and drops the members it holds
// that were not sent.
//
// Lock order: Cache.mu is taken alone, or after Publisher.mu (the
// Publisher updates the cache under its lock); responses are sent under
// Cache.mu into the server's buffered channel, which holds every response
// a stream's one watch can produce.
type Cache struct {
	typeURL string

	// epoch tells this cache's collection versions from another's (an
	// operator that restarted, or a new leader): sequence numbers start
	// over with each cache.
	epoch string

	mu        sync.Mutex
	resources map[string]*cachedResource
	// markers are the collections' markers of update markersSeq.
	markers    map[markerKey]*discovery.Resource
	markersSeq uint64
	// members are the names of the resources under each prefix
	// ("<namespace>/topic/"), what a collection's complete response sends,
	// and digests the sum of their digests.
	members map[string]map[string]struct{}
	digests map[string]uint64
	// seq numbers the updates; changes logs, in order, the names each
	// changed (updated or removed), back to but excluding seq floor.
	seq     uint64
	floor   uint64
	changes []loggedChange
	// watches are the open watches, by their pod's namespace.
	watches map[string]map[*deltaWatch]struct{}
}

// maxLoggedChanges bounds the change log: a stream whose last response is
// older than the log is compared in full, as a new stream is. It is a
// variable for tests, which shorten it.
var maxLoggedChanges = 1 << 16

// seqKey records, among the versions a response returns, the cache's
// sequence number at that response. No resource has this name (names
// never start with a NUL), and the server never sends returned versions
// to the sidecar.
const seqKey = "\x00seq"

type cachedResource struct {
	resource types.Resource
	version  string
	// changed is the sequence number of its last update, and since that of
	// the update that added it (it did not exist before): what a stream
	// at a collection version holds of it (HeldMember).
	changed, since uint64
	// digest stands for its name and version in its collection's digest.
	digest uint64
	// wire is the resource as responses carry it, shared by all.
	wire *discovery.Resource
}

type loggedChange struct {
	seq  uint64
	name string
}

type deltaWatch struct {
	request   *cachev3.DeltaRequest
	sub       cachev3.Subscription
	out       chan cachev3.DeltaResponse
	namespace string
	// topics is the namespace's Topic collection if the stream subscribes
	// to it ("" if not), and topicPrefix its members' prefix: the one
	// collection a stream may subscribe to, looked up once per watch, not
	// once per changed name.
	topics, topicPrefix string
}

// NewCache returns an empty cache of resources of typeURL.
func NewCache(typeURL string) *Cache {
	return &Cache{
		typeURL: typeURL, epoch: strconv.FormatInt(time.Now().UnixNano(), 36),
		resources: map[string]*cachedResource{}, members: map[string]map[string]struct{}{}, digests: map[string]uint64{},
		markers: map[markerKey]*discovery.Resource{},
		watches: map[string]map[*deltaWatch]struct{}{},
	}
}

// parentOf is the prefix a collection's members share: a name up to and
// including its last '/'.
func parentOf(name string) string {
	return name[:strings.LastIndexByte(name, '/')+1]
}

// memberDigest is what a resource adds to its collection's digest: the
// first 8 bytes of the SHA-256 of its name and version. Digests are summed,
// so a change costs one subtraction and one addition. Only the tenant of a
// namespace writes its Topics, so a collision it contrives only keeps its
// own sidecars from a change.
func memberDigest(name, version string) uint64 {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write([]byte(version))
	return binary.BigEndian.Uint64(h.Sum(nil))
}

// collectionVersionLocked is the version of the collection of prefix now.
func (c *Cache) collectionVersionLocked(prefix string) string {
	return c.epoch + "." + strconv.FormatUint(c.seq, 10) + "." + strconv.FormatUint(c.digests[prefix], 36)
}

// parseCollectionVersion reads a collection version; ours is false for
// one of another cache (or none), whose seq means nothing here.
func (c *Cache) parseCollectionVersion(version string) (seq, digest uint64, ours, ok bool) {
	parts := strings.Split(version, ".")
	if len(parts) != 3 {
		return 0, 0, false, false
	}
	seq, err1 := strconv.ParseUint(parts[1], 10, 64)
	digest, err2 := strconv.ParseUint(parts[2], 36, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false, false
	}
	return seq, digest, parts[0] == c.epoch, true
}

// OlderVersion is what HeldMember returns for a member that a pod holds in
// a version it cannot name: an earlier one than the current, or one of
// another cache (before the operator restarted).
const OlderVersion = "(older)"

// HeldMember returns the version of member name that a stream holding
// its collection at collectionVersion holds: the current version if the
// member has not changed since, OlderVersion if it changed since (or the
// collection version is another cache's), and "" if it was added since
// (or is gone now).
func (c *Cache) HeldMember(name, collectionVersion string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.heldMemberLocked(name, collectionVersion)
}

func (c *Cache) heldMemberLocked(name, collectionVersion string) string {
	r, ok := c.resources[name]
	if !ok {
		return ""
	}
	seq, digest, ours, parsed := c.parseCollectionVersion(collectionVersion)
	switch {
	case !parsed:
		return OlderVersion
	case digest == c.digests[parentOf(name)]:
		return r.version // the collection as it is now
	case !ours:
		return OlderVersion
	case seq >= r.changed:
		return r.version
	case seq >= r.since:
		return OlderVersion
	}
	return ""
}

// Members yields every member the collection holds now, each with the
// version a pod holding the collection at held holds of it (HeldMember;
// "" for each when held is ""). It holds the cache's lock while it runs:
// its caller's yield must not call the cache.
func (c *Cache) Members(collection, held string) iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		prefix, ok := xdsresource.IsCollection(collection)
		if !ok {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for name := range c.members[prefix] {
			v := ""
			if held != "" {
				v = c.heldMemberLocked(name, held)
			}
			if !yield(name, v) {
				return
			}
		}
	}
}

// OfThisCache reports whether a collection version is this cache's (the
// same epoch): one of another says nothing of what changed since.
func (c *Cache) OfThisCache(collectionVersion string) bool {
	_, _, ours, _ := c.parseCollectionVersion(collectionVersion)
	return ours
}

var _ cachev3.Cache = (*Cache)(nil)

// namespaceOf is the first segment of a resource name or a node ID
// ("<namespace>/...").
func namespaceOf(name string) string {
	ns, _, _ := strings.Cut(name, "/")
	return ns
}

// UpdateResources sets the resources in update and removes those in
// remove, as one change, and answers the watches it concerns.
func (c *Cache) UpdateResources(update map[string]types.Resource, remove []string) error {
	wire := make(map[string]*cachedResource, len(update))
	var errs []error
	for name, res := range update {
		b, err := cachev3.MarshalResource(res)
		if err != nil {
			errs = append(errs, fmt.Errorf("marshalling %s: %w", name, err))
			continue
		}
		version := cachev3.HashResource(b)
		wire[name] = &cachedResource{resource: res, version: version, wire: &discovery.Resource{
			Name: name, Version: version, Resource: &anypb.Any{TypeUrl: c.typeURL, Value: b},
		}}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	changed := make([]string, 0, len(wire)+len(remove))
	for name, r := range wire {
		r.changed, r.since = c.seq, c.seq
		parent := parentOf(name)
		r.digest = memberDigest(name, r.version)
		if old, ok := c.resources[name]; ok {
			r.since = old.since
			c.digests[parent] -= old.digest
		} else {
			if c.members[parent] == nil {
				c.members[parent] = map[string]struct{}{}
			}
			c.members[parent][name] = struct{}{}
		}
		c.digests[parent] += r.digest
		c.resources[name] = r
		changed = append(changed, name)
	}
	for _, name := range remove {
		if old, ok := c.resources[name]; ok {
			delete(c.resources, name)
			parent := parentOf(name)
			delete(c.members[parent], name)
			c.digests[parent] -= old.digest
			if len(c.members[parent]) == 0 {
				delete(c.members, parent)
				delete(c.digests, parent)
			}
			changed = append(changed, name)
		}
	}
	for _, name := range changed {
		c.changes = append(c.changes, loggedChange{seq: c.seq, name: name})
	}
	// Trimmed in batches, back to half the bound once it is reached, so
	// that an update does not move the whole log each time.
	if len(c.changes) > maxLoggedChanges {
		over := len(c.changes) - maxLoggedChanges/2
		c.floor = c.changes[over-1].seq
		c.changes = append(c.changes[:0], c.changes[over:]...)
	}
	c.notifyLocked(changed)
	return errors.Join(errs...)
}

// notifyLocked answers the open watches that subscribe to a changed name.
func (c *Cache) notifyLocked(changed []string) {
	byNamespace := map[string][]string{}
	for _, name := range unique(changed) {
		ns := namespaceOf(name)
		byNamespace[ns] = append(byNamespace[ns], name)
	}
	for ns, names := range byNamespace {
		for w := range c.watches[ns] {
			// The watch saw no difference when it was created and has seen
			// every change since: only these names can differ now.
			if resp := c.respondLocked(w, names); resp != nil {
				delete(c.watches[ns], w)
				w.out <- resp
			}
		}
		if len(c.watches[ns]) == 0 {
			delete(c.watches, ns)
		}
	}
}

// respondLocked compares the watch's subscription with the cache over
// candidates, each named once, and returns a response for what differs
// (nil for nothing). A candidate is a name the watch subscribes to, or a
// member of a collection it subscribes to, changed since the stream's
// last response; a collection among the candidates is compared in full
// (see syncCollectionLocked). It runs for every open watch of a namespace
// at each of its updates, so it allocates only for a response.
func (c *Cache) respondLocked(w *deltaWatch, candidates []string) *deltaResponse {
	subscribed := w.sub.SubscribedResources()
	returned := w.sub.ReturnedResources()
	var resources []*discovery.Resource
	var removed []string
	// Whether this response changes the members the stream holds, and
	// whether it sends them whole.
	var touched, complete, synced bool
	for _, name := range candidates {
		if _, ok := subscribed[name]; !ok {
			if w.topics == "" || !memberOf(name, w.topics) {
				continue
			}
			// A member changed since the stream's last response, which
			// brought it up to date: send what it is now.
			if r, exists := c.resources[name]; exists {
				resources = append(resources, r.wire)
			} else {
				removed = append(removed, name)
			}
			touched = true
			continue
		}
		if name == w.topics {
			synced = true // after the names: see below
			continue
		}
		known, isKnown := returned[name]
		r, exists := c.resources[name]
		switch {
		case exists && (!isKnown || known != r.version):
			resources = append(resources, r.wire)
		case !exists && isKnown:
			removed = append(removed, name)
		}
	}
	if synced {
		var changed bool
		resources, removed, changed, complete = c.syncCollectionLocked(w.topicPrefix, returned[w.topics], resources, removed)
		touched = touched || changed
		// A member may be both a candidate and among what the sync sent.
		resources, removed = uniqueResources(resources), unique(removed)
	}
	if len(resources) == 0 && len(removed) == 0 && !touched {
		return nil
	}
	next := maps.Clone(returned)
	if next == nil {
		next = map[string]string{}
	}
	for _, r := range resources {
		if _, ok := subscribed[r.GetName()]; ok {
			next[r.GetName()] = r.GetVersion()
		}
	}
	for _, name := range removed {
		delete(next, name)
	}
	if touched {
		marker := c.markerLocked(w.topics, w.topicPrefix, complete)
		resources = append(resources, marker)
		next[w.topics] = marker.GetVersion()
	}
	next[seqKey] = strconv.FormatUint(c.seq, 10)
	return &deltaResponse{request: w.request, resources: resources, removed: removed, next: next, version: strconv.FormatUint(c.seq, 10)}
}

// syncCollectionLocked adds to a response what a stream that holds the
// collection of prefix at version held lacks: the members changed since,
// when held is a version of this cache that the change log still covers,
// or else every member (complete). changed says whether it added
// anything (a complete response always does: its marker).
func (c *Cache) syncCollectionLocked(prefix, held string, resources []*discovery.Resource, removed []string) (_ []*discovery.Resource, _ []string, changed, complete bool) {
	since, digest, ours, parsed := c.parseCollectionVersion(held)
	if parsed && digest == c.digests[prefix] {
		return resources, removed, false, false // it holds every member as it is
	}
	if ours && since >= c.floor {
		i := len(c.changes)
		for i > 0 && c.changes[i-1].seq > since {
			i--
		}
		for _, ch := range c.changes[i:] {
			if !strings.HasPrefix(ch.name, prefix) {
				continue
			}
			changed = true
			if r, exists := c.resources[ch.name]; exists {
				resources = append(resources, r.wire)
			} else {
				removed = append(removed, ch.name)
			}
		}
		return resources, removed, changed, false
	}
	for name := range c.members[prefix] {
		resources = append(resources, c.resources[name].wire)
	}
	return resources, removed, true, true
}

// markerLocked is a collection's marker at the current sequence number.
// Every watch of a namespace answered at one update sends the same one:
// it is marshalled once per update (markers).
func (c *Cache) markerLocked(collection, prefix string, complete bool) *discovery.Resource {
	key := markerKey{collection: collection, complete: complete}
	if c.markersSeq != c.seq {
		clear(c.markers)
		c.markersSeq = c.seq
	}
	if m, ok := c.markers[key]; ok {
		return m
	}
	b, err := cachev3.MarshalResource(xdsresource.TopicCollectionResource(complete, len(c.members[prefix])))
	if err != nil {
		// Our own generated message of two scalars cannot fail to marshal.
		panic(fmt.Sprintf("marshalling the marker of %s: %v", collection, err))
	}
	m := &discovery.Resource{Name: collection, Version: c.collectionVersionLocked(prefix), Resource: &anypb.Any{TypeUrl: c.typeURL, Value: b}}
	c.markers[key] = m
	return m
}

type markerKey struct {
	collection string
	complete   bool
}

// memberOf reports whether name is a member of collection ("<prefix>*"):
// it has the prefix and no '/' after it. Compared in place, as it runs for
// every member of every response.
func memberOf(name, collection string) bool {
	prefix := collection[:len(collection)-1]
	return len(name) > len(prefix) && name != collection && strings.HasPrefix(name, prefix) &&
		strings.IndexByte(name[len(prefix):], '/') < 0
}

// collectionOf returns the collection among the keys of versions that
// name is a member of (a stream holds one at most), without allocating.
func collectionOf(name string, versions map[string]string) (string, bool) {
	for key := range versions {
		if strings.HasSuffix(key, "/*") && memberOf(name, key) {
			return key, true
		}
	}
	return "", false
}

// uniqueResources drops repeated resources (a member both changed since the
// stream's last response and in a collection compared in full), keeping
// the first of each name.
func uniqueResources(resources []*discovery.Resource) []*discovery.Resource {
	if len(resources) < 2 {
		return resources
	}
	seen := make(map[string]bool, len(resources))
	out := resources[:0]
	for _, r := range resources {
		if !seen[r.GetName()] {
			seen[r.GetName()] = true
			out = append(out, r)
		}
	}
	return out
}

// candidatesLocked is what a new watch must compare: the names changed
// since the stream's last response and those it subscribes to now, or,
// for a stream that had no response yet (or one older than the change
// log), every name it subscribes to.
func (c *Cache) candidatesLocked(request *cachev3.DeltaRequest, sub cachev3.Subscription) []string {
	if s, ok := sub.ReturnedResources()[seqKey]; ok {
		if since, err := strconv.ParseUint(s, 10, 64); err == nil && since >= c.floor {
			names := append([]string(nil), request.GetResourceNamesSubscribe()...)
			// The log is in sequence order: the changes after since are
			// its tail.
			i := len(c.changes)
			for i > 0 && c.changes[i-1].seq > since {
				i--
			}
			for _, ch := range c.changes[i:] {
				names = append(names, ch.name)
			}
			return unique(names)
		}
	}
	names := make([]string, 0, len(sub.SubscribedResources()))
	for name := range sub.SubscribedResources() {
		names = append(names, name)
	}
	return names
}

// CreateDeltaWatch answers at once if the subscription differs from the
// cache, and otherwise watches for the change that makes it differ.
func (c *Cache) CreateDeltaWatch(request *cachev3.DeltaRequest, sub cachev3.Subscription, out chan cachev3.DeltaResponse) (func(), error) {
	if request.GetTypeUrl() != c.typeURL {
		return nil, fmt.Errorf("type %s is not served; the one type is %s", request.GetTypeUrl(), c.typeURL)
	}
	if sub.IsWildcard() {
		return nil, errors.New("the wildcard subscription is not served: subscribe to resources by name")
	}
	w := &deltaWatch{request: request, sub: sub, out: out, namespace: namespaceOf(request.GetNode().GetId())}
	if topics := xdsresource.TopicCollectionName(w.namespace); hasName(sub.SubscribedResources(), topics) {
		w.topics, w.topicPrefix = topics, xdsresource.TopicCollectionPrefix(w.namespace)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if resp := c.respondLocked(w, c.candidatesLocked(request, sub)); resp != nil {
		out <- resp
		return nil, nil
	}
	watches := c.watches[w.namespace]
	if watches == nil {
		watches = map[*deltaWatch]struct{}{}
		c.watches[w.namespace] = watches
	}
	watches[w] = struct{}{}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.watches[w.namespace], w)
		if len(c.watches[w.namespace]) == 0 {
			delete(c.watches, w.namespace)
		}
	}, nil
}

// CreateWatch refuses the state-of-the-world protocol, which the server
// does not serve.
func (c *Cache) CreateWatch(*cachev3.Request, cachev3.Subscription, chan cachev3.Response) (func(), error) {
	return nil, errors.New("the state-of-the-world protocol is not served: use delta ADS")
}

// GetResources returns the resources the cache holds, by name.
func (c *Cache) GetResources() map[string]types.Resource {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]types.Resource, len(c.resources))
	for name, r := range c.resources {
		out[name] = r.resource
	}
	return out
}

// OpenWatches counts the watches waiting for a change.
func (c *Cache) OpenWatches() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, w := range c.watches {
		n += len(w)
	}
	return n
}

// deltaResponse is one response of the cache (cachev3.DeltaResponse).
type deltaResponse struct {
	request   *cachev3.DeltaRequest
	resources []*discovery.Resource
	removed   []string
	next      map[string]string
	version   string
}

func (r *deltaResponse) GetDeltaDiscoveryResponse() (*discovery.DeltaDiscoveryResponse, error) {
	return &discovery.DeltaDiscoveryResponse{
		Resources:         r.resources,
		RemovedResources:  r.removed,
		TypeUrl:           r.request.GetTypeUrl(),
		SystemVersionInfo: r.version,
	}, nil
}
func (r *deltaResponse) GetDeltaRequest() *cachev3.DeltaRequest  { return r.request }
func (r *deltaResponse) GetSystemVersion() (string, error)       { return r.version, nil }
func (r *deltaResponse) GetResponseVersion() string              { return r.version }
func (r *deltaResponse) GetNextVersionMap() map[string]string    { return r.next }
func (r *deltaResponse) GetReturnedResources() map[string]string { return r.next }
func (r *deltaResponse) GetContext() context.Context             { return context.Background() }

// Fetch refuses the REST protocol, which the server does not serve.
func (c *Cache) Fetch(context.Context, *cachev3.Request) (cachev3.Response, error) {
	return nil, errors.New("fetching over REST is not served: use delta ADS")
}

func hasName[V any](m map[string]V, name string) bool {
	_, ok := m[name]
	return ok
}

// unique sorts names and drops repeats (an update may set and remove one
// name; a subscription may name one the log has).
func unique(names []string) []string {
	slices.Sort(names)
	return slices.Compact(names)
}
