package desired

import (
	"fmt"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/weighstation/weighstation/meshconfig"
)

// PodPart is what is particular to one pod of a pod's configuration: the
// rest, the namespace's Topics, is the same for every pod of the namespace
// and is kept once (Store.SetTopics), so that what the operator holds grows
// with pods + Topics, not pods × Topics, and a change of one Topic's limits
// touches no pod.
type PodPart struct {
	Namespace string
	Pod       string
	// Default governs subjects no Topic matches.
	Default meshconfig.TopicPolicy
	Access  meshconfig.Access
	// Excluded names the Topics whose publishers selector leaves this pod
	// out, sorted. Pods that the selectors treat alike share one slice (a
	// View interns them), so this costs a pointer per pod, not a list.
	Excluded []string
	// Subscriptions are those whose selector matches the pod, sorted by
	// name.
	Subscriptions []meshconfig.SubscriptionPolicy
}

// Equal reports whether two parts configure a pod alike.
func (p PodPart) Equal(o PodPart) bool {
	return p.Namespace == o.Namespace && p.Pod == o.Pod && p.Default.Equal(o.Default) && p.Access == o.Access &&
		slices.Equal(p.Excluded, o.Excluded) &&
		slices.EqualFunc(p.Subscriptions, o.Subscriptions, meshconfig.SubscriptionPolicy.Equal)
}

// Excludes reports whether the Topic named topic leaves the pod out.
func (p PodPart) Excludes(topic string) bool {
	_, found := slices.BinarySearch(p.Excluded, topic)
	return found
}

// Assemble is the pod's whole configuration under the namespace's Topics
// (in force, sorted by subject, as View.Topics returns them), versioned:
// what Compute returns for the pod. It allocates a policy per Topic, so
// the operator calls it only where a whole configuration is needed (a
// broker credential's bound, tests), never per change.
func Assemble(topics []meshconfig.TopicPolicy, part PodPart) (meshconfig.PodConfig, error) {
	cfg := meshconfig.PodConfig{
		Namespace:     part.Namespace,
		Pod:           part.Pod,
		Default:       part.Default,
		Access:        part.Access,
		Topics:        make([]meshconfig.TopicPolicy, 0, len(topics)),
		Subscriptions: part.Subscriptions,
	}
	if cfg.Subscriptions == nil {
		cfg.Subscriptions = []meshconfig.SubscriptionPolicy{}
	}
	for _, t := range topics {
		t.MayPublish = true
		if part.Excludes(t.Name) {
			t = excludedFrom(part.Default, t)
		}
		cfg.Topics = append(cfg.Topics, t)
	}
	version, err := meshconfig.Hash(cfg)
	if err != nil {
		return meshconfig.PodConfig{}, fmt.Errorf("pod %s/%s: %w", part.Namespace, part.Pod, err)
	}
	cfg.Version = version
	return cfg, nil
}

// Topics returns the namespace's Topics in force, sorted by subject, each
// with MayPublish set: whether a pod may publish is its PodPart's.
func (v *View) Topics() []meshconfig.TopicPolicy {
	out := make([]meshconfig.TopicPolicy, len(v.topics))
	for i, t := range v.topics {
		out[i] = t.policy
	}
	return out
}

// Empty reports whether the namespace has no Topic in force and no
// Subscription.
func (v *View) Empty() bool { return len(v.topics) == 0 && len(v.subs) == 0 }

// ExclusionKey identifies what decides the pods' exclusions under the
// View: its Topics in force that have publishers, and their selectors.
// Two Views with the same key exclude every pod alike, so a change of
// Topics that keeps it needs no pod computed again.
func (v *View) ExclusionKey() uint64 { return v.exclusionKey }

func (v *View) computeExclusionKey() uint64 {
	var names []string
	for _, t := range v.topics {
		if t.publishers != nil {
			// labels.Everything() (publishers: {}) and labels.Nothing() (an
			// invalid selector) both print "": Empty tells them apart.
			names = append(names, t.policy.Name, t.publishers.String(), strconv.FormatBool(t.publishers.Empty()))
		}
	}
	return fingerprintNames(names)
}

// ComputePart returns what is particular to pod under the View (see
// Compute, which is Assemble(v.Topics(), part)). It costs a selector match
// per Topic with publishers and per Subscription, and allocates nothing
// per Topic: pods excluded alike share their Excluded slice.
func (v *View) ComputePart(pod Pod, defaults meshconfig.Defaults) (PodPart, []Problem, error) {
	if pod.Namespace != v.namespace {
		return PodPart{}, nil, fmt.Errorf("pod %s/%s is not of namespace %s", pod.Namespace, pod.Name, v.namespace)
	}
	access, err := accessOf(pod.AccessMode, pod.Annotations)
	if err != nil {
		return PodPart{}, nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	podLabels := labels.Set(pod.Labels)
	part := PodPart{
		Namespace: pod.Namespace,
		Pod:       pod.Name,
		Default:   meshconfig.DefaultConfig(defaults).Default,
		Access:    access,
	}
	var excluded []string
	for _, t := range v.topics {
		if t.publishers != nil && !t.publishers.Matches(podLabels) {
			excluded = append(excluded, t.policy.Name)
		}
	}
	part.Excluded = v.intern(excluded)
	for _, s := range v.subs {
		if s.selector.Matches(podLabels) {
			part.Subscriptions = append(part.Subscriptions, s.policy)
		}
	}
	return part, v.Problems(), nil
}

// maxInternedSets bounds the exclusion sets a View keeps: past it, a pod
// gets its own slice (correct, only larger). Distinct sets come from
// distinct label combinations that the publishers selectors tell apart,
// which a namespace's editors control: the bound keeps a hostile one from
// growing the operator without limit through one View.
const maxInternedSets = 4096

// intern returns the View's copy of an exclusion set (sorted), so that pods
// excluded alike share one slice.
func (v *View) intern(excluded []string) []string {
	if len(excluded) == 0 {
		return nil
	}
	slices.Sort(excluded)
	key := fingerprintNames(excluded)
	v.internMu.Lock()
	defer v.internMu.Unlock()
	for _, candidate := range v.interned[key] {
		if slices.Equal(candidate, excluded) {
			return candidate
		}
	}
	if v.internedSets >= maxInternedSets {
		return excluded
	}
	if v.interned == nil {
		v.interned = map[uint64][][]string{}
	}
	v.interned[key] = append(v.interned[key], excluded)
	v.internedSets++
	return excluded
}

// Split is Assemble's inverse: a whole configuration as its namespace's
// Topics and the pod's part. A Topic the pod may not publish under keeps
// only its name and subject, which is all Assemble reads of it then.
func Split(cfg meshconfig.PodConfig) ([]meshconfig.TopicPolicy, PodPart) {
	part := PodPart{Namespace: cfg.Namespace, Pod: cfg.Pod, Default: cfg.Default, Access: cfg.Access, Subscriptions: cfg.Subscriptions}
	topics := make([]meshconfig.TopicPolicy, 0, len(cfg.Topics))
	for _, t := range cfg.Topics {
		if !t.MayPublish {
			part.Excluded = append(part.Excluded, t.Name)
			t = meshconfig.TopicPolicy{Name: t.Name, Subject: t.Subject, MaxMessageBytes: cfg.Default.MaxMessageBytes}
		}
		t.MayPublish = true
		topics = append(topics, t)
	}
	slices.Sort(part.Excluded)
	return topics, part
}
