package xdsclient

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
)

// The kept order is the order a fresh sort gives, after every step of
// random sequences of Topics added, removed, re-subjected and changed
// otherwise (the cases that must and must not sort again), with other
// resources changing beside them.
func TestTopicOrderFollowsTheMembers(t *testing.T) {
	isMember := func(name string) bool { return strings.HasPrefix(name, "shop/topic/") && name != "shop/topic/*" }
	for seed := uint64(1); seed <= 50; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		working := map[string]received{}
		var order topicOrder
		topic := func(name, subject string, size int64) received {
			return received{resource: &xdsv1.Resource{Kind: &xdsv1.Resource_Topic{Topic: &xdsv1.TopicPolicy{Name: name, Subject: subject, MaxMessageBytes: size}}}}
		}
		for step := range 200 {
			dirty := map[string]bool{}
			for range 1 + rng.IntN(3) {
				name := fmt.Sprintf("shop/topic/t%d", rng.IntN(12))
				switch op := rng.IntN(10); {
				case op < 2:
					delete(working, name)
				case op < 5: // a new subject (or a new Topic)
					working[name] = topic(name, fmt.Sprintf("s.%02d.>", rng.IntN(40)), 1)
				default: // the same subject, another limit (or a new Topic)
					subject := fmt.Sprintf("s.%02d.>", rng.IntN(40))
					if r, ok := working[name]; ok {
						subject = r.resource.GetTopic().GetSubject()
					}
					working[name] = topic(name, subject, int64(rng.IntN(9)))
				}
				dirty[name] = true
			}
			if rng.IntN(3) == 0 {
				working["shop/subscription/s"] = received{resource: &xdsv1.Resource{}}
				dirty["shop/subscription/s"] = true
			}
			got := order.topics(working, dirty, isMember)
			var want []*xdsv1.TopicPolicy
			for name, r := range working {
				if isMember(name) {
					want = append(want, r.resource.GetTopic())
				}
			}
			slices.SortFunc(want, func(a, b *xdsv1.TopicPolicy) int {
				if c := strings.Compare(a.GetSubject(), b.GetSubject()); c != 0 {
					return c
				}
				return strings.Compare(a.GetName(), b.GetName())
			})
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d step %d: order %v, want %v", seed, step, names(got), names(want))
			}
		}
	}
}

func names(topics []*xdsv1.TopicPolicy) []string {
	out := make([]string, len(topics))
	for i, t := range topics {
		out[i] = t.GetName() + "@" + t.GetSubject()
	}
	return out
}
