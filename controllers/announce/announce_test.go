package announce

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

func TestAnnouncementsAreNewsOnce(t *testing.T) {
	topic := func(uid types.UID) *v1alpha1.Topic {
		return &v1alpha1.Topic{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "t", UID: uid}}
	}
	type step struct {
		uid          types.UID
		state, shown string
		news         bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"a problem is news once, however often it is reconciled", []step{
			{"1", "bad (generation 1)", "", true},
			{"1", "bad (generation 1)", "", false}, // a stale cache still shows no problem
			{"1", "bad (generation 1)", "bad (generation 1)", false},
		}},
		{"a new generation is news", []step{
			{"1", "bad (generation 1)", "", true},
			{"1", "bad (generation 2)", "bad (generation 1)", true},
		}},
		{"no problem is never news, and a problem that returns is", []step{
			{"1", "", "", false},
			{"1", "conflict with b", "", true},
			{"1", "", "conflict with b", false},
			{"1", "conflict with b", "", true},
		}},
		{"after a restart, what the status shows was announced", []step{
			{"1", "bad (generation 1)", "bad (generation 1)", false},
			{"1", "bad (generation 2)", "bad (generation 1)", true},
		}},
		{"a re-created object is news again", []step{
			{"1", "bad (generation 1)", "", true},
			{"2", "bad (generation 1)", "", true},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var a Memory
			for i, s := range tc.steps {
				if got := a.News(topic(s.uid), Invalid, s.state, s.shown); got != s.news {
					t.Fatalf("step %d %+v: news %v", i, s, got)
				}
			}
			// Forgotten (the object is gone), its problem is news again.
			a.Forget(types.NamespacedName{Namespace: "ns", Name: "t"})
			if !a.News(topic("3"), Invalid, "bad", "") {
				t.Fatal("a forgotten object's problem is not news")
			}
		})
	}
}
