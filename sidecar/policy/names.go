package policy

import (
	"maps"
	"slices"
)

// SubscriptionNames returns the names of the configuration's Subscriptions,
// sorted.
func (p *Publish) SubscriptionNames() []string {
	names := make([]string, 0, len(p.subscriptions))
	for _, sp := range p.subscriptions {
		names = append(names, sp.Name)
	}
	slices.Sort(names)
	return names
}

// TopicNames returns the names of the configuration's Topics, sorted; the
// default policy, which governs what no Topic matches, is not one of them.
// It walks a snapshot of the compiled trie, which nothing writes after
// Compile, so matching on the publish path is not disturbed; still, call it
// for reporting, not per message.
func (p *Publish) TopicNames() []string {
	names := map[string]bool{}
	for _, t := range p.trie.Snapshot().All() {
		names[t.Policy.Name] = true
	}
	return slices.Sorted(maps.Keys(names))
}
