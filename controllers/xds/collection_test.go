package xds_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/proto"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/controllers/xds"
	"github.com/weighstation/weighstation/meshconfig/xdsresource"
)

// collectionClient is what a sidecar holds of its namespace's Topic
// collection, applying responses as sidecar/xdsclient does: a complete
// response replaces the members, any other adds and removes.
type collectionClient struct {
	t       *testing.T
	members map[string]string // name → version
	marker  string            // the collection's version
	// completes counts the complete responses; markers every response
	// that carried the marker.
	completes, markers int
}

func (c *collectionClient) apply(resp cachev3.DeltaResponse) {
	d, err := resp.GetDeltaDiscoveryResponse()
	if err != nil {
		c.t.Fatal(err)
	}
	sent := map[string]string{}
	complete := false
	for _, r := range d.GetResources() {
		if r.GetName() == "shop/topic/*" {
			var res xdsv1.Resource
			if err := proto.Unmarshal(r.GetResource().GetValue(), &res); err != nil {
				c.t.Fatal(err)
			}
			complete = res.GetTopicCollection().GetComplete()
			c.marker = r.GetVersion()
			c.markers++
			continue
		}
		if strings.HasPrefix(r.GetName(), "shop/topic/") {
			sent[r.GetName()] = r.GetVersion()
		}
	}
	if complete {
		c.completes++
		clear(c.members)
	}
	maps.Copy(c.members, sent)
	for _, name := range d.GetRemovedResources() {
		delete(c.members, name)
	}
}

// cacheMembers is what the cache holds of shop's Topics, by version.
func cacheMembers(cache *xds.Cache) map[string]string {
	out := map[string]string{}
	for name, res := range cache.GetResources() {
		if strings.HasPrefix(name, "shop/topic/") {
			out[name] = xds.Version(res.(*xdsv1.Resource))
		}
	}
	return out
}

// A stream subscribed to a collection holds, after every step, exactly
// the members the cache holds, in their versions, over random sequences of
// updates and removals (of members and of other resources), ACKs held
// back, reconnections reporting the collection's version (or none), and
// restarts of the operator (a new cache with the same resources); and it
// is sent the whole collection only when it must: a stream that reports
// no version, a version older than the change log, or one of another
// cache whose members differ. A restarted operator whose resources did not
// change sends nothing.
func TestCollectionStreamHoldsWhatTheCacheHolds(t *testing.T) {
	for _, logged := range []int{1 << 16, 2} {
		restore := xds.SetMaxLoggedChanges(logged)
		t.Run(fmt.Sprintf("log of %d changes", logged), func(t *testing.T) {
			for seed := uint64(1); seed <= 40; seed++ {
				t.Run(fmt.Sprint(seed), func(t *testing.T) { collectionRun(t, seed, logged > 2) })
			}
		})
		restore()
	}
}

func collectionRun(t *testing.T, seed uint64, longLog bool) {
	rng := rand.New(rand.NewPCG(seed, 11))
	var names []string
	for i := range 8 {
		names = append(names, xdsresource.TopicName("shop", fmt.Sprint("t", i)))
	}
	// Names that are not members: the pod's own, another namespace's Topic.
	others := []string{xdsresource.PodResourceName("shop", "p0"), xdsresource.TopicName("bank", "t0")}
	content := map[string]types.Resource{}
	cache := xds.NewCache(xdsresource.TypeURL)
	client := &collectionClient{t: t, members: map[string]string{}}
	var s *simStream
	held := false // the stream's last ACK is held back
	connected := true
	open := func(report bool) {
		if s != nil && s.cancel != nil {
			s.cancel()
		}
		s = &simStream{cache: cache, node: &core.Node{Id: "shop/p0"}, out: make(chan cachev3.DeltaResponse, 4), onResponse: client.apply,
			delayAck: func() bool { held = rng.IntN(4) == 0; return held }}
		held = false
		initial := map[string]string{}
		if report && client.marker != "" {
			initial["shop/topic/*"] = client.marker
		}
		s.request(t, []string{"shop/topic/*", others[0]}, nil, initial)
	}
	open(false)
	if client.completes != 1 {
		t.Fatalf("a new stream without a version: %d complete responses, want 1", client.completes)
	}
	for step := range 300 {
		completes, markers := client.completes, client.markers
		mayComplete := !longLog
		switch op := rng.IntN(10); {
		case op < 6: // an update of a few resources, perhaps removals
			update := map[string]types.Resource{}
			var remove []string
			for range 1 + rng.IntN(3) {
				name := names[rng.IntN(len(names))]
				if rng.IntN(8) == 0 {
					name = others[rng.IntN(len(others))]
				}
				if rng.IntN(4) == 0 {
					remove = append(remove, name)
					delete(update, name)
					continue
				}
				update[name] = &xdsv1.Resource{SchemaVersion: xdsresource.SharedSchemaVersion, Kind: &xdsv1.Resource_Topic{Topic: &xdsv1.TopicPolicy{Name: name, MaxMessageBytes: int64(rng.IntN(3))}}}
			}
			for name := range update {
				for i, r := range remove {
					if r == name {
						remove = append(remove[:i], remove[i+1:]...)
						break
					}
				}
			}
			if err := cache.UpdateResources(update, remove); err != nil {
				t.Fatal(err)
			}
			maps.Copy(content, update)
			for _, name := range remove {
				delete(content, name)
			}
			if connected && !held {
				s.drain(t)
			}
		case op < 7: // the held-back ACK goes
			if connected && held {
				held = false
				s.request(t, nil, nil, nil)
			}
		case op < 8: // the stream breaks; updates go on without it
			if connected {
				if s.cancel != nil {
					s.cancel()
				}
				connected, held = false, false
			}
		case op < 9: // a reconnection, reporting the collection's version or not
			// The sidecar applied what it was sent, acknowledged or not,
			// and reports that.
			report := rng.IntN(4) != 0
			// A version of another cache (the operator restarted since the
			// sidecar last received one) is no place in this one's log.
			epoch := func(v string) string { e, _, _ := strings.Cut(v, "."); return e }
			foreign := epoch(client.marker) != epoch(xds.CollectionVersion(cache, "shop/topic/*"))
			mayComplete = mayComplete || !report || foreign
			open(report)
			connected = true
		default: // the operator restarts: a new cache, the same resources
			before := cacheMembers(cache)
			cache = xds.NewCache(xdsresource.TypeURL)
			if err := cache.UpdateResources(maps.Clone(content), nil); err != nil {
				t.Fatal(err)
			}
			if got := cacheMembers(cache); !maps.Equal(got, before) {
				t.Fatalf("step %d: the new cache holds %v, the old one %v", step, got, before)
			}
			upToDate := maps.Equal(client.members, before)
			open(true)
			connected = true
			if upToDate && client.markers != markers {
				t.Fatalf("step %d: a restarted operator with the same Topics sent the collection to a sidecar that holds it", step)
			}
			mayComplete = mayComplete || !upToDate
		}
		if !mayComplete && client.completes != completes {
			t.Fatalf("step %d: the whole collection was sent to a stream that reported a version the log covers", step)
		}
		if connected && !held {
			if want := cacheMembers(cache); !maps.Equal(client.members, want) {
				t.Fatalf("step %d: the stream holds %v, the cache %v", step, client.members, want)
			}
		}
	}
}

// What a pod holds of a member follows from the collection version it
// acknowledged.
func TestHeldMember(t *testing.T) {
	cache := xds.NewCache(xdsresource.TypeURL)
	topic := func(name string, size int64) *xdsv1.Resource {
		return &xdsv1.Resource{SchemaVersion: xdsresource.SharedSchemaVersion, Kind: &xdsv1.Resource_Topic{Topic: &xdsv1.TopicPolicy{Name: name, MaxMessageBytes: size}}}
	}
	versionAfter := func(update map[string]types.Resource, remove []string) string {
		t.Helper()
		if err := cache.UpdateResources(update, remove); err != nil {
			t.Fatal(err)
		}
		return xds.CollectionVersion(cache, "shop/topic/*")
	}
	a, b, c := "shop/topic/a", "shop/topic/b", "shop/topic/c"
	v1 := versionAfter(map[string]types.Resource{a: topic("a", 1), b: topic("b", 1)}, nil)
	v2 := versionAfter(map[string]types.Resource{b: topic("b", 2)}, nil)
	v3 := versionAfter(map[string]types.Resource{c: topic("c", 1)}, nil)
	restarted := xds.NewCache(xdsresource.TypeURL)
	if err := restarted.UpdateResources(map[string]types.Resource{a: topic("a", 1), b: topic("b", 2), c: topic("c", 1)}, nil); err != nil {
		t.Fatal(err)
	}
	current := func(name string) string { return xds.Version(cache.GetResources()[name].(*xdsv1.Resource)) }
	tests := []struct {
		name, member, held, want string
		cache                    *xds.Cache
	}{
		{"unchanged since", a, v1, current(a), cache},
		{"changed since", b, v1, xds.OlderVersion, cache},
		{"added since", c, v1, "", cache},
		{"the change applied", b, v2, current(b), cache},
		{"the current collection", c, v3, current(c), cache},
		{"a member that is gone", "shop/topic/zz", v3, "", cache},
		{"no version", a, "", xds.OlderVersion, cache},
		{"a restarted operator, the same Topics", a, v3, current(a), restarted},
		{"a restarted operator, other Topics", a, v2, xds.OlderVersion, restarted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cache.HeldMember(tc.member, tc.held); got != tc.want {
				t.Fatalf("HeldMember(%s, %q) = %q, want %q", tc.member, tc.held, got, tc.want)
			}
		})
	}
}
