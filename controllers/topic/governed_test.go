package topic

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

// TestGovernedCountsFollowTheSubjects: the remembered counts are those of a
// fresh scan after every change of a name or a subject, and reused only
// while nothing changed.
func TestGovernedCountsFollowTheSubjects(t *testing.T) {
	topic := func(name, subject string) v1alpha1.Topic {
		return v1alpha1.Topic{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.TopicSpec{Subject: v1alpha1.SubjectPattern(subject)}}
	}
	sub := func(name, subject string) v1alpha1.Subscription {
		return v1alpha1.Subscription{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.SubscriptionSpec{Subject: v1alpha1.SubjectPattern(subject)}}
	}
	topics := []v1alpha1.Topic{topic("all", ">"), topic("orders", "orders.>"), topic("eu", "orders.eu.*")}
	steps := []struct {
		name string
		subs []v1alpha1.Subscription
		want map[string]int32
	}{
		{"one each", []v1alpha1.Subscription{sub("a", "x.y"), sub("b", "orders.us.new"), sub("c", "orders.eu.new")}, map[string]int32{"all": 1, "orders": 1, "eu": 1}},
		{"a subject moves", []v1alpha1.Subscription{sub("a", "orders.x"), sub("b", "orders.us.new"), sub("c", "orders.eu.new")}, map[string]int32{"all": 0, "orders": 2, "eu": 1}},
		{"two subjects swap", []v1alpha1.Subscription{sub("a", "orders.us.new"), sub("b", "orders.x"), sub("c", "orders.eu.new")}, map[string]int32{"all": 0, "orders": 2, "eu": 1}},
		{"one more", []v1alpha1.Subscription{sub("a", "orders.us.new"), sub("b", "orders.x"), sub("c", "orders.eu.new"), sub("d", "z")}, map[string]int32{"all": 1, "orders": 2, "eu": 1}},
		{"a wider pattern", []v1alpha1.Subscription{sub("a", "orders.>"), sub("b", "orders.x"), sub("c", "orders.eu.new"), sub("d", "z")}, map[string]int32{"all": 1, "orders": 2, "eu": 1}},
	}
	var g governedCounts
	for _, step := range steps {
		for name, want := range step.want {
			if got := g.count("ns", name, topics, step.subs); got != want {
				t.Errorf("%s: %s governs %d, want %d", step.name, name, got, want)
			}
		}
	}
}
