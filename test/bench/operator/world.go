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
	"github.com/weighstation/weighstation/test/bench/operator/opproto"
)

// podsPerGroup is how many pods each Subscription and each publishers
// selector selects: pods carry `group: g<k>`, ten to a group.
const podsPerGroup = 10

// worldSize describes one world: its namespaces, each laid out alike
// (newWorld), the order it is created in, and its own targets.
type worldSize struct {
	Name string
	// Namespaces is how many namespaces; Pods, Topics and Subs are per
	// namespace. One namespace is podNamespace ("bench"); more are
	// bench-000, bench-001, ...
	Namespaces           int
	Pods, Topics, Subs   int
	Scale                float64
	FullPods, FullTopics int
	FullSubs             int
	Groups               int // per namespace
	// ObjectsFirst creates the Topics and Subscriptions before the pods,
	// and starts the sidecars together after the last pod: Ready then
	// covers every sidecar's connection and TokenReview, as when a
	// cluster's mesh comes up (or every sidecar reconnects to a new
	// leader). Otherwise the pods and their sidecars come first and
	// Ready covers the Topics and Subscriptions (issue 11's worlds).
	ObjectsFirst bool
	// StreamsPerConn is how many simulated sidecars share one gRPC
	// connection (-streams-per-conn overrides it; 0: one each, as pods
	// have). The cluster world's 10,000 connections, all opening at once,
	// did not fit beside the operator and the apiserver on two cores (the
	// TLS handshakes outlasted the sidecars' 5 s dial timeout, and they
	// all dialed again: 1,700 of 10,000 configured after 3 minutes). So
	// 10 sidecars share a connection, each on its own stream with its own
	// token, from the connection's own address; each connection stands
	// for 10 pods, so the bench gives the operator 10 pods' per-peer
	// TokenReview limit (sharedConnArgs), and 10 streams are within its
	// -xds-max-concurrent-streams (16).
	StreamsPerConn int
	// MinRuns raises -repeats for a kind of change (changeKinds' names):
	// a percentile needs enough of them.
	MinRuns map[string]int

	// Source is where the world's own targets come from, for the
	// report ("": issue 11's, which every world has).
	Source string
	// The world's own targets (zero: none).
	ReadySeconds           float64 // Ready after the last create
	PeakRSSMiB             float64 // the operator's peak RSS, the whole run
	KillSwitchCPUMillis    float64 // net operator CPU of a kill switch (median)
	KillSwitchACKP99Millis float64 // a kill switch's last ACK, p99 over the runs
	PodCreateCPUMillis     float64 // net operator CPU of a pod create (median)
	// ReviewRate is the -xds-tokenreview-rate the bench gives the
	// operator when its default alone (xds.DefaultReviewLimits) would
	// keep the world's sidecars from Ready within ReadySeconds (0: the
	// default, always).
	ReviewRate float64
}

var worldSizes = map[string]worldSize{
	"small": {Name: "small", Namespaces: 1, Pods: 200, Topics: 300, Subs: 300, ReadySeconds: 5, KillSwitchCPUMillis: 100},
	"large": {Name: "large", Namespaces: 1, Pods: 2000, Topics: 3000, Subs: 3000},
	// Issue 31's cluster: 100 namespaces shaped like the small world,
	// scaled down (10 groups, 3 Subscriptions per group, 10 Topics with a
	// publishers selector), 10,000 sidecars in all.
	"cluster": {Name: "cluster", Namespaces: 100, Pods: 100, Topics: 30, Subs: 30, ObjectsFirst: true, Source: "issue 31, must-show 2", StreamsPerConn: 10,
		MinRuns:      map[string]int{"killswitch": 20},
		ReadySeconds: 60, PeakRSSMiB: 460, KillSwitchACKP99Millis: 300, PodCreateCPUMillis: 20,
		ReviewRate: 1000},
}

// worldNames are the worlds in the order -world's default runs them.
var worldNames = []string{"small", "large", "cluster"}

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

// totalPods is how many pods (and sidecars) the world starts with.
func (w worldSize) totalPods() int { return w.Namespaces * w.Pods }

// world is the model of the world's namespaces: what the bench created,
// and what each pod's sidecar must hold. Every namespace has the same
// Topics and Subscriptions (topics and subs, without a namespace) and
// the same groups.
type world struct {
	size       worldSize
	namespaces []string
	nsIndex    map[string]int
	topics     []*v1alpha1.Topic
	subs       []*v1alpha1.Subscription

	mu sync.Mutex
	// podNS and podGroup are each pod's namespace (an index of
	// namespaces) and group, by index (pods created by the changes are
	// appended).
	podNS    []int
	podGroup []int
	podNames []string
	pods     []opproto.Pod
	// subsOf and publishersOf are, per group, the Subscriptions that
	// select it and the Topics whose publishers select it (in its
	// namespace).
	subsOf, publishersOf map[int][]string
	subsHash             map[int]uint64
	sizes                map[nsGroup]int
}

// nsGroup is one group of one namespace.
type nsGroup struct{ ns, g int }

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
	w := &world{size: size, nsIndex: map[string]int{}, subsOf: map[int][]string{}, publishersOf: map[int][]string{}, subsHash: map[int]uint64{}, sizes: map[nsGroup]int{}}
	for n := range size.Namespaces {
		ns := podNamespace
		if size.Namespaces > 1 {
			ns = fmt.Sprintf("%s-%03d", podNamespace, n)
		}
		w.namespaces = append(w.namespaces, ns)
		w.nsIndex[ns] = n
	}
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
			ObjectMeta: metav1.ObjectMeta{Name: topicName(j)},
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
			ObjectMeta: metav1.ObjectMeta{Name: subName(m)},
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
	// Pod i is in namespace i / Pods; the names run on across namespaces.
	for i := range size.totalPods() {
		n, g := i/size.Pods, (i%size.Pods)/podsPerGroup
		w.podNS = append(w.podNS, n)
		w.podGroup = append(w.podGroup, g)
		w.podNames = append(w.podNames, podName(i))
		w.sizes[nsGroup{n, g}]++
	}
	return w
}

// holds reports whether a pod's sidecar state is what the world says it
// must hold: every Topic of its namespace (all are in force) and its
// group's Subscriptions.
func (w *world) holds(pod int, st *podState) bool {
	w.mu.Lock()
	g := w.podGroup[pod]
	w.mu.Unlock()
	return st.version != "" && st.topics == len(w.topics) && st.subs == w.subsHash[g] && st.nsubs == len(w.subsOf[g])
}

// group is pod's group, in its namespace.
func (w *world) group(pod int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.podGroup[pod]
}

// namespaceOf is pod's namespace, as an index of namespaces.
func (w *world) namespaceOf(pod int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.podNS[pod]
}

func (w *world) setGroup(pod, g int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.podNS[pod]
	w.sizes[nsGroup{n, w.podGroup[pod]}]--
	w.podGroup[pod] = g
	w.sizes[nsGroup{n, g}]++
}

// addPod appends a pod of group g in namespace n and returns its index.
func (w *world) addPod(name string, n, g int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.podNS = append(w.podNS, n)
	w.podGroup = append(w.podGroup, g)
	w.podNames = append(w.podNames, name)
	w.sizes[nsGroup{n, g}]++
	return len(w.podGroup) - 1
}

func (w *world) podCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.podGroup)
}

// groupSize is how many pods are in group g of namespace n now.
func (w *world) groupSize(n, g int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sizes[nsGroup{n, g}]
}

// podsOf is the pods of group g of namespace n; g < 0: all of n's pods.
func (w *world) podsOf(n, g int) []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int
	for i, pg := range w.podGroup {
		if w.podNS[i] == n && (g < 0 || pg == g) {
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

// counted is how many objects report pods, whose Ready makes the world's:
// every Subscription and every Topic with a publishers selector.
func (w *world) counted() int {
	return w.size.Namespaces * (len(w.subs) + (len(w.topics)+2)/3)
}

// watchNamespace is the namespace the bench watches ("": all).
func (w *world) watchNamespace() string {
	if len(w.namespaces) == 1 {
		return w.namespaces[0]
	}
	return ""
}

// objKey names a Topic or Subscription (kind "topic" or "subscription")
// in the status writes: kind/name in a world of one namespace,
// kind/namespace/name otherwise.
func (w *world) objKey(kind, ns, name string) string {
	if len(w.namespaces) == 1 {
		return kind + "/" + name
	}
	return kind + "/" + ns + "/" + name
}

// qualified names an object for the progress lines: its name in a world
// of one namespace, namespace/name otherwise.
func (w *world) qualified(ns, name string) string {
	if len(w.namespaces) == 1 {
		return name
	}
	return ns + "/" + name
}
