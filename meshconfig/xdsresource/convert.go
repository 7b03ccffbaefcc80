package xdsresource

import (
	"cmp"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/meshconfig"
)

// Split turns one pod's configuration into its own resource and the shared
// resources it names. podUID goes into the pod's resource so that a sidecar
// of a re-created pod with the same name can tell.
func Split(cfg meshconfig.PodConfig, podUID string) (pod *xdsv1.Resource, shared map[string]*xdsv1.Resource) {
	shared = make(map[string]*xdsv1.Resource, len(cfg.Topics)+len(cfg.Subscriptions))
	for _, t := range cfg.Topics {
		if t.MayPublish {
			shared[TopicName(cfg.Namespace, t.Name)] = TopicResource(t)
		}
	}
	for _, s := range cfg.Subscriptions {
		shared[SubscriptionName(cfg.Namespace, s.Name)] = SubscriptionResource(s)
	}
	return PodResource(cfg, podUID), shared
}

// PodResource is the pod's own resource of Split, without the shared
// resources.
func PodResource(cfg meshconfig.PodConfig, podUID string) *xdsv1.Resource {
	in := PodContent{
		Namespace: cfg.Namespace, Pod: cfg.Pod, UID: podUID, Default: cfg.Default, Access: cfg.Access,
		Topics:        cfg.Topics,
		MayPublish:    func(i int) bool { return cfg.Topics[i].MayPublish },
		Subscriptions: make([]string, 0, len(cfg.Subscriptions)),
	}
	for _, s := range cfg.Subscriptions {
		in.Subscriptions = append(in.Subscriptions, s.Name)
	}
	return BuildPodResource(in)
}

// PodContent is what a pod's own resource is built from.
type PodContent struct {
	Namespace, Pod, UID string
	Default             meshconfig.TopicPolicy
	Access              meshconfig.Access
	// Topics are the namespace's Topics in force, sorted by subject.
	Topics []meshconfig.TopicPolicy
	// TopicNames, if set, are their resource names (TopicName), which the
	// namespace's pods may share instead of each holding its own copies.
	TopicNames []string
	// MayPublish says whether the pod may publish under Topics[i].
	MayPublish func(i int) bool
	// Subscriptions are the names of the pod's Subscriptions, sorted.
	Subscriptions []string
}

// BuildPodResource is a pod's own resource: the namespace's Topics with
// whether the pod may publish under each (the subject of those it may
// not), and its Subscriptions' names.
func BuildPodResource(in PodContent) *xdsv1.Resource {
	p := &xdsv1.PodPolicy{
		Namespace:     in.Namespace,
		Pod:           in.Pod,
		PodUid:        in.UID,
		DefaultTopic:  topicToProto(in.Default),
		Access:        &xdsv1.Access{Mode: in.Access.Mode, InboxPrefix: in.Access.InboxPrefix},
		Topics:        make([]*xdsv1.TopicRef, len(in.Topics)),
		Subscriptions: make([]string, 0, len(in.Subscriptions)),
	}
	// One allocation for every reference of the pod, not one each.
	refs := make([]xdsv1.TopicRef, len(in.Topics))
	for i := range in.Topics {
		t := &in.Topics[i]
		ref := &refs[i]
		if in.TopicNames != nil {
			ref.Name = in.TopicNames[i]
		} else {
			ref.Name = TopicName(in.Namespace, t.Name)
		}
		if in.MayPublish(i) {
			ref.MayPublish = true
		} else {
			// Not the pod's Topic: its refusal travels with the pod.
			ref.Subject = t.Subject
		}
		p.Topics[i] = ref
	}
	for _, s := range in.Subscriptions {
		p.Subscriptions = append(p.Subscriptions, SubscriptionName(in.Namespace, s))
	}
	return &xdsv1.Resource{SchemaVersion: SchemaVersion, Kind: &xdsv1.Resource_Pod{Pod: p}}
}

// TopicResource is a Topic's shared resource. Whether a pod may publish is
// the pod's own business, so it travels in the pod's TopicRef instead.
func TopicResource(t meshconfig.TopicPolicy) *xdsv1.Resource {
	return &xdsv1.Resource{SchemaVersion: SchemaVersion, Kind: &xdsv1.Resource_Topic{Topic: topicToProto(t)}}
}

// SubscriptionResource is a Subscription's shared resource.
func SubscriptionResource(s meshconfig.SubscriptionPolicy) *xdsv1.Resource {
	p := &xdsv1.SubscriptionPolicy{
		Name:       s.Name,
		Subject:    s.Subject,
		QueueGroup: s.QueueGroup,
		Essential:  s.Essential,
		KillSwitch: &xdsv1.KillSwitch{Engaged: s.KillSwitch.Engaged, Reason: s.KillSwitch.Reason},
		Limits: &xdsv1.Limits{
			MaxPendingMessages: s.Limits.MaxPendingMessages,
			MaxPendingBytes:    s.Limits.MaxPendingBytes,
			Overflow:           s.Limits.Overflow,
		},
	}
	if a := s.KillSwitch.Auto; a != nil {
		p.KillSwitch.Auto = &xdsv1.AutoKillSwitch{
			MaxPendingMessages: a.MaxPendingMessages,
			MaxLatencyMillis:   a.MaxLatencyMillis,
			WindowMillis:       a.WindowMillis,
			CooldownMillis:     a.CooldownMillis,
		}
	}
	return &xdsv1.Resource{SchemaVersion: SchemaVersion, Kind: &xdsv1.Resource_Subscription{Subscription: p}}
}

func topicToProto(t meshconfig.TopicPolicy) *xdsv1.TopicPolicy {
	p := &xdsv1.TopicPolicy{Name: t.Name, Subject: t.Subject, MaxMessageBytes: t.MaxMessageBytes, StampHeader: t.StampHeader}
	if r := t.PublishRate; r != nil {
		p.PublishRate = &xdsv1.Rate{MessagesPerSecond: r.MessagesPerSecond, MessagesBurst: r.MessagesBurst, BytesPerSecond: r.BytesPerSecond, BytesBurst: r.BytesBurst}
	}
	return p
}

func topicFromProto(p *xdsv1.TopicPolicy, mayPublish bool) meshconfig.TopicPolicy {
	t := meshconfig.TopicPolicy{Name: p.GetName(), Subject: p.GetSubject(), MaxMessageBytes: p.GetMaxMessageBytes(), StampHeader: p.GetStampHeader(), MayPublish: mayPublish}
	if r := p.GetPublishRate(); r != nil {
		t.PublishRate = meshconfig.RateOrNil(meshconfig.Rate{MessagesPerSecond: r.GetMessagesPerSecond(), MessagesBurst: r.GetMessagesBurst(), BytesPerSecond: r.GetBytesPerSecond(), BytesBurst: r.GetBytesBurst()})
	}
	return t
}

func subscriptionFromProto(p *xdsv1.SubscriptionPolicy) meshconfig.SubscriptionPolicy {
	s := meshconfig.SubscriptionPolicy{
		Name:       p.GetName(),
		Subject:    p.GetSubject(),
		QueueGroup: p.GetQueueGroup(),
		Essential:  p.GetEssential(),
		KillSwitch: meshconfig.KillSwitch{Engaged: p.GetKillSwitch().GetEngaged(), Reason: p.GetKillSwitch().GetReason()},
		Limits: meshconfig.Limits{
			MaxPendingMessages: p.GetLimits().GetMaxPendingMessages(),
			MaxPendingBytes:    p.GetLimits().GetMaxPendingBytes(),
			Overflow:           p.GetLimits().GetOverflow(),
		},
	}
	if a := p.GetKillSwitch().GetAuto(); a != nil {
		s.KillSwitch.Auto = &meshconfig.AutoKillSwitch{
			MaxPendingMessages: a.GetMaxPendingMessages(),
			MaxLatencyMillis:   a.GetMaxLatencyMillis(),
			WindowMillis:       a.GetWindowMillis(),
			CooldownMillis:     a.GetCooldownMillis(),
		}
	}
	return s
}

// Refs lists the shared resources a pod's resource needs: the Topics it
// may publish under and its Subscriptions.
func Refs(pod *xdsv1.PodPolicy) []string {
	refs := make([]string, 0, len(pod.GetTopics())+len(pod.GetSubscriptions()))
	for _, t := range pod.GetTopics() {
		if t.GetMayPublish() {
			refs = append(refs, t.GetName())
		}
	}
	return append(refs, pod.GetSubscriptions()...)
}

// Assemble rebuilds a pod's configuration from its own resource and the
// shared resources it names, as Compute built it: the same order, so the
// same content hash. It returns the names it could not find in shared
// instead of a configuration while any is missing.
func Assemble(pod *xdsv1.PodPolicy, shared map[string]*xdsv1.Resource) (cfg meshconfig.PodConfig, missing []string, err error) {
	return AssembleFrom(pod, func(name string) (*xdsv1.Resource, bool) { r, ok := shared[name]; return r, ok })
}

// AssembleFrom is Assemble with the shared resources looked up by name, so
// that a client holding them in a map of its own need not copy it.
func AssembleFrom(pod *xdsv1.PodPolicy, lookup func(name string) (*xdsv1.Resource, bool)) (cfg meshconfig.PodConfig, missing []string, err error) {
	cfg = meshconfig.PodConfig{
		Namespace:     pod.GetNamespace(),
		Pod:           pod.GetPod(),
		Topics:        make([]meshconfig.TopicPolicy, 0, len(pod.GetTopics())),
		Subscriptions: make([]meshconfig.SubscriptionPolicy, 0, len(pod.GetSubscriptions())),
		Access:        meshconfig.Access{Mode: pod.GetAccess().GetMode(), InboxPrefix: pod.GetAccess().GetInboxPrefix()},
	}
	if pod.GetDefaultTopic() == nil {
		return meshconfig.PodConfig{}, nil, fmt.Errorf("pod resource %s has no default topic policy", PodName(pod.GetNamespace(), pod.GetPod()))
	}
	cfg.Default = topicFromProto(pod.GetDefaultTopic(), true)
	for _, ref := range pod.GetTopics() {
		if !ref.GetMayPublish() {
			parsed, err := ParseName(ref.GetName())
			if err != nil || parsed.Kind != KindTopic {
				return meshconfig.PodConfig{}, nil, fmt.Errorf("pod resource %s: topic reference %q is not a topic's name", PodName(pod.GetNamespace(), pod.GetPod()), ref.GetName())
			}
			excluded := cfg.Default
			excluded.Name, excluded.Subject, excluded.MayPublish = parsed.Name, ref.GetSubject(), false
			cfg.Topics = append(cfg.Topics, excluded)
			continue
		}
		res, ok := lookup(ref.GetName())
		if !ok {
			missing = append(missing, ref.GetName())
			continue
		}
		t := res.GetTopic()
		if t == nil {
			return meshconfig.PodConfig{}, nil, fmt.Errorf("resource %s holds no topic policy", ref.GetName())
		}
		cfg.Topics = append(cfg.Topics, topicFromProto(t, ref.GetMayPublish()))
	}
	for _, name := range pod.GetSubscriptions() {
		res, ok := lookup(name)
		if !ok {
			missing = append(missing, name)
			continue
		}
		s := res.GetSubscription()
		if s == nil {
			return meshconfig.PodConfig{}, nil, fmt.Errorf("resource %s holds no subscription policy", name)
		}
		cfg.Subscriptions = append(cfg.Subscriptions, subscriptionFromProto(s))
	}
	if len(missing) > 0 {
		return meshconfig.PodConfig{}, missing, nil
	}
	slices.SortFunc(cfg.Topics, func(a, b meshconfig.TopicPolicy) int { return cmp.Compare(a.Subject, b.Subject) })
	slices.SortFunc(cfg.Subscriptions, func(a, b meshconfig.SubscriptionPolicy) int { return cmp.Compare(a.Name, b.Name) })
	if cfg.Version, err = meshconfig.Hash(cfg); err != nil {
		return meshconfig.PodConfig{}, nil, err
	}
	return cfg, nil, nil
}

// Decode checks and decodes one resource received as name and body: its
// type, its schema version, and that the message it holds is the kind its
// name says. A sidecar NACKs what this refuses.
func Decode(name string, body *anypb.Any) (*xdsv1.Resource, error) {
	if body.GetTypeUrl() != TypeURL {
		return nil, fmt.Errorf("resource %s has type %q, not %q", name, body.GetTypeUrl(), TypeURL)
	}
	var res xdsv1.Resource
	if err := proto.Unmarshal(body.GetValue(), &res); err != nil {
		return nil, fmt.Errorf("decoding resource %s: %w", name, err)
	}
	if res.GetSchemaVersion() != SchemaVersion {
		return nil, fmt.Errorf("resource %s has schema version %d; this sidecar understands %d only", name, res.GetSchemaVersion(), SchemaVersion)
	}
	parsed, err := ParseName(name)
	if err != nil {
		return nil, err
	}
	var holds Kind
	switch res.GetKind().(type) {
	case *xdsv1.Resource_Pod:
		holds = KindPod
	case *xdsv1.Resource_Topic:
		holds = KindTopic
	case *xdsv1.Resource_Subscription:
		holds = KindSubscription
	default:
		return nil, fmt.Errorf("resource %s holds no policy this sidecar knows (a newer schema?)", name)
	}
	if holds != parsed.Kind {
		return nil, fmt.Errorf("resource %s is named as a %s but holds a %s", name, parsed.Kind, holds)
	}
	return &res, nil
}
