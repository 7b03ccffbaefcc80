package propagation

import (
	"maps"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/weighstation/weighstation/controllers/request"
	"github.com/weighstation/weighstation/controllers/xds"
	"github.com/weighstation/weighstation/meshconfig/xdsresource"
)

// TestAcknowledgementsThatChangeNoStatusQueueNothing: of the changes the
// tracker reports, only one more pod applying the settled version of a
// Topic for every pod is left out; every other change queues its object.
func TestAcknowledgementsThatChangeNoStatusQueueNothing(t *testing.T) {
	topic := xdsresource.TopicName("shop", "orders")
	sub := xdsresource.SubscriptionName("shop", "orders")
	pod := xds.PodKey("shop", "p", "uid")
	// collection is a pod's new version of shop's Topics, with which it
	// applied member at version ("" for its removal).
	collection := func(member, version string) xds.Change {
		return xds.Change{Resource: xdsresource.TopicCollectionName("shop"), Pod: pod, Version: "e.2.3", Members: func(yield func(string, string) bool) {
			yield(member, version)
		}}
	}
	tests := []struct {
		name    string
		settled string // the version the last pass found settled ("" none)
		change  xds.Change
		queued  bool
	}{
		{"a new pod applies the settled version", "v1", xds.Change{Resource: topic, Pod: pod, Version: "v1"}, false},
		{"a pod applies another version", "v1", xds.Change{Resource: topic, Pod: pod, Version: "v2"}, true},
		{"a pod refuses the settled version", "v1", xds.Change{Resource: topic, Pod: pod, Version: "v1", Refused: true}, true},
		{"a pod drops the Topic or goes", "v1", xds.Change{Resource: topic, Pod: pod}, true},
		{"the last pass found it unsettled", "", xds.Change{Resource: topic, Pod: pod, Version: "v1"}, true},
		{"a Subscription counts its pods", "v1", xds.Change{Resource: sub, Pod: pod, Version: "v1"}, true},
		{"a pod's own resource is no object", "", xds.Change{Resource: xdsresource.PodResourceName("shop", "p"), Pod: pod, Version: "v1"}, false},
		{"a schema-1 pod resource is no object", "", xds.Change{Resource: xdsresource.PodName("shop", "p"), Pod: pod, Version: "v1"}, false},
		{"a Topic collection is no object", "", xds.Change{Resource: xdsresource.TopicCollectionName("shop"), Pod: pod, Version: "e.1.2"}, false},
		{"a new pod applies the collection, the Topic at its settled version", "v1", collection(topic, "v1"), false},
		{"a pod applies the collection, the Topic at another version", "v1", collection(topic, "v2"), true},
		{"a pod applies the collection, the Topic removed", "v1", collection(topic, ""), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Reconciler{}
			r.settle(request.Object{Kind: request.Topic, NamespacedName: types.NamespacedName{Namespace: "shop", Name: "orders"}}, tt.settled != "", tt.settled)
			changes := &changeSet{wake: make(chan struct{}, 1), resources: map[string]bool{}, settled: r}
			changes.add([]xds.Change{tt.change})
			queued := slices.Collect(maps.Keys(changes.take()))
			if tt.queued != (len(queued) == 1) {
				t.Fatalf("queued %v, want queued=%v", queued, tt.queued)
			}
			select {
			case <-changes.wake:
				if !tt.queued {
					t.Fatal("woken with nothing queued")
				}
			default:
				if tt.queued {
					t.Fatal("queued without a wake-up")
				}
			}
		})
	}
}

// TestAcknowledgementsQueueTheirKind: a Topic and a Subscription of one
// name are two requests, each saying its kind, so each reconcile reads one
// object.
func TestAcknowledgementsQueueTheirKind(t *testing.T) {
	pod := xds.PodKey("shop", "p", "uid")
	changes := &changeSet{wake: make(chan struct{}, 1), resources: map[string]bool{}}
	changes.add([]xds.Change{
		{Resource: xdsresource.TopicName("shop", "orders"), Pod: pod, Version: "v1"},
		{Resource: xdsresource.SubscriptionName("shop", "orders"), Pod: pod, Version: "v1"},
	})
	nn := types.NamespacedName{Namespace: "shop", Name: "orders"}
	want := map[request.Object]bool{{Kind: request.Topic, NamespacedName: nn}: true, {Kind: request.Subscription, NamespacedName: nn}: true}
	if got := changes.take(); !maps.Equal(got, want) {
		t.Fatalf("queued %v, want %v", got, want)
	}
}
