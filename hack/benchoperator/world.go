package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/hack/benchoperator/opproto"
)

// podsPerGroup is how many pods each Subscription and each publishers
// selector selects: pods carry `group: g<k>`, ten to a group.
const podsPerGroup = 10

// worldSize is one world's object counts.
type worldSize struct {
	Name                 string
	Pods, Topics, Subs   int
	Scale                float64
	FullPods, FullTopics int
	FullSubs             int
	Groups               int
}

var worldSizes = map[string]worldSize{
	"small": {Name: "small", Pods: 200, Topics: 300, Subs: 300},
	"large": {Name: "large", Pods: 2000, Topics: 3000, Subs: 3000},
}

func scaled(w worldSize, scale float64) worldSize {
	w.FullPods, w.FullTopics, w.FullSubs, w.Scale = w.Pods, w.Topics, w.Subs, scale
	if scale != 1 {
		w.Pods = max(podsPerGroup, int(math.Round(float64(w.Pods)*scale/podsPerGroup))*podsPerGroup)
		w.Topics = max(3, int(math.Round(float64(w.Topics)*scale)))
		w.Subs = max(1, int(math.Round(float64(w.Subs)*scale)))
	}
	w.Groups = w.Pods / podsPerGroup
	return w
}

// world is the model of one namespace: what the bench created, and what
// each pod's sidecar must hold.
type world struct {
	size   worldSize
	topics []*v1alpha1.Topic
	subs   []*v1alpha1.Subscription

	mu sync.Mutex
	// podGroup is each pod's group, by index (pods created by the changes
	// are appended).
	podGroup []int
	podNames []string
	pods     []opproto.Pod
	// subsOf and publishersOf are, per group, the Subscriptions that
	// select it and the Topics whose publishers select it.
	subsOf, publishersOf map[int][]string
	subsHash             map[int]uint64
	sizes                map[int]int
}

func topicName(j int) string   { return fmt.Sprintf("t-%05d", j) }
func subName(m int) string     { return fmt.Sprintf("s-%05d", m) }
func podName(i int) string     { return fmt.Sprintf("p-%05d", i) }
func groupName(g int) string   { return fmt.Sprintf("g%d", g) }
func hasPublishers(j int) bool { return j%3 == 0 }

// newWorld lays out the objects. Subjects overlap as in config/samples:
// ten Topics per region r — orders.r<r>.> (the region), orders.r<r>.*.created
// and orders.r<r>.*.shipped (wildcards across customers), and
// orders.r<r>.c<k>.> (one customer shard each) — and ten Subscriptions per
// region on subjects those Topics govern: orders.r<r>.* (by the region's
// Topic), orders.r<r>.*.created (by the Topic of that pattern),
// orders.r<r>.c2.shipped (by *.shipped) and orders.r<r>.c<k>.created (both
// *.created and c<k>.> cover it; the more specific governs). Every subject
// pattern of a Topic is unique, so every Topic is in force. One Topic in
// three has a publishers selector (one group: ten pods), the others apply
// to every pod; Subscription m selects group m mod groups.
func newWorld(size worldSize) *world {
	w := &world{size: size, subsOf: map[int][]string{}, publishersOf: map[int][]string{}, subsHash: map[int]uint64{}, sizes: map[int]int{}}
	for j := range size.Topics {
		r, k := j/10, j%10
		var subject string
		switch k {
		case 0:
			subject = fmt.Sprintf("orders.r%d.>", r)
		case 1:
			subject = fmt.Sprintf("orders.r%d.*.created", r)
		case 2:
			subject = fmt.Sprintf("orders.r%d.*.shipped", r)
		default:
			subject = fmt.Sprintf("orders.r%d.c%d.>", r, k)
		}
		t := &v1alpha1.Topic{
			ObjectMeta: metav1.ObjectMeta{Namespace: podNamespace, Name: topicName(j)},
			Spec: v1alpha1.TopicSpec{
				Subject: v1alpha1.SubjectPattern(subject),
				Limits:  v1alpha1.TopicLimits{MaxMessageBytes: 65536 + int64(j)},
			},
		}
		if j%2 == 0 {
			t.Spec.Limits.PublishRate = &v1alpha1.PublishRate{MessagesPerSecond: ptr.To[int64](500), MessagesBurst: ptr.To[int64](1000)}
		}
		if hasPublishers(j) {
			g := (j / 3) % size.Groups
			t.Spec.Publishers = &metav1.LabelSelector{MatchLabels: map[string]string{groupLabel: groupName(g)}}
			w.publishersOf[g] = append(w.publishersOf[g], t.Name)
		}
		w.topics = append(w.topics, t)
	}
	for m := range size.Subs {
		r, v := (m/10)%max(1, (size.Topics+9)/10), m%10
		var subject string
		switch v {
		case 0:
			subject = fmt.Sprintf("orders.r%d.*", r)
		case 1:
			subject = fmt.Sprintf("orders.r%d.*.created", r)
		case 2:
			subject = fmt.Sprintf("orders.r%d.c2.shipped", r)
		default:
			subject = fmt.Sprintf("orders.r%d.c%d.created", r, v)
		}
		g := m % size.Groups
		s := &v1alpha1.Subscription{
			ObjectMeta: metav1.ObjectMeta{Namespace: podNamespace, Name: subName(m)},
			Spec: v1alpha1.SubscriptionSpec{
				Subject:   v1alpha1.SubjectPattern(subject),
				Selector:  metav1.LabelSelector{MatchLabels: map[string]string{groupLabel: groupName(g)}},
				Essential: ptr.To(m%2 == 0),
			},
		}
		if v%3 == 0 {
			s.Spec.QueueGroup = fmt.Sprintf("workers-r%d", r)
		}
		if m%4 == 1 {
			s.Spec.Limits = v1alpha1.SubscriptionLimits{MaxPendingMessages: 1000, Overflow: v1alpha1.DropOldest}
		}
		w.subsOf[g] = append(w.subsOf[g], s.Name)
		w.subs = append(w.subs, s)
	}
	for g := range size.Groups {
		w.subsHash[g] = opproto.SubsHash(w.subsOf[g])
	}
	for i := range size.Pods {
		w.podGroup = append(w.podGroup, i/podsPerGroup)
		w.podNames = append(w.podNames, podName(i))
		w.sizes[i/podsPerGroup]++
	}
	return w
}

// holds reports whether a pod's sidecar state is what the world says it
// must hold: every Topic (all are in force) and its group's Subscriptions.
func (w *world) holds(pod int, st *podState) bool {
	w.mu.Lock()
	g := w.podGroup[pod]
	w.mu.Unlock()
	return st.version != "" && st.topics == len(w.topics) && st.subs == w.subsHash[g] && st.nsubs == len(w.subsOf[g])
}

func (w *world) group(pod int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.podGroup[pod]
}

func (w *world) setGroup(pod, g int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sizes[w.podGroup[pod]]--
	w.podGroup[pod] = g
	w.sizes[g]++
}

// addPod appends a pod of group g and returns its index.
func (w *world) addPod(name string, g int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.podGroup = append(w.podGroup, g)
	w.podNames = append(w.podNames, name)
	w.sizes[g]++
	return len(w.podGroup) - 1
}

func (w *world) podCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.podGroup)
}

// groupSize is how many pods are in group g now.
func (w *world) groupSize(g int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sizes[g]
}

func (w *world) podsOf(g int) []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int
	for i, pg := range w.podGroup {
		if pg == g {
			out = append(out, i)
		}
	}
	return out
}

// subGroup is the group Subscription name selects (-1: not one of the
// world's).
func (w *world) subGroup(name string) int {
	m, err := strconv.Atoi(strings.TrimPrefix(name, "s-"))
	if err != nil || m < 0 || m >= len(w.subs) {
		return -1
	}
	return m % w.size.Groups
}

// publisherGroup is the group a Topic's publishers select (-1: none).
func (w *world) publisherGroup(j int) int {
	if !hasPublishers(j) {
		return -1
	}
	return (j / 3) % w.size.Groups
}
