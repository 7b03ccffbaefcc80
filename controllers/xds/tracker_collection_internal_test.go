package xds

import (
	"maps"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/meshconfig/xdsresource"
)

// What the Tracker tells of a pod's collection: each case a pod's event,
// the changes it is told as (member → version), and, for a refusal, which
// members it blames.
func TestTrackerCollectionChanges(t *testing.T) {
	const pod, collection = "shop/p@uid", "shop/topic/*"
	a, b := xdsresource.TopicName("shop", "a"), xdsresource.TopicName("shop", "b")
	topic := func(name string, size int64) types.Resource {
		return &xdsv1.Resource{SchemaVersion: xdsresource.SharedSchemaVersion, Kind: &xdsv1.Resource_Topic{Topic: &xdsv1.TopicPolicy{Name: name, MaxMessageBytes: size}}}
	}
	// setup returns a tracker over a cache of a and b, the collection's
	// version before b changed and after, and the current versions.
	setup := func(t *testing.T) (*Tracker, *Cache, string, string, map[string]string, *[]Change) {
		cache := NewCache(xdsresource.TypeURL)
		if err := cache.UpdateResources(map[string]types.Resource{a: topic("a", 1), b: topic("b", 1)}, nil); err != nil {
			t.Fatal(err)
		}
		before := CollectionVersion(cache, collection)
		if err := cache.UpdateResources(map[string]types.Resource{b: topic("b", 2)}, nil); err != nil {
			t.Fatal(err)
		}
		after := CollectionVersion(cache, collection)
		current := map[string]string{}
		for name, r := range cache.GetResources() {
			current[name] = Version(r.(*xdsv1.Resource))
		}
		tr := NewTracker()
		tr.setCollections(cache)
		var told []Change
		tr.OnChange(func(c []Change) { told = append(told, c...) })
		return tr, cache, before, after, current, &told
	}
	members := func(changes []Change) map[string]string {
		out := map[string]string{}
		for _, c := range changes {
			if c.Members != nil {
				maps.Insert(out, c.Members)
			} else if c.Resource != collection {
				out[c.Resource] = c.Version
			}
		}
		return out
	}

	t.Run("a reconnecting sidecar holds each member as its version says", func(t *testing.T) {
		tr, _, before, _, current, told := setup(t)
		tr.hold(pod, map[string]string{collection: before}, nil)
		want := map[string]string{a: current[a], b: OlderVersion}
		if got := members(*told); !maps.Equal(got, want) {
			t.Fatalf("told %v, want %v", got, want)
		}
	})
	t.Run("a deleted pod holds no member", func(t *testing.T) {
		tr, _, _, after, _, told := setup(t)
		tr.hold(pod, map[string]string{collection: after}, nil)
		*told = nil
		tr.Forget("shop/p")
		if got := members(*told); !maps.Equal(got, map[string]string{a: "", b: ""}) {
			t.Fatalf("told %v, want every member gone", got)
		}
	})
	t.Run("a refusal of every member blames the changed ones", func(t *testing.T) {
		tr, _, before, after, current, _ := setup(t)
		tr.hold(pod, map[string]string{collection: before}, nil)
		got := tr.notHeld(pod, map[string]string{collection: after, a: current[a], b: current[b]})
		if want := map[string]string{collection: after, b: current[b]}; !maps.Equal(got, want) {
			t.Fatalf("blamed %v, want %v", got, want)
		}
	})
	t.Run("an ACK tells the members the responses sent", func(t *testing.T) {
		tr, _, before, after, current, told := setup(t)
		tr.hold(pod, map[string]string{collection: before}, nil)
		*told = nil
		sent := memberChanges{resources: []*discoveryResource{{Name: b, Version: current[b]}, {Name: collection, Version: after}}}
		tr.applyWithMembers(pod, map[string]string{collection: after}, []memberChanges{sent}, nil)
		if got := members(*told); !maps.Equal(got, map[string]string{b: current[b]}) {
			t.Fatalf("told %v, want b alone", got)
		}
	})
	t.Run("an ACK after a restart tells every member", func(t *testing.T) {
		tr, cache, _, _, current, told := setup(t)
		// The pod held a version of another cache (before a restart), and
		// acknowledges this one's response, which sent only b.
		tr.hold(pod, map[string]string{collection: "othercache.7.123"}, nil)
		*told = nil
		now := CollectionVersion(cache, collection)
		sent := memberChanges{resources: []*discoveryResource{{Name: b, Version: current[b]}, {Name: collection, Version: now}}}
		tr.applyWithMembers(pod, map[string]string{collection: now}, []memberChanges{sent}, nil)
		if got, want := members(*told), map[string]string{a: current[a], b: current[b]}; !maps.Equal(got, want) {
			t.Fatalf("told %v, want %v", got, want)
		}
	})
	t.Run("a new pod's first ACK tells the members sent, not those that leave it out", func(t *testing.T) {
		tr, cache, _, _, current, told := setup(t)
		now := CollectionVersion(cache, collection)
		sent := memberChanges{resources: []*discoveryResource{{Name: a, Version: current[a]}, {Name: b, Version: current[b]}, {Name: collection, Version: now}}}
		tr.applyWithMembers(pod, map[string]string{collection: now}, []memberChanges{sent}, []string{"a"})
		if got := members(*told); !maps.Equal(got, map[string]string{b: current[b]}) {
			t.Fatalf("told %v, want b alone", got)
		}
	})
	t.Run("a reconnection does not tell the members that leave the pod out", func(t *testing.T) {
		tr, _, _, after, current, told := setup(t)
		tr.hold(pod, map[string]string{collection: after}, []string{"b"})
		if got := members(*told); !maps.Equal(got, map[string]string{a: current[a]}) {
			t.Fatalf("told %v, want a alone", got)
		}
	})
	t.Run("members whose Topics leave the pod out are not told", func(t *testing.T) {
		tr, _, before, after, current, told := setup(t)
		tr.hold(pod, map[string]string{collection: before}, nil)
		*told = nil
		sent := memberChanges{resources: []*discoveryResource{{Name: a, Version: current[a]}, {Name: b, Version: current[b]}, {Name: collection, Version: after}}}
		tr.applyWithMembers(pod, map[string]string{collection: after}, []memberChanges{sent}, []string{"a"})
		if got := members(*told); !maps.Equal(got, map[string]string{b: current[b]}) {
			t.Fatalf("told %v, want b alone", got)
		}
	})
}

// Which names are a collection's members, compared in place.
func TestMemberOf(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"shop/topic/orders", true},
		{"shop/topic/*", false},   // the collection itself
		{"shop/topic/", false},    // no member name
		{"shop/topic/a/b", false}, // deeper
		{"shop/subscription/orders", false},
		{"shopping/topic/orders", false},
	}
	for _, tc := range tests {
		if got := memberOf(tc.name, "shop/topic/*"); got != tc.want {
			t.Errorf("memberOf(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
	held := map[string]string{"shop/pod/p": "v", "shop/topic/*": "e.1.2", "shop/subscription/s": "v"}
	if c, ok := collectionOf("shop/topic/orders", held); !ok || c != "shop/topic/*" {
		t.Fatalf("collectionOf = %q, %v", c, ok)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = collectionOf("shop/topic/orders", held) }); n != 0 {
		t.Fatalf("collectionOf allocates %v times", n)
	}
}
