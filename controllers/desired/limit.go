package desired

import (
	"cmp"
	"slices"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

// DefaultMaxTopicsPerNamespace is the default of the operator's
// -max-topics-per-namespace. Every sidecar of a namespace holds each of
// its Topics, so the namespace's Topics bound what each of its pods costs
// the operator and its sidecars (a pod's own xDS resource names every
// Topic): 4,096 keeps a pod's first configuration well under gRPC's 4 MiB
// message limit.
const DefaultMaxTopicsPerNamespace = 4096

// WithinLimit returns the Topics of one namespace that its cap admits, the
// max created first (by creation time, then name), and the names of the
// others, which are not in force: they are left out as if they did not
// exist, so a namespace past its cap keeps the configuration it had and
// one more Topic changes nothing. max <= 0 admits every Topic. The Topics
// it returns are those of topics (not copies), in their order.
func WithinLimit(topics []v1alpha1.Topic, max int) (within []v1alpha1.Topic, over map[string]bool) {
	if max <= 0 || len(topics) <= max {
		return topics, nil
	}
	order := make([]int, len(topics))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		ta, tb := &topics[a], &topics[b]
		return cmp.Or(ta.CreationTimestamp.Time.Compare(tb.CreationTimestamp.Time), cmp.Compare(ta.Name, tb.Name))
	})
	over = make(map[string]bool, len(topics)-max)
	for _, i := range order[max:] {
		over[topics[i].Name] = true
	}
	within = make([]v1alpha1.Topic, 0, max)
	for i := range topics {
		if !over[topics[i].Name] {
			within = append(within, topics[i])
		}
	}
	return within, over
}
