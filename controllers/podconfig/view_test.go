package podconfig

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

// TestAViewIsPreparedAgainOnlyWhenASpecChanges: pods of a namespace share
// one desired.View until a Topic's or Subscription's spec (generation),
// identity (UID) or presence changes; the cache's order and status writes
// do not count.
func TestAViewIsPreparedAgainOnlyWhenASpecChanges(t *testing.T) {
	meta := func(name, uid string, gen int64) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: "shop", Name: name, UID: k8stypes.UID("uid-" + uid), Generation: gen}
	}
	topics := []v1alpha1.Topic{{ObjectMeta: meta("a", "a", 1)}, {ObjectMeta: meta("b", "b", 1)}}
	subs := []v1alpha1.Subscription{{ObjectMeta: meta("a", "sa", 1)}}
	r := &Reconciler{}
	first := r.viewOf("shop", topics, subs)

	reordered := slices.Clone(topics)
	slices.Reverse(reordered)
	reordered[0].Status.Conditions = []metav1.Condition{{Type: "Ready"}}
	reordered[0].ResourceVersion = "2"
	if r.viewOf("shop", reordered, subs) != first {
		t.Fatal("another order or a status write prepared the view again")
	}
	tests := []struct {
		name   string
		topics []v1alpha1.Topic
		subs   []v1alpha1.Subscription
	}{
		{"a Topic's spec changed", []v1alpha1.Topic{{ObjectMeta: meta("a", "a", 2)}, topics[1]}, subs},
		{"a Subscription's spec changed", topics, []v1alpha1.Subscription{{ObjectMeta: meta("a", "sa", 2)}}},
		{"a Topic was re-created", []v1alpha1.Topic{{ObjectMeta: meta("a", "a2", 1)}, topics[1]}, subs},
		{"a Topic was deleted", topics[:1], subs},
		{"a Subscription was added", topics, append(slices.Clone(subs), v1alpha1.Subscription{ObjectMeta: meta("b", "sb", 1)})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Reconciler{}
			before := r.viewOf("shop", topics, subs)
			if r.viewOf("shop", tt.topics, tt.subs) == before {
				t.Fatal("the view was not prepared again")
			}
		})
	}
}
