package reports

import (
	"github.com/weighstation/weighstation/controllers/xds"
)

// PublisherPolicyNames reads each pod's configuration from the xDS
// Publisher: the Topics in force in its namespace and its Subscriptions.
// Every Topic counts, whether the pod may publish under it or not: a
// sidecar counts the refusals of a Topic it may not publish under too.
func PublisherPolicyNames(pub *xds.Publisher) PolicyNamesFunc {
	return func(namespace, pod string) (topics, subscriptions map[string]bool, ok bool) {
		topicNames, subscriptionNames, ok := pub.PolicyNames(namespace, pod)
		if !ok {
			return nil, nil, false
		}
		topics = make(map[string]bool, len(topicNames))
		for _, name := range topicNames {
			topics[name] = true
		}
		subscriptions = make(map[string]bool, len(subscriptionNames))
		for _, name := range subscriptionNames {
			subscriptions[name] = true
		}
		return topics, subscriptions, true
	}
}
