package propagation

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/weighstation/weighstation/controllers/request"
	"github.com/weighstation/weighstation/controllers/xds"
	"github.com/weighstation/weighstation/meshconfig/xdsresource"
)

// changeSet gathers the objects whose acknowledgements changed.
type changeSet struct {
	mu sync.Mutex
	// resources are the xDS resource names of objects, as
	// acknowledgements name them.
	resources map[string]bool
	wake      chan struct{}
	// settled, if set, leaves out the changes that cannot change a
	// status: one more pod applying the settled version of a Topic for
	// every pod (Reconciler.settledTopics). Without it, a new
	// pod, which applies every such Topic, would requeue each of them (the
	// whole namespace) for no write.
	settled *Reconciler
}

// add gathers the objects of changes. It runs for every pod's every
// acknowledgement, and a new pod's names each Topic of its namespace, so
// it takes each lock once and allocates only for what it queues. Lock
// order: changeSet.mu, then Reconciler.mu; never the other way.
func (c *changeSet) add(changes []xds.Change) {
	added := false
	c.mu.Lock()
	var settledTopics map[string]string
	if c.settled != nil {
		c.settled.mu.Lock()
		settledTopics = c.settled.settledTopics
	}
	consider := func(resource, version string, refused bool) {
		if c.resources[resource] || !isObjectResource(resource) {
			return // queued already, or no object's
		}
		if v, ok := settledTopics[resource]; ok && !refused && version != "" && v == version {
			return
		}
		c.resources[resource] = true
		added = true
	}
	for _, change := range changes {
		if change.Members != nil {
			for name, version := range change.Members {
				consider(name, version, false)
			}
			continue
		}
		consider(change.Resource, change.Version, change.Refused)
	}
	if c.settled != nil {
		c.settled.mu.Unlock()
	}
	c.mu.Unlock()
	if !added {
		return
	}
	select {
	case c.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// isObjectResource reports whether an xDS resource name is a Topic's or a
// Subscription's: add asks it of every name a new pod acknowledges, and
// ParseName allocates nothing for a valid name.
func isObjectResource(name string) bool {
	parsed, err := xdsresource.ParseName(name)
	return err == nil && (parsed.Kind == xdsresource.KindTopic || parsed.Kind == xdsresource.KindSubscription)
}

// take returns the objects gathered so far, and forgets them.
func (c *changeSet) take() map[request.Object]bool {
	c.mu.Lock()
	resources := c.resources
	c.resources = map[string]bool{}
	c.mu.Unlock()
	batch := make(map[request.Object]bool, len(resources))
	for resource := range resources {
		parsed, err := xdsresource.ParseName(resource)
		if err != nil {
			continue
		}
		nn := types.NamespacedName{Namespace: parsed.Namespace, Name: parsed.Name}
		switch parsed.Kind {
		case xdsresource.KindTopic:
			batch[request.Object{Kind: request.Topic, NamespacedName: nn}] = true
		case xdsresource.KindSubscription:
			batch[request.Object{Kind: request.Subscription, NamespacedName: nn}] = true
		}
	}
	return batch
}
