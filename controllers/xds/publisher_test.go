package xds_test

import (
	"testing"

	"github.com/go-logr/logr"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/weighstation/weighstation/controllers/desired"
	"github.com/weighstation/weighstation/controllers/xds"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/meshconfig/xdsresource"
)

// shopTopics are the Topics of the publisher tests' namespace "shop".
func shopTopics() (orders, ledger meshconfig.TopicPolicy) {
	return meshconfig.TopicPolicy{Name: "orders", Subject: "orders.>", MaxMessageBytes: 1024, MayPublish: true},
		meshconfig.TopicPolicy{Name: "ledger", Subject: "ledger.>", MaxMessageBytes: 1024, MayPublish: true}
}

// part is a pod of "shop", left out of the Topics named in excluded.
func part(pod string, excluded ...string) desired.PodPart {
	return desired.PodPart{Namespace: "shop", Pod: pod, Default: meshconfig.DefaultConfig(meshconfig.DefaultPolicy).Default,
		Access: meshconfig.Access{Mode: meshconfig.AccessEnforce}, Excluded: excluded}
}

// What each kind of change republishes: a Topic's limits its one resource,
// a Topic's name, or the subject of one that excludes some pods,
// every pod resource of its namespace that lists it, a pod's own change its resource alone; the last pod of a
// namespace takes the namespace's Topics out of the cache.
func TestPublisherRepublishesWhatChanged(t *testing.T) {
	orders, ledger := shopTopics()
	pub := xds.NewPublisher(logr.Discard(), xds.NewTracker())
	pub.SetTopics("shop", []meshconfig.TopicPolicy{ledger, orders})
	if n := len(pub.Cache().GetResources()); n != 0 {
		t.Fatalf("a namespace without pods has %d resources in the cache", n)
	}
	pub.SetPod(part("billing-0"), "uid-0")
	pub.SetPod(part("web-0", "ledger"), "uid-1")
	before := snapshot(pub)
	want := []string{"shop/pod/billing-0", "shop/pod/web-0", "shop/topic/ledger", "shop/topic/orders"}
	if len(before) != len(want) {
		t.Fatalf("cache holds %v; want %v", keys(before), want)
	}

	tests := []struct {
		name    string
		change  func()
		changed []string
		removed []string
	}{
		{"a Topic's limit", func() {
			bigger := orders
			bigger.MaxMessageBytes = 4096
			pub.SetTopics("shop", []meshconfig.TopicPolicy{ledger, bigger})
		}, []string{"shop/topic/orders"}, nil},
		{"the same Topics again", func() {
			bigger := orders
			bigger.MaxMessageBytes = 4096
			pub.SetTopics("shop", []meshconfig.TopicPolicy{ledger, bigger})
		}, nil, nil},
		// A pod's resource names the Topics it is excluded from (web-0:
		// ledger), and nothing of the others: no pod's resource changes
		// with a Topic.
		{"a Topic's subject", func() {
			moved := ledger
			moved.Subject = "ledger.v2.>"
			bigger := orders
			bigger.MaxMessageBytes = 4096
			pub.SetTopics("shop", []meshconfig.TopicPolicy{moved, bigger})
		}, []string{"shop/topic/ledger"}, nil},
		{"a Topic deleted", func() {
			moved := ledger
			moved.Subject = "ledger.v2.>"
			pub.SetTopics("shop", []meshconfig.TopicPolicy{moved})
		}, nil, []string{"shop/topic/orders"}},
		{"one pod's exclusions", func() {
			pub.SetPod(part("billing-0", "ledger"), "uid-0")
		}, []string{"shop/pod/billing-0"}, nil},
		{"the namespace's pods deleted", func() {
			pub.Delete(k8stypes.NamespacedName{Namespace: "shop", Name: "billing-0"})
			pub.Delete(k8stypes.NamespacedName{Namespace: "shop", Name: "web-0"})
		}, nil, []string{"shop/pod/billing-0", "shop/pod/web-0", "shop/topic/ledger"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(pub)
			tc.change()
			after := snapshot(pub)
			var changed, removed []string
			for name, v := range after {
				if before[name] != v {
					changed = append(changed, name)
				}
			}
			for name := range before {
				if _, ok := after[name]; !ok {
					removed = append(removed, name)
				}
			}
			if !sameSet(changed, tc.changed) || !sameSet(removed, tc.removed) {
				t.Fatalf("changed %v, removed %v; want changed %v, removed %v", changed, removed, tc.changed, tc.removed)
			}
		})
	}
	// The namespace's Topics are kept for its next pod.
	pub.SetPod(part("billing-1"), "uid-2")
	if _, ok := pub.Current(xdsresource.TopicName("shop", "ledger")); !ok {
		t.Fatal("the namespace's next pod came without its Topics")
	}
}

// A pod whose sidecar is of the previous release (schema 1) reads its
// resource under its node ID, which lists every Topic of the namespace:
// the publisher publishes it for that pod alone, keeps it as the Topics
// change, and removes it with the pod.
func TestPublisherServesSchema1ToItsReadersOnly(t *testing.T) {
	orders, ledger := shopTopics()
	pub := xds.NewPublisher(logr.Discard(), xds.NewTracker())
	pub.SetTopics("shop", []meshconfig.TopicPolicy{ledger, orders})
	pub.SetPod(part("billing-0"), "uid-0")
	pub.SetPod(part("web-0", "ledger"), "uid-1")
	before := snapshot(pub)
	pub.ServeV1("shop/web-0")
	after := snapshot(pub)
	if len(after) != len(before)+1 || after["shop/web-0"] == "" {
		t.Fatalf("after ServeV1 the cache holds %v; want %v and shop/web-0", keys(after), keys(before))
	}
	res, _ := pub.Current("shop/web-0")
	if got := res.GetSchemaVersion(); got != xdsresource.PreviousSchemaVersion {
		t.Fatalf("schema-1 resource of schema %d", got)
	}
	refs := res.GetPod().GetTopics()
	if len(refs) != 2 || refs[0].GetName() != "shop/topic/ledger" || refs[0].GetMayPublish() || refs[0].GetSubject() != "ledger.>" || !refs[1].GetMayPublish() {
		t.Fatalf("schema-1 Topic references %v; want ledger refused (its subject), orders allowed", refs)
	}
	// A Topic added changes the schema-1 resource, and no schema-2 one.
	audit := meshconfig.TopicPolicy{Name: "audit", Subject: "audit.>", MaxMessageBytes: 1024, MayPublish: true}
	pub.SetTopics("shop", []meshconfig.TopicPolicy{audit, ledger, orders})
	changed := snapshot(pub)
	var diff []string
	for name, v := range changed {
		if after[name] != v {
			diff = append(diff, name)
		}
	}
	if !sameSet(diff, []string{"shop/web-0", "shop/topic/audit"}) {
		t.Fatalf("a Topic added changed %v; want shop/web-0 and shop/topic/audit", diff)
	}
	pub.Delete(k8stypes.NamespacedName{Namespace: "shop", Name: "web-0"})
	if _, ok := pub.Cache().GetResources()["shop/web-0"]; ok {
		t.Fatal("the schema-1 resource outlived its pod")
	}
}

// snapshot is the version of every resource the publisher's cache holds.
func snapshot(pub *xds.Publisher) map[string]string {
	out := map[string]string{}
	for name := range pub.Cache().GetResources() {
		res, _ := pub.Current(name)
		out[name] = xds.Version(res)
	}
	return out
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	in := map[string]bool{}
	for _, x := range a {
		in[x] = true
	}
	for _, x := range b {
		if !in[x] {
			return false
		}
	}
	return true
}
