package xds_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	streamv3 "github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/controllers/xds"
	"github.com/weighstation/weighstation/meshconfig/xdsresource"
)

// simStream plays go-control-plane's delta server for one stream against
// one cache: one watch at a time, re-created on every request, the
// subscription's returned versions replaced by each response's.
type simStream struct {
	cache  cachev3.ConfigWatcher
	sub    streamv3.Subscription
	node   *core.Node
	out    chan cachev3.DeltaResponse
	cancel func()
	opened bool
	// delayAck, if set, says whether to hold back the ACK of a response
	// (ack sends it later): changes made meanwhile reach no watch, and the
	// next watch must find them.
	delayAck func() bool
	// onResponse, if set, is given each response as it is drained.
	onResponse func(cachev3.DeltaResponse)
}

// request sends one request (the first, a subscription change or an ACK)
// and returns the responses it and its ACKs produced, rendered.
func (s *simStream) request(t *testing.T, subscribe, unsubscribe []string, initial map[string]string) []string {
	t.Helper()
	if s.cancel != nil {
		s.cancel()
		s.cancel = nil
	}
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: xdsresource.TypeURL, Node: s.node, ResourceNamesSubscribe: subscribe, ResourceNamesUnsubscribe: unsubscribe}
	if !s.opened {
		s.opened = true
		req.InitialResourceVersions = initial
		s.sub = streamv3.NewDeltaSubscription(subscribe, unsubscribe, initial, false)
	} else {
		req.ResponseNonce = "n"
		s.sub.UpdateResourceSubscriptions(subscribe, unsubscribe)
	}
	cancel, err := s.cache.CreateDeltaWatch(req, &s.sub, s.out)
	if err != nil {
		t.Fatal(err)
	}
	s.cancel = cancel
	return s.drain(t)
}

// drain takes the responses waiting, ACKing each (a new watch).
func (s *simStream) drain(t *testing.T) []string {
	t.Helper()
	var rendered []string
	for {
		select {
		case resp := <-s.out:
			if s.onResponse != nil {
				s.onResponse(resp)
			}
			rendered = append(rendered, render(t, resp))
			s.sub.SetReturnedResources(resp.GetNextVersionMap())
			s.cancel = nil // the watch answered: it is done
			if s.delayAck != nil && s.delayAck() {
				return append(rendered, "(ACK held back)")
			}
			rendered = append(rendered, s.request(t, nil, nil, nil)...)
			return rendered
		default:
			return rendered
		}
	}
}

// render is a response's resources and removals, in name order, and the
// versions it says the stream then holds (the cache's own keys aside).
func render(t *testing.T, resp cachev3.DeltaResponse) string {
	t.Helper()
	d, err := resp.GetDeltaDiscoveryResponse()
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, r := range d.GetResources() {
		parts = append(parts, "+"+r.GetName()+"@"+r.GetVersion())
	}
	for _, name := range d.GetRemovedResources() {
		parts = append(parts, "-"+name)
	}
	for name, v := range resp.GetNextVersionMap() {
		if !strings.HasPrefix(name, "\x00") {
			parts = append(parts, "="+name+"@"+v)
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// The Cache answers exactly as go-control-plane's LinearCache does, over
// random sequences of updates, removals, subscription changes, reconnects
// with reported versions, and streams of two namespaces: the same
// resources, removals and returned versions at the same moments.
func TestCacheAnswersAsLinearCache(t *testing.T) {
	for _, logged := range []int{1 << 16, 2} {
		// A log of two changes: streams often fall behind it and are
		// compared in full.
		restore := xds.SetMaxLoggedChanges(logged)
		t.Run(fmt.Sprintf("log of %d changes", logged), func(t *testing.T) { differentialRuns(t) })
		restore()
	}
}

func differentialRuns(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			ours := xds.NewCache(xdsresource.TypeURL)
			theirs := cachev3.NewLinearCache(xdsresource.TypeURL)
			names := func(ns string) []string {
				out := []string{xdsresource.PodName(ns, "p0"), xdsresource.PodName(ns, "p1")}
				for i := range 6 {
					out = append(out, xdsresource.TopicName(ns, fmt.Sprint("t", i)))
				}
				return out
			}
			all := append(names("shop"), names("bank")...)
			// Both streams of a pair hold back the same ACKs.
			var holdBack bool
			newStreams := func(node string) [2]*simStream {
				n := &core.Node{Id: node}
				return [2]*simStream{
					{cache: ours, node: n, out: make(chan cachev3.DeltaResponse, 4), delayAck: func() bool { holdBack = rng.IntN(3) == 0; return holdBack }},
					{cache: theirs, node: n, out: make(chan cachev3.DeltaResponse, 4), delayAck: func() bool { return holdBack }},
				}
			}
			nodes := []string{"shop/p0", "shop/p1", "bank/p0"}
			streams := map[string][2]*simStream{}
			held := map[string]map[string]string{} // what a node's sidecar holds, for reconnects
			compare := func(step string, got, want []string) {
				t.Helper()
				if !slices.Equal(got, want) {
					t.Fatalf("%s: Cache answered\n%q\nLinearCache\n%q", step, got, want)
				}
			}
			for step := range 300 {
				switch op := rng.IntN(10); {
				case op < 4: // an update of a few resources, perhaps removals
					update := map[string]types.Resource{}
					var remove []string
					for range 1 + rng.IntN(3) {
						name := all[rng.IntN(len(all))]
						if rng.IntN(4) == 0 {
							remove = append(remove, name)
							continue
						}
						update[name] = &xdsv1.Resource{SchemaVersion: xdsresource.SchemaVersion, Kind: &xdsv1.Resource_Topic{Topic: &xdsv1.TopicPolicy{Name: name, MaxMessageBytes: int64(rng.IntN(3))}}}
					}
					for name := range update {
						remove = slices.DeleteFunc(remove, func(r string) bool { return r == name })
					}
					if err := ours.UpdateResources(update, remove); err != nil {
						t.Fatal(err)
					}
					if err := theirs.UpdateResources(update, remove); err != nil {
						t.Fatal(err)
					}
					for _, node := range nodes {
						if s, ok := streams[node]; ok {
							compare(fmt.Sprintf("step %d: update, stream %s", step, node), s[0].drain(t), s[1].drain(t))
						}
					}
				default: // a stream opens, changes its subscription, or reconnects
					node := nodes[rng.IntN(len(nodes))]
					ns := namespaceOf(node)
					s, open := streams[node]
					if !open || rng.IntN(5) == 0 {
						// A (re)connect reporting a random part of what it holds,
						// perhaps a stale version of it.
						if open {
							// The old stream closes: the server cancels its watch.
							for _, old := range s {
								if old.cancel != nil {
									old.cancel()
								}
							}
						}
						s = newStreams(node)
						streams[node] = s
						initial := map[string]string{}
						for name, v := range held[node] {
							switch rng.IntN(3) {
							case 0:
								initial[name] = v
							case 1:
								initial[name] = "stale"
							}
						}
						subscribe := []string{node}
						for _, name := range names(ns) {
							if rng.IntN(2) == 0 {
								subscribe = append(subscribe, name)
							}
						}
						for name := range initial {
							subscribe = append(subscribe, name)
						}
						compare(fmt.Sprintf("step %d: stream %s opens", step, node), s[0].request(t, subscribe, nil, initial), s[1].request(t, subscribe, nil, initial))
					} else {
						var subscribe, unsubscribe []string
						for _, name := range names(ns) {
							switch rng.IntN(6) {
							case 0:
								subscribe = append(subscribe, name)
							case 1:
								unsubscribe = append(unsubscribe, name)
							}
						}
						compare(fmt.Sprintf("step %d: stream %s subscribes %v, unsubscribes %v", step, node, subscribe, unsubscribe),
							s[0].request(t, subscribe, unsubscribe, nil), s[1].request(t, subscribe, unsubscribe, nil))
					}
					h := map[string]string{}
					for name, v := range s[0].sub.ReturnedResources() {
						if !strings.HasPrefix(name, "\x00") {
							h[name] = v
						}
					}
					held[node] = h
				}
			}
			// The ACKs held back go now; then each stream has its watch.
			for _, node := range nodes {
				if s, ok := streams[node]; ok && s[0].cancel == nil {
					s[0].delayAck, s[1].delayAck = nil, nil
					compare("the last ACK of "+node, s[0].request(t, nil, nil, nil), s[1].request(t, nil, nil, nil))
				}
			}
			if ours.OpenWatches() != len(streams) {
				t.Fatalf("%d watches open for %d streams", ours.OpenWatches(), len(streams))
			}
		})
	}
}

func namespaceOf(node string) string { ns, _, _ := strings.Cut(node, "/"); return ns }
