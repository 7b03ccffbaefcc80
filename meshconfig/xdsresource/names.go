// Package xdsresource is weighstation's xDS wire protocol, shared by the
// operator's xDS server and the sidecar's client: the one resource type,
// how resources are named, and the conversion between meshconfig's types
// and the generated messages of api/xds/v1.
//
// A pod's configuration travels as one resource of its own, which names the
// shared Topic and Subscription resources of its namespace that apply to
// it. A change to one Topic or Subscription therefore resends that one
// resource, and only to the streams that subscribed to it.
//
// It imports no Kubernetes package: the sidecar links it.
package xdsresource

import (
	"fmt"
	"strings"
)

// TypeURL is the type of every resource the operator serves.
const TypeURL = "type.googleapis.com/weighstation.xds.v1.Resource"

// SchemaVersion is the configuration schema this build writes and reads. A
// sidecar refuses (NACKs) a resource of another schema version; an operator
// serves sidecars of its own schema version (docs/operator.md lists which releases
// share one).
const SchemaVersion uint32 = 1

// Kind says which message a resource holds; its name says it too.
type Kind int

const (
	// KindPod is a pod's own resource, "<namespace>/<pod>".
	KindPod Kind = iota + 1
	// KindTopic is a Topic's shared policy, "<namespace>/topic/<name>".
	KindTopic
	// KindSubscription is a Subscription's shared policy,
	// "<namespace>/subscription/<name>".
	KindSubscription
)

func (k Kind) String() string {
	switch k {
	case KindPod:
		return "pod"
	case KindTopic:
		return "topic"
	case KindSubscription:
		return "subscription"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// PodName names a pod's own resource; it is also the node ID the pod's
// sidecar must present.
func PodName(namespace, pod string) string { return namespace + "/" + pod }

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
	// Name is the pod's, the Topic's or the Subscription's name.
	Name string
}

// ParseName parses a resource name. Kubernetes names hold no '/', so the
// number of segments tells a pod's resource from a shared one.
func ParseName(s string) (Name, error) {
	parts := strings.Split(s, "/")
	for _, p := range parts {
		if p == "" {
			return Name{}, fmt.Errorf("resource name %q has an empty segment", s)
		}
	}
	switch {
	case len(parts) == 2:
		return Name{Kind: KindPod, Namespace: parts[0], Name: parts[1]}, nil
	case len(parts) == 3 && parts[1] == "topic":
		return Name{Kind: KindTopic, Namespace: parts[0], Name: parts[2]}, nil
	case len(parts) == 3 && parts[1] == "subscription":
		return Name{Kind: KindSubscription, Namespace: parts[0], Name: parts[2]}, nil
	}
	return Name{}, fmt.Errorf("resource name %q is none of <namespace>/<pod>, <namespace>/topic/<name>, <namespace>/subscription/<name>", s)
}

func (n Name) String() string {
	switch n.Kind {
	case KindTopic:
		return TopicName(n.Namespace, n.Name)
	case KindSubscription:
		return SubscriptionName(n.Namespace, n.Name)
	}
	return PodName(n.Namespace, n.Name)
}
