// Package xdsresource is weighstation's xDS wire protocol, shared by the
// operator's xDS server and the sidecar's client: the one resource type,
// how resources are named, and the conversion between meshconfig's types
// and the generated messages of api/xds/v1.
//
// Schema version 2: a pod's configuration travels as its own resource
// (<namespace>/pod/<pod>: its UID, access, default policy, the Topics it
// may not publish under and the names of its Subscriptions), the
// namespace's Topic collection (<namespace>/topic/*), which every sidecar
// of the namespace subscribes to once, and the Subscriptions' shared
// resources. What the operator and a stream hold per pod is therefore the
// pod's part alone, not one entry per Topic of its namespace; a change to
// one Topic resends that one member to the namespace's streams.
//
// Schema version 1, the previous release's, named every Topic in the pod's
// own resource (<namespace>/<pod>); the operator still serves it to
// sidecars that subscribe to that name (docs/operator.md, upgrading).
//
// It imports no Kubernetes package: the sidecar links it.
package xdsresource

import (
	"fmt"
	"strings"
)

// TypeURL is the type of every resource the operator serves.
const TypeURL = "type.googleapis.com/weighstation.xds.v1.Resource"

// SchemaVersion is the configuration schema this build's sidecar reads,
// and the one the operator writes a pod's own resource and the Topic
// collection's marker in. A sidecar refuses (NACKs) a resource of a schema
// it does not understand; the operator serves sidecars of this schema and
// of the one before (docs/operator.md, upgrading).
const SchemaVersion uint32 = 2

// SharedSchemaVersion is the schema the Topic and Subscription resources
// are written in: their messages did not change in schema 2, so sidecars
// of both schemas read the same resources.
const SharedSchemaVersion uint32 = 1

// PreviousSchemaVersion is the schema of the previous release's sidecars,
// whose pod resource the operator renders for them (BuildPodResourceV1).
const PreviousSchemaVersion uint32 = 1

// Kind says which message a resource holds; its name says it too.
type Kind int

const (
	// KindPod is a pod's own resource: "<namespace>/pod/<pod>" in schema
	// 2, "<namespace>/<pod>" in schema 1 (Name.Schema says which).
	KindPod Kind = iota + 1
	// KindTopic is a Topic's shared policy, "<namespace>/topic/<name>": a
	// member of its namespace's Topic collection.
	KindTopic
	// KindSubscription is a Subscription's shared policy,
	// "<namespace>/subscription/<name>".
	KindSubscription
	// KindTopicCollection is a namespace's Topic collection,
	// "<namespace>/topic/*": subscribing to it subscribes to every member;
	// the resource sent under this name is its marker (TopicCollection).
	KindTopicCollection
)

func (k Kind) String() string {
	switch k {
	case KindPod:
		return "pod"
	case KindTopic:
		return "topic"
	case KindSubscription:
		return "subscription"
	case KindTopicCollection:
		return "topic collection"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// PodName is the node ID a pod's sidecar must present, "<namespace>/<pod>";
// it is also the name of the pod's own resource in schema 1.
func PodName(namespace, pod string) string { return namespace + "/" + pod }

// PodResourceName names a pod's own resource in schema 2.
func PodResourceName(namespace, pod string) string { return namespace + "/pod/" + pod }

// TopicCollectionName names a namespace's Topic collection.
func TopicCollectionName(namespace string) string { return namespace + "/topic/*" }

// TopicCollectionPrefix is what the names of a namespace's Topics begin
// with: TopicCollectionName less its '*'.
func TopicCollectionPrefix(namespace string) string { return namespace + "/topic/" }

// IsCollection reports whether name is a collection's ("<prefix>*"), and
// returns the prefix of its members' names.
func IsCollection(name string) (prefix string, ok bool) {
	if strings.HasSuffix(name, "/*") {
		return name[:len(name)-1], true
	}
	return "", false
}

// TopicName names a Topic's shared resource.
func TopicName(namespace, topic string) string { return namespace + "/topic/" + topic }

// SubscriptionName names a Subscription's shared resource.
func SubscriptionName(namespace, subscription string) string {
	return namespace + "/subscription/" + subscription
}

// Name is a parsed resource name.
type Name struct {
	Kind      Kind
	Namespace string
	// Name is the pod's, the Topic's or the Subscription's name ("" for a
	// collection).
	Name string
	// Schema is, for a pod's own resource, the schema its name is of.
	Schema uint32
}

// ParseName parses a resource name. Kubernetes names hold no '/', so the
// number of segments tells a pod's resource from a shared one.
func ParseName(s string) (Name, error) {
	// Segments are cut in place, not split into a slice: names are parsed
	// for every acknowledgement of every Topic of a namespace.
	var parts [3]string
	n := 0
	for rest, more := s, true; more; n++ {
		var p string
		p, rest, more = strings.Cut(rest, "/")
		if p == "" {
			return Name{}, fmt.Errorf("resource name %q has an empty segment", s)
		}
		if n < len(parts) {
			parts[n] = p
		}
		// '*' names a collection, and only a namespace's Topics are one.
		if p == "*" && (n != 2 || more || parts[1] != "topic") {
			return Name{}, fmt.Errorf("resource name %q: only <namespace>/topic/* is a collection", s)
		}
	}
	switch {
	case n == 2:
		return Name{Kind: KindPod, Namespace: parts[0], Name: parts[1], Schema: PreviousSchemaVersion}, nil
	case n == 3 && parts[1] == "pod":
		return Name{Kind: KindPod, Namespace: parts[0], Name: parts[2], Schema: SchemaVersion}, nil
	case n == 3 && parts[1] == "topic" && parts[2] == "*":
		return Name{Kind: KindTopicCollection, Namespace: parts[0]}, nil
	case n == 3 && parts[1] == "topic":
		return Name{Kind: KindTopic, Namespace: parts[0], Name: parts[2]}, nil
	case n == 3 && parts[1] == "subscription":
		return Name{Kind: KindSubscription, Namespace: parts[0], Name: parts[2]}, nil
	}
	return Name{}, fmt.Errorf("resource name %q is none of <namespace>/pod/<pod>, <namespace>/topic/*, <namespace>/topic/<name>, <namespace>/subscription/<name>, <namespace>/<pod>", s)
}

func (n Name) String() string {
	switch n.Kind {
	case KindTopic:
		return TopicName(n.Namespace, n.Name)
	case KindSubscription:
		return SubscriptionName(n.Namespace, n.Name)
	case KindTopicCollection:
		return TopicCollectionName(n.Namespace)
	}
	if n.Schema == PreviousSchemaVersion {
		return PodName(n.Namespace, n.Name)
	}
	return PodResourceName(n.Namespace, n.Name)
}
