package topic

import (
	"hash/fnv"
	"sync"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

// governedCounts remembers, per namespace, how many Subscriptions each
// Topic in force governs. Working it out scans every Topic for every
// Subscription; a namespace's Topic reconciles mostly run back to back on
// the same Topics and Subscriptions (one change requeues every Topic), so
// the counts are worked out once per state of the namespace's subjects,
// which a fingerprint of names and subjects identifies.
type governedCounts struct {
	mu   sync.Mutex
	byNS map[string]governedState
}

type governedState struct {
	fingerprint uint64
	counts      map[string]int32 // by Topic name
}

// count returns how many of subscriptions the Topic named topic governs,
// given the Topics in force of the namespace.
func (g *governedCounts) count(namespace, topic string, inForce []v1alpha1.Topic, subscriptions []v1alpha1.Subscription) int32 {
	fp := fingerprint(inForce, subscriptions)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.byNS == nil {
		g.byNS = map[string]governedState{}
	}
	state, ok := g.byNS[namespace]
	if !ok || state.fingerprint != fp {
		state = governedState{fingerprint: fp, counts: map[string]int32{}}
		for _, s := range subscriptions {
			if t := governingTopic(inForce, string(s.Spec.Subject)); t != nil {
				state.counts[t.Name]++
			}
		}
		g.byNS[namespace] = state
	}
	return state.counts[topic]
}

// fingerprint identifies the names and subjects of the Topics in force and
// of the Subscriptions, in any order (lists from the cache come in none).
func fingerprint(inForce []v1alpha1.Topic, subscriptions []v1alpha1.Subscription) uint64 {
	var sum uint64
	add := func(kind, name string, subject v1alpha1.SubjectPattern) {
		h := fnv.New64a()
		h.Write([]byte(kind))
		h.Write([]byte{0})
		h.Write([]byte(name))
		h.Write([]byte{0})
		h.Write([]byte(subject))
		// Mixed by multiplication before summing, so that swapped fields
		// of two items do not cancel out.
		sum += h.Sum64() * 0x9E3779B97F4A7C15
	}
	for _, t := range inForce {
		add("t", t.Name, t.Spec.Subject)
	}
	for _, s := range subscriptions {
		add("s", s.Name, s.Spec.Subject)
	}
	return sum ^ uint64(len(inForce))<<32 ^ uint64(len(subscriptions))
}
