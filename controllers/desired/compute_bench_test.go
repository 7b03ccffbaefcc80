package desired_test

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/desired"
	"github.com/weighstation/weighstation/meshconfig"
)

// namespaceOf lays out make bench-operator's world: topics Topics, one in
// three with a publishers selector matching one group of 10 pods, and as
// many Subscriptions, each selecting one group.
func namespaceOf(topics, subscriptions int) ([]v1alpha1.Topic, []v1alpha1.Subscription) {
	var ts []v1alpha1.Topic
	for i := range topics {
		t := topic("shop", fmt.Sprintf("t%05d", i), fmt.Sprintf("orders.r%d.c%d.>", i/10, i%10))
		if i%3 == 0 {
			t.Spec.Publishers = &metav1.LabelSelector{MatchLabels: map[string]string{"group": fmt.Sprint(i % 20)}}
		}
		ts = append(ts, t)
	}
	var ss []v1alpha1.Subscription
	for i := range subscriptions {
		ss = append(ss, subscription("shop", fmt.Sprintf("s%05d", i), fmt.Sprintf("orders.r%d.*", i/10), map[string]string{"group": fmt.Sprint(i % 20)}))
	}
	return ts, ss
}

// BenchmarkCompute prepares the namespaces of make bench-operator's two
// worlds (view: once per change of the namespace's resources) and computes
// one pod's configuration in them (pod: what every pod reconcile pays).
func BenchmarkCompute(b *testing.B) {
	for _, size := range []int{300, 3000} {
		topics, subscriptions := namespaceOf(size, size)
		pod := desired.Pod{Namespace: "shop", Name: "p", Labels: map[string]string{"group": "3"}}
		defaults := meshconfig.Defaults{MaxMessageBytes: 1 << 20}
		b.Run(fmt.Sprintf("objects=%d/view", size), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				desired.NewView("shop", topics, subscriptions)
			}
		})
		b.Run(fmt.Sprintf("objects=%d/pod", size), func(b *testing.B) {
			view := desired.NewView("shop", topics, subscriptions)
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := view.Compute(pod, defaults); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
