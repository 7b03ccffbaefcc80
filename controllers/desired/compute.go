package desired

import (
	"cmp"
	"fmt"
	"slices"

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
}

// Compute returns the configuration of pod under the given Topics and
// Subscriptions. It ignores every resource outside the pod's namespace, so
// callers may pass more than they filtered. It is pure: same inputs, same
// output, same Version.
//
// A Topic or Subscription with an invalid selector does not stop the
// others: its selector selects nothing (see Problem), and it is returned
// among the problems, which are the same for every pod of the namespace.
// Only the pod's own annotations can make Compute fail, for that pod alone.
func Compute(pod Pod, topics []v1alpha1.Topic, subscriptions []v1alpha1.Subscription, defaults meshconfig.Defaults) (meshconfig.PodConfig, []Problem, error) {
	podLabels := labels.Set(pod.Labels)
	cfg := meshconfig.DefaultConfig(defaults)
	cfg.Namespace, cfg.Pod = pod.Namespace, pod.Name
	access, err := accessOf(pod.Annotations)
	if err != nil {
		return meshconfig.PodConfig{}, nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	cfg.Access = access
	var problems []Problem
	topics = inNamespace(topics, pod.Namespace)
	// Each publishers selector is converted once, shadowed Topics' too, so
	// that every invalid one is reported.
	var publishers map[string]labels.Selector
	for i := range topics {
		sel, problem := publishersOf(&topics[i])
		if problem != nil {
			problems = append(problems, *problem)
		}
		if sel != nil {
			if publishers == nil {
				publishers = map[string]labels.Selector{}
			}
			publishers[topics[i].Name] = sel
		}
	}
	inForce, _ := ResolveConflicts(topics)
	for _, t := range inForce {
		if sel, restricted := publishers[t.Name]; restricted && !sel.Matches(podLabels) {
			// The Topic does not apply to this pod: only its refusal does
			// (in audit mode, the defaults' limits), so the pod's
			// configuration does not follow the Topic's limits.
			cfg.Topics = append(cfg.Topics, excludedFrom(cfg.Default, t))
			continue
		}
		cfg.Topics = append(cfg.Topics, topicPolicy(t, true))
	}
	for _, s := range inNamespace(subscriptions, pod.Namespace) {
		sel, problem := subscribersOf(&s)
		if problem != nil {
			problems = append(problems, *problem)
		}
		if sel.Matches(podLabels) {
			cfg.Subscriptions = append(cfg.Subscriptions, SubscriptionPolicyOf(s))
		}
	}
	slices.SortFunc(problems, func(a, b Problem) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name)) })
	slices.SortFunc(cfg.Topics, func(a, b meshconfig.TopicPolicy) int { return cmp.Compare(a.Subject, b.Subject) })
	slices.SortFunc(cfg.Subscriptions, func(a, b meshconfig.SubscriptionPolicy) int { return cmp.Compare(a.Name, b.Name) })
	version, err := meshconfig.Hash(cfg)
	if err != nil {
		return meshconfig.PodConfig{}, nil, err
	}
	cfg.Version = version
	return cfg, problems, nil
}

// ResolveConflicts returns the Topics in force and, for each Topic that
// shares its subject pattern with others, the names of those others. Equal
// patterns are the only equally specific ones (see
// matcher.CompareSpecificity); of each such group, the Topic whose name
// sorts first is in force, so the choice is deterministic.
func ResolveConflicts(topics []v1alpha1.Topic) (inForce []v1alpha1.Topic, conflicts map[string][]string) {
	sorted := slices.Clone(topics)
	slices.SortFunc(sorted, func(a, b v1alpha1.Topic) int {
		return cmp.Or(cmp.Compare(a.Spec.Subject, b.Spec.Subject), cmp.Compare(a.Name, b.Name))
	})
	conflicts = map[string][]string{}
	for i := 0; i < len(sorted); {
		j := i + 1
		for j < len(sorted) && sorted[j].Spec.Subject == sorted[i].Spec.Subject {
			j++
		}
		inForce = append(inForce, sorted[i])
		if j-i > 1 {
			for _, t := range sorted[i:j] {
				for _, other := range sorted[i:j] {
					if other.Name != t.Name {
						conflicts[t.Name] = append(conflicts[t.Name], other.Name)
					}
				}
			}
		}
		i = j
	}
	return inForce, conflicts
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

func inNamespace[T any, P interface {
	*T
	GetNamespace() string
}](items []T, namespace string) []T {
	var out []T
	for i := range items {
		if P(&items[i]).GetNamespace() == namespace {
			out = append(out, items[i])
		}
	}
	return out
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

// accessOf reads the pod's access annotations.
func accessOf(annotations map[string]string) (meshconfig.Access, error) {
	a := meshconfig.Access{Mode: meshconfig.AccessEnforce}
	if mode, ok := annotations[v1alpha1.AccessModeAnnotation]; ok {
		if mode != meshconfig.AccessEnforce && mode != meshconfig.AccessAudit {
			return meshconfig.Access{}, fmt.Errorf("annotation %s is %q: it must be %q or %q", v1alpha1.AccessModeAnnotation, mode, meshconfig.AccessEnforce, meshconfig.AccessAudit)
		}
		a.Mode = mode
	}
	if prefix, ok := annotations[v1alpha1.InboxPrefixAnnotation]; ok {
		if err := meshconfig.ValidateInboxPrefix(prefix); err != nil {
			return meshconfig.Access{}, fmt.Errorf("annotation %s: %w", v1alpha1.InboxPrefixAnnotation, err)
		}
		a.InboxPrefix = prefix
	}
	return a, nil
}

// excludedFrom is a Topic as a pod that its publishers selector excludes
// sees it: its subject, refused, under the default policy.
func excludedFrom(def meshconfig.TopicPolicy, t v1alpha1.Topic) meshconfig.TopicPolicy {
	def.Name, def.Subject, def.MayPublish = t.Name, string(t.Spec.Subject), false
	return def
}

// TopicPolicyOf is a Topic's policy as its shared xDS resource carries it:
// whether a pod may publish is the pod's own (MayPublish is left false).
func TopicPolicyOf(t v1alpha1.Topic) meshconfig.TopicPolicy { return topicPolicy(t, false) }
