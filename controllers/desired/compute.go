package desired

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/meshconfig"
)

// Pod is what Compute needs to know of a pod.
type Pod struct {
	Namespace   string
	Name        string
	Labels      map[string]string
	Annotations map[string]string
	// AccessMode is the pod's access mode, from its namespace's
	// v1alpha1.AccessModeLabel or the operator's -access-mode; empty:
	// enforce.
	AccessMode string
}

// Compute returns the configuration of pod under the given Topics and
// Subscriptions. It ignores every resource outside the pod's namespace, so
// callers may pass more than they filtered. It is pure: same inputs, same
// output, same Version. It is NewView(...).Compute(pod, defaults); callers
// that configure many pods of one namespace keep the View.
//
// A Topic or Subscription with an invalid selector does not stop the
// others: its selector selects nothing (see Problem), and it is returned
// among the problems, which are the same for every pod of the namespace.
// Only the pod's own annotations can make Compute fail, for that pod alone.
func Compute(pod Pod, topics []v1alpha1.Topic, subscriptions []v1alpha1.Subscription, defaults meshconfig.Defaults) (meshconfig.PodConfig, []Problem, error) {
	return NewView(pod.Namespace, topics, subscriptions).Compute(pod, defaults)
}

// View is one namespace's Topics and Subscriptions prepared for Compute:
// selectors converted, conflicts resolved, policies built, once for all
// the namespace's pods. Configuring a pod then costs matching its labels
// and copying policies. A View is immutable, so pods' configurations may
// share what its policies point to; nobody modifies a PodConfig's policies.
type View struct {
	namespace string
	topics    []viewTopic // in force, sorted by subject
	subs      []viewSubscription
	problems  []Problem
	// exclusionKey is ExclusionKey's.
	exclusionKey uint64

	// internMu guards the exclusion sets ComputePart interns, the one
	// thing of a View that grows after NewView.
	internMu     sync.Mutex
	interned     map[uint64][][]string
	internedSets int
}

type viewTopic struct {
	policy     meshconfig.TopicPolicy // MayPublish set
	publishers labels.Selector        // nil: every pod may publish
}

type viewSubscription struct {
	policy   meshconfig.SubscriptionPolicy
	selector labels.Selector
}

// NewView prepares the resources of namespace among topics and
// subscriptions (others are ignored).
func NewView(namespace string, topics []v1alpha1.Topic, subscriptions []v1alpha1.Subscription) *View {
	v := &View{namespace: namespace}
	var mine []*v1alpha1.Topic
	// Each publishers selector is converted, shadowed Topics' too, so that
	// every invalid one is reported.
	publishers := map[string]labels.Selector{}
	for i := range topics {
		t := &topics[i]
		if t.Namespace != namespace {
			continue
		}
		mine = append(mine, t)
		sel, problem := publishersOf(t)
		if problem != nil {
			v.problems = append(v.problems, *problem)
		}
		if sel != nil {
			publishers[t.Name] = sel
		}
	}
	for _, t := range inForce(mine) {
		v.topics = append(v.topics, viewTopic{policy: topicPolicy(*t, true), publishers: publishers[t.Name]})
	}
	for i := range subscriptions {
		s := &subscriptions[i]
		if s.Namespace != namespace {
			continue
		}
		sel, problem := subscribersOf(s)
		if problem != nil {
			v.problems = append(v.problems, *problem)
		}
		v.subs = append(v.subs, viewSubscription{policy: SubscriptionPolicyOf(*s), selector: sel})
	}
	slices.SortFunc(v.problems, func(a, b Problem) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name)) })
	slices.SortFunc(v.topics, func(a, b viewTopic) int { return cmp.Compare(a.policy.Subject, b.policy.Subject) })
	slices.SortFunc(v.subs, func(a, b viewSubscription) int { return cmp.Compare(a.policy.Name, b.policy.Name) })
	v.exclusionKey = v.computeExclusionKey()
	return v
}

// Problems returns the invalid resources of the namespace, which select
// nothing.
func (v *View) Problems() []Problem { return slices.Clone(v.problems) }

// Compute returns the configuration of pod, which must be of the View's
// namespace, and the View's problems (see the package function Compute).
func (v *View) Compute(pod Pod, defaults meshconfig.Defaults) (meshconfig.PodConfig, []Problem, error) {
	part, problems, err := v.ComputePart(pod, defaults)
	if err != nil {
		return meshconfig.PodConfig{}, nil, err
	}
	cfg, err := Assemble(v.Topics(), part)
	if err != nil {
		return meshconfig.PodConfig{}, nil, err
	}
	return cfg, problems, nil
}

// ResolveConflicts returns the Topics in force and, for each Topic that
// shares its subject pattern with others, the names of those others. Equal
// patterns are the only equally specific ones (see
// matcher.CompareSpecificity); of each such group, the Topic whose name
// sorts first is in force, so the choice is deterministic.
func ResolveConflicts(topics []v1alpha1.Topic) (inForceTopics []v1alpha1.Topic, conflicts map[string][]string) {
	ptrs := make([]*v1alpha1.Topic, len(topics))
	for i := range topics {
		ptrs[i] = &topics[i]
	}
	sortBySubject(ptrs)
	conflicts = map[string][]string{}
	for _, group := range groupsBySubject(ptrs) {
		inForceTopics = append(inForceTopics, *group[0])
		if len(group) > 1 {
			for _, t := range group {
				for _, other := range group {
					if other.Name != t.Name {
						conflicts[t.Name] = append(conflicts[t.Name], other.Name)
					}
				}
			}
		}
	}
	return inForceTopics, conflicts
}

// inForce returns, of topics, the Topic in force for each pattern (see
// ResolveConflicts) without copying them.
func inForce(topics []*v1alpha1.Topic) []*v1alpha1.Topic {
	sorted := slices.Clone(topics)
	sortBySubject(sorted)
	var out []*v1alpha1.Topic
	for _, group := range groupsBySubject(sorted) {
		out = append(out, group[0])
	}
	return out
}

func sortBySubject(topics []*v1alpha1.Topic) {
	slices.SortFunc(topics, func(a, b *v1alpha1.Topic) int {
		return cmp.Or(cmp.Compare(a.Spec.Subject, b.Spec.Subject), cmp.Compare(a.Name, b.Name))
	})
}

// groupsBySubject splits topics, sorted by sortBySubject, into runs of one
// subject pattern.
func groupsBySubject(sorted []*v1alpha1.Topic) [][]*v1alpha1.Topic {
	var groups [][]*v1alpha1.Topic
	for i := 0; i < len(sorted); {
		j := i + 1
		for j < len(sorted) && sorted[j].Spec.Subject == sorted[i].Spec.Subject {
			j++
		}
		groups = append(groups, sorted[i:j])
		i = j
	}
	return groups
}

// SubscriptionPolicyOf is a Subscription's policy as sidecars enforce it.
func SubscriptionPolicyOf(s v1alpha1.Subscription) meshconfig.SubscriptionPolicy {
	p := meshconfig.SubscriptionPolicy{
		Name:       s.Name,
		Subject:    string(s.Spec.Subject),
		QueueGroup: s.Spec.QueueGroup,
		Essential:  s.Spec.IsEssential(),
		Limits: meshconfig.Limits{
			MaxPendingMessages: s.Spec.Limits.MaxPendingMessages,
			MaxPendingBytes:    s.Spec.Limits.MaxPendingBytes,
			Overflow:           string(s.Spec.Limits.Overflow),
		},
	}
	if ks := s.Spec.KillSwitch; ks != nil {
		p.KillSwitch = meshconfig.KillSwitch{Engaged: ks.Engaged, Reason: ks.Reason}
		if a := ks.Auto; a != nil {
			auto := &meshconfig.AutoKillSwitch{
				WindowMillis:   millis(a.Window),
				CooldownMillis: millis(a.Cooldown),
			}
			if a.MaxPendingMessages != nil {
				auto.MaxPendingMessages = *a.MaxPendingMessages
			}
			auto.MaxLatencyMillis = millis(a.MaxLatency)
			p.KillSwitch.Auto = auto
		}
	}
	return p
}

func topicPolicy(t v1alpha1.Topic, mayPublish bool) meshconfig.TopicPolicy {
	p := meshconfig.TopicPolicy{
		Name:            t.Name,
		Subject:         string(t.Spec.Subject),
		MaxMessageBytes: t.Spec.Limits.MaxMessageBytes,
		MayPublish:      mayPublish,
		StampHeader:     t.Spec.Latency.StampHeader == nil || *t.Spec.Latency.StampHeader,
	}
	if r := t.Spec.Limits.PublishRate; r != nil {
		p.PublishRate = meshconfig.RateOrNil(meshconfig.Rate{
			MessagesPerSecond: deref(r.MessagesPerSecond),
			MessagesBurst:     deref(r.MessagesBurst),
			BytesPerSecond:    deref(r.BytesPerSecond),
			BytesBurst:        deref(r.BytesBurst),
		})
	}
	return p
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func millis(d *metav1.Duration) int64 {
	if d == nil {
		return 0
	}
	return d.Milliseconds()
}

// accessOf reads the pod's access mode (its namespace's) and its inbox
// prefix annotation.
func accessOf(mode string, annotations map[string]string) (meshconfig.Access, error) {
	a := meshconfig.Access{Mode: meshconfig.AccessEnforce}
	switch mode {
	case "":
	case meshconfig.AccessEnforce, meshconfig.AccessAudit:
		a.Mode = mode
	default:
		return meshconfig.Access{}, fmt.Errorf("namespace label %s is %q: it must be %q or %q", v1alpha1.AccessModeLabel, mode, meshconfig.AccessEnforce, meshconfig.AccessAudit)
	}
	if prefix, ok := annotations[v1alpha1.InboxPrefixAnnotation]; ok {
		if err := meshconfig.ValidateInboxPrefix(prefix); err != nil {
			return meshconfig.Access{}, fmt.Errorf("annotation %s: %w", v1alpha1.InboxPrefixAnnotation, err)
		}
		a.InboxPrefix = prefix
	}
	return a, nil
}

// excludedFrom is a Topic (its policy) as a pod that its publishers
// selector excludes sees it: its subject, refused, under the default
// policy.
func excludedFrom(def, t meshconfig.TopicPolicy) meshconfig.TopicPolicy {
	def.Name, def.Subject, def.MayPublish = t.Name, t.Subject, false
	return def
}

// TopicPolicyOf is a Topic's policy as its shared xDS resource carries it:
// whether a pod may publish is the pod's own (MayPublish is left false).
func TopicPolicyOf(t v1alpha1.Topic) meshconfig.TopicPolicy { return topicPolicy(t, false) }

// namesSeed seeds fingerprintNames; fingerprints never leave the process.
var namesSeed = maphash.MakeSeed()

// fingerprintNames hashes a list of names, for interning.
func fingerprintNames(names []string) uint64 {
	var h maphash.Hash
	h.SetSeed(namesSeed)
	for _, n := range names {
		h.WriteString(n)
		h.WriteByte(0)
	}
	return h.Sum64()
}
