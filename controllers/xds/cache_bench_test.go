package xds_test

import (
	"fmt"
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

// BenchmarkTopicChangeToWatches is what one Topic change costs the cache
// at the large world's scale: 2,000 open watches of a namespace of 3,000
// Topics, each subscribed to the collection, each answered (the responses
// drained and the watches re-created outside the timer).
func BenchmarkTopicChangeToWatches(b *testing.B) {
	c := xds.NewCache(xdsresource.TypeURL)
	topic := func(i int, size int64) types.Resource {
		return &xdsv1.Resource{SchemaVersion: 1, Kind: &xdsv1.Resource_Topic{Topic: &xdsv1.TopicPolicy{Name: fmt.Sprint("t", i), MaxMessageBytes: size}}}
	}
	update := map[string]types.Resource{}
	for i := range 3000 {
		update[xdsresource.TopicName("shop", fmt.Sprint("t", i))] = topic(i, 1)
	}
	_ = c.UpdateResources(update, nil)
	type w struct {
		sub streamv3.Subscription
		out chan cachev3.DeltaResponse
		req *discovery.DeltaDiscoveryRequest
	}
	var ws []*w
	watch := func(x *w) {
		if _, err := c.CreateDeltaWatch(x.req, &x.sub, x.out); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 2000 {
		node := &core.Node{Id: fmt.Sprintf("shop/p%d", i)}
		names := []string{"shop/topic/*", fmt.Sprintf("shop/pod/p%d", i)}
		x := &w{sub: streamv3.NewDeltaSubscription(names, nil, nil, false), out: make(chan cachev3.DeltaResponse, 4),
			req: &discovery.DeltaDiscoveryRequest{TypeUrl: xdsresource.TypeURL, Node: node, ResourceNamesSubscribe: names}}
		watch(x)
		resp := <-x.out
		x.sub.SetReturnedResources(resp.GetNextVersionMap())
		x.req = &discovery.DeltaDiscoveryRequest{TypeUrl: xdsresource.TypeURL, Node: node}
		watch(x)
		ws = append(ws, x)
	}
	name := xdsresource.TopicName("shop", "t1")
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = c.UpdateResources(map[string]types.Resource{name: topic(1, int64(2+i))}, nil)
		b.StopTimer()
		for _, x := range ws {
			resp := <-x.out
			x.sub.SetReturnedResources(resp.GetNextVersionMap())
			watch(x)
		}
		b.StartTimer()
	}
}
