package xdsresource

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/meshconfig"
)

// Split turns one pod's configuration into its own resource (schema 2)
// and the shared resources it needs: its namespace's Topics (the members
// of the collection, every one, whether the pod may publish under it or
// not) and its Subscriptions. podUID goes into the pod's resource so that a
// sidecar of a re-created pod with the same name can tell.
func Split(cfg meshconfig.PodConfig, podUID string) (pod *xdsv1.Resource, shared map[string]*xdsv1.Resource) {
	shared = make(map[string]*xdsv1.Resource, len(cfg.Topics)+len(cfg.Subscriptions))
	for _, t := range cfg.Topics {
		shared[TopicName(cfg.Namespace, t.Name)] = TopicResource(t)
	}
	for _, s := range cfg.Subscriptions {
		shared[SubscriptionName(cfg.Namespace, s.Name)] = SubscriptionResource(s)
	}
	return PodResource(cfg, podUID), shared
}

// PodResource is the pod's own resource of Split, without the shared
// resources.
func PodResource(cfg meshconfig.PodConfig, podUID string) *xdsv1.Resource {
	own := OwnContent{Namespace: cfg.Namespace, Pod: cfg.Pod, UID: podUID, Default: cfg.Default, Access: cfg.Access}
	for _, t := range cfg.Topics {
		if !t.MayPublish {
			own.ExcludedTopics = append(own.ExcludedTopics, t.Name)
		}
	}
	for _, s := range cfg.Subscriptions {
		own.Subscriptions = append(own.Subscriptions, s.Name)
	}
	return BuildPodResource(own)
}

// OwnContent is what a pod's own resource (schema 2) is built from: what
// is particular to the pod, and nothing of its namespace's Topics but the
// names of those it may not publish under.
type OwnContent struct {
	Namespace, Pod, UID string
	Default             meshconfig.TopicPolicy
	Access              meshconfig.Access
	// ExcludedTopics are the names of the Topics whose publishers do not
	// select the pod.
	ExcludedTopics []string
	// Subscriptions are the names of the pod's Subscriptions, sorted.
	Subscriptions []string
}

// BuildPodResource is a pod's own resource in schema 2.
func BuildPodResource(in OwnContent) *xdsv1.Resource {
	return &xdsv1.Resource{SchemaVersion: SchemaVersion, Kind: &xdsv1.Resource_Pod{Pod: podPolicy(in)}}
}

// podPolicy is what a pod's own resource holds in either schema.
func podPolicy(in OwnContent) *xdsv1.PodPolicy {
	p := &xdsv1.PodPolicy{
		Namespace:      in.Namespace,
		Pod:            in.Pod,
		PodUid:         in.UID,
		DefaultTopic:   topicToProto(in.Default),
		Access:         &xdsv1.Access{Mode: in.Access.Mode, InboxPrefix: in.Access.InboxPrefix},
		ExcludedTopics: in.ExcludedTopics,
		Subscriptions:  make([]string, 0, len(in.Subscriptions)),
	}
	for _, s := range in.Subscriptions {
		p.Subscriptions = append(p.Subscriptions, SubscriptionName(in.Namespace, s))
	}
	return p
}

// TopicCollectionResource is the marker of a Topic collection.
func TopicCollectionResource(complete bool, members int) *xdsv1.Resource {
	return &xdsv1.Resource{SchemaVersion: SchemaVersion, Kind: &xdsv1.Resource_TopicCollection{
		TopicCollection: &xdsv1.TopicCollection{Complete: complete, Members: uint32(members)},
	}}
}

// PodContentV1 is what a pod's own resource of schema 1 is built from:
// the pod's own content (whose ExcludedTopics schema 1 does not carry: a
// Topic's refusal travels as its reference's subject) and the namespace's
// Topics.
type PodContentV1 struct {
	Own OwnContent
	// Topics are the namespace's Topics in force, sorted by subject.
	Topics []meshconfig.TopicPolicy
	// TopicNames, if set, are their resource names (TopicName), which the
	// namespace's pods may share instead of each holding its own copies.
	TopicNames []string
	// MayPublish says whether the pod may publish under Topics[i].
	MayPublish func(i int) bool
}

// BuildPodResourceV1 is a pod's own resource in schema 1, for the previous
// release's sidecars: the namespace's Topics with whether the pod may
// publish under each (the subject of those it may not), and its
// Subscriptions' names. The sidecar subscribes to each Topic it may
// publish under by name.
func BuildPodResourceV1(in PodContentV1) *xdsv1.Resource {
	own := in.Own
	own.ExcludedTopics = nil
	p := podPolicy(own)
	p.Topics = make([]*xdsv1.TopicRef, len(in.Topics))
	// One allocation for every reference of the pod, not one each.
	refs := make([]xdsv1.TopicRef, len(in.Topics))
	for i := range in.Topics {
		t := &in.Topics[i]
		ref := &refs[i]
		if in.TopicNames != nil {
			ref.Name = in.TopicNames[i]
		} else {
			ref.Name = TopicName(own.Namespace, t.Name)
		}
		if in.MayPublish(i) {
			ref.MayPublish = true
		} else {
			// Not the pod's Topic: its refusal travels with the pod.
			ref.Subject = t.Subject
		}
		p.Topics[i] = ref
	}
	return &xdsv1.Resource{SchemaVersion: PreviousSchemaVersion, Kind: &xdsv1.Resource_Pod{Pod: p}}
}

// TopicResource is a Topic's shared resource. Whether a pod may publish is
// the pod's own business, so it travels in the pod's resource instead.
func TopicResource(t meshconfig.TopicPolicy) *xdsv1.Resource {
	return &xdsv1.Resource{SchemaVersion: SharedSchemaVersion, Kind: &xdsv1.Resource_Topic{Topic: topicToProto(t)}}
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
	return &xdsv1.Resource{SchemaVersion: SharedSchemaVersion, Kind: &xdsv1.Resource_Subscription{Subscription: p}}
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

// Assemble rebuilds a pod's configuration from its own resource and the
// shared resources, by name: the members of its namespace's Topic
// collection among them, and the Subscriptions it names. See AssembleFrom.
func Assemble(pod *xdsv1.PodPolicy, shared map[string]*xdsv1.Resource) (cfg meshconfig.PodConfig, missing []string, err error) {
	prefix := TopicCollectionPrefix(pod.GetNamespace())
	var topics []*xdsv1.TopicPolicy
	for name, r := range shared {
		if strings.HasPrefix(name, prefix) && r.GetTopic() != nil {
			topics = append(topics, r.GetTopic())
		}
	}
	return AssembleFrom(pod, topics, func(name string) (*xdsv1.Resource, bool) { r, ok := shared[name]; return r, ok })
}

// AssembleFrom rebuilds a pod's configuration, as Compute built it (the
// same order, so the same content hash), from its own resource (schema
// 2), the Topics of its namespace's collection, and its Subscriptions'
// resources looked up by name. Every Topic applies to the pod but those
// its resource excludes, which refuse its publishes under the default
// policy. It returns the names it could not find instead of a
// configuration while any is missing.
func AssembleFrom(pod *xdsv1.PodPolicy, topics []*xdsv1.TopicPolicy, lookup func(name string) (*xdsv1.Resource, bool)) (cfg meshconfig.PodConfig, missing []string, err error) {
	cfg = meshconfig.PodConfig{
		Namespace:     pod.GetNamespace(),
		Pod:           pod.GetPod(),
		Topics:        make([]meshconfig.TopicPolicy, 0, len(topics)),
		Subscriptions: make([]meshconfig.SubscriptionPolicy, 0, len(pod.GetSubscriptions())),
		Access:        meshconfig.Access{Mode: pod.GetAccess().GetMode(), InboxPrefix: pod.GetAccess().GetInboxPrefix()},
	}
	if pod.GetDefaultTopic() == nil {
		return meshconfig.PodConfig{}, nil, fmt.Errorf("pod resource %s has no default topic policy", PodResourceName(pod.GetNamespace(), pod.GetPod()))
	}
	cfg.Default = topicFromProto(pod.GetDefaultTopic(), true)
	var excluded map[string]bool
	if names := pod.GetExcludedTopics(); len(names) > 0 {
		excluded = make(map[string]bool, len(names))
		for _, name := range names {
			excluded[name] = true
		}
	}
	for _, t := range topics {
		if excluded[t.GetName()] {
			// Not the pod's Topic: its publishes under the subject are
			// refused, under the default policy's limits.
			refused := cfg.Default
			refused.Name, refused.Subject, refused.MayPublish = t.GetName(), t.GetSubject(), false
			cfg.Topics = append(cfg.Topics, refused)
			continue
		}
		cfg.Topics = append(cfg.Topics, topicFromProto(t, true))
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
	// Topics given in order (a client that keeps them so) are not sorted
	// again: checking costs a comparison per Topic, sorting thousands of
	// them most of an assembly.
	bySubject := func(a, b meshconfig.TopicPolicy) int { return cmp.Compare(a.Subject, b.Subject) }
	if !slices.IsSortedFunc(cfg.Topics, bySubject) {
		slices.SortFunc(cfg.Topics, bySubject)
	}
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
	case *xdsv1.Resource_TopicCollection:
		holds = KindTopicCollection
	default:
		return nil, fmt.Errorf("resource %s holds no policy this sidecar knows (a newer schema?)", name)
	}
	if holds != parsed.Kind {
		return nil, fmt.Errorf("resource %s is named as a %s but holds a %s", name, parsed.Kind, holds)
	}
	// A pod's own resource and a collection's marker are of the schema
	// their name says; shared policies are read in any schema up to this
	// one (their messages did not change).
	want := func(v uint32) bool { return v == SchemaVersion }
	switch {
	case holds == KindPod && parsed.Schema == PreviousSchemaVersion:
		return nil, fmt.Errorf("resource %s is a pod resource of schema %d; this sidecar reads %s of schema %d", name, PreviousSchemaVersion, PodResourceName(parsed.Namespace, parsed.Name), SchemaVersion)
	case holds == KindTopic || holds == KindSubscription:
		want = func(v uint32) bool { return v >= SharedSchemaVersion && v <= SchemaVersion }
	}
	if v := res.GetSchemaVersion(); !want(v) {
		return nil, fmt.Errorf("resource %s has schema version %d; this sidecar understands %d only", name, v, SchemaVersion)
	}
	return &res, nil
}
