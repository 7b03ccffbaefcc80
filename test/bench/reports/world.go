package main

import (
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

const (
	podNamespace = "bench"
	// podsPerGroup is how many pods each Subscription selects.
	podsPerGroup = 10
)

// partitionLabels are the pods' three group labels: the pods are split
// into groups of ten three ways, once per label, and each Subscription
// selects one group of one label, so that every pod is selected by
// exactly three Subscriptions, one per label.
var partitionLabels = []string{"ga", "gb", "gc"}

// world is the namespace the bench creates: pods, Subscriptions, Topics,
// and what each pod's sidecar reports.
type world struct {
	pods, groups int // groups per label: pods / podsPerGroup
	// strides lay out each label's groups: pod i is in group
	// (i*stride mod pods) / podsPerGroup. They are coprime with pods, so
	// each is a permutation, and far apart, so that two pods sharing a
	// group under one label rarely share one under another.
	strides []int
	topics  int
	// movingEvery: Subscription k moves iff k % movingEvery == 0.
	movingEvery int
}

func newWorld(pods, topics, movingEvery int) (*world, error) {
	if pods < podsPerGroup || pods%podsPerGroup != 0 {
		return nil, fmt.Errorf("-sidecars must be a positive multiple of %d, got %d", podsPerGroup, pods)
	}
	if topics < 1 || movingEvery < 1 {
		return nil, fmt.Errorf("-topics and -moving-every must be at least 1")
	}
	w := &world{pods: pods, groups: pods / podsPerGroup, topics: topics, movingEvery: movingEvery}
	for _, from := range []int{1, 11, 101} {
		s := from
		for gcd(s, pods) != 1 {
			s++
		}
		w.strides = append(w.strides, s)
	}
	return w, nil
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func podName(i int) string   { return fmt.Sprintf("p-%05d", i) }
func subName(k int) string   { return fmt.Sprintf("s-%05d", k) }
func topicName(j int) string { return fmt.Sprintf("t-%02d", j) }
func groupName(g int) string { return fmt.Sprintf("g%d", g) }

func (w *world) subscriptions() int { return len(partitionLabels) * w.groups }

// group is pod i's group under label p.
func (w *world) group(i, p int) int { return (i * w.strides[p] % w.pods) / podsPerGroup }

// podLabels are pod i's group labels.
func (w *world) podLabels(i int) map[string]string {
	l := map[string]string{}
	for p, key := range partitionLabels {
		l[key] = groupName(w.group(i, p))
	}
	return l
}

// podSubscriptions are the names of the three Subscriptions that select
// pod i, sorted.
func (w *world) podSubscriptions(i int) []string {
	out := make([]string, 0, len(partitionLabels))
	for p := range partitionLabels {
		out = append(out, subName(p*w.groups+w.group(i, p)))
	}
	slices.Sort(out)
	return out
}

// podTopic is the Topic pod i publishes under.
func (w *world) podTopic(i int) string { return topicName(i % w.topics) }

func (w *world) moving(k int) bool { return k%w.movingEvery == 0 }

// isMoving tells a Subscription's name moving ("" for no Subscription).
func (w *world) isMoving(name string) bool {
	var k int
	if _, err := fmt.Sscanf(name, "s-%d", &k); err != nil {
		return false
	}
	return w.moving(k)
}

// objects are the Topics and Subscriptions. Topic j governs
// orders.t<j>.>, and applies to every pod (no publishers selector);
// Subscription k consumes orders.t<k mod topics>.s<k>.
func (w *world) objects() []ctrlclient.Object {
	var out []ctrlclient.Object
	for j := range w.topics {
		out = append(out, &v1alpha1.Topic{
			ObjectMeta: metav1.ObjectMeta{Namespace: podNamespace, Name: topicName(j)},
			Spec: v1alpha1.TopicSpec{
				Subject: v1alpha1.SubjectPattern(fmt.Sprintf("orders.t%d.>", j)),
				Limits:  v1alpha1.TopicLimits{MaxMessageBytes: 65536},
			},
		})
	}
	for k := range w.subscriptions() {
		p, g := k/w.groups, k%w.groups
		out = append(out, &v1alpha1.Subscription{
			ObjectMeta: metav1.ObjectMeta{Namespace: podNamespace, Name: subName(k)},
			Spec: v1alpha1.SubscriptionSpec{
				Subject:  v1alpha1.SubjectPattern(fmt.Sprintf("orders.t%d.s%d", k%w.topics, k)),
				Selector: metav1.LabelSelector{MatchLabels: map[string]string{partitionLabels[p]: groupName(g)}},
			},
		})
	}
	return out
}
