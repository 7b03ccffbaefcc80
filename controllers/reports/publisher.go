package reports

import (
	"github.com/weighstation/weighstation/controllers/xds"
	"github.com/weighstation/weighstation/meshconfig/xdsresource"
)

// PublisherPolicyNames reads each pod's configuration from the xDS
// Publisher: the Topics and Subscriptions its own resource names. Every
// Topic of the pod's resource counts, whether the pod may publish under it
// or not: a sidecar counts the refusals of a Topic it may not publish
// under too.
func PublisherPolicyNames(pub *xds.Publisher) PolicyNamesFunc {
	return func(namespace, pod string) (topics, subscriptions map[string]bool, ok bool) {
		res, ok := pub.Current(xdsresource.PodName(namespace, pod))
		if !ok || res.GetPod() == nil {
			return nil, nil, false
		}
		p := res.GetPod()
		topics = make(map[string]bool, len(p.GetTopics()))
		for _, ref := range p.GetTopics() {
			if name, ok := policyName(ref.GetName(), namespace, xdsresource.KindTopic); ok {
				topics[name] = true
			}
		}
		subscriptions = make(map[string]bool, len(p.GetSubscriptions()))
		for _, ref := range p.GetSubscriptions() {
			if name, ok := policyName(ref, namespace, xdsresource.KindSubscription); ok {
				subscriptions[name] = true
			}
		}
		return topics, subscriptions, true
	}
}

// policyName reads the policy name of a shared resource's name of the
// namespace.
func policyName(resource, namespace string, kind xdsresource.Kind) (string, bool) {
	n, err := xdsresource.ParseName(resource)
	if err != nil || n.Kind != kind || n.Namespace != namespace {
		return "", false
	}
	return n.Name, true
}
