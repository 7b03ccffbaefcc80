package xdsclient

import (
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"

	deltav1 "github.com/weighstation/weighstation/api/xds/delta/v1"
	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/meshconfig/xdsresource"
)

// BenchmarkTopicChange is what one Topic's change costs a sidecar whose
// namespace has many Topics: the response holds the one Topic resource,
// and the client applies the whole configuration again.
func BenchmarkTopicChange(b *testing.B) {
	for _, topics := range []int{300, 3000} {
		b.Run(fmt.Sprint(topics, " topics"), func(b *testing.B) {
			cfg := meshconfig.DefaultConfig(meshconfig.DefaultPolicy)
			cfg.Namespace, cfg.Pod = "shop", "p-0"
			for i := range topics {
				cfg.Topics = append(cfg.Topics, meshconfig.TopicPolicy{Name: fmt.Sprintf("t-%05d", i), Subject: fmt.Sprintf("orders.%05d.>", i), MaxMessageBytes: 1024, MayPublish: i%3 != 0, StampHeader: true})
			}
			pod, shared := xdsresource.Split(cfg, "uid")
			c, err := New(Options{Address: "x:1", Namespace: "shop", Pod: "p-0", TokenFile: "t", Credentials: insecure.NewCredentials(),
				Apply: func(meshconfig.PodConfig) error { return nil }, Log: logr.Discard()})
			if err != nil {
				b.Fatal(err)
			}
			wire := func(name string, res *xdsv1.Resource, version string) *deltav1.Resource {
				body, err := anypb.New(res)
				if err != nil {
					b.Fatal(err)
				}
				return &deltav1.Resource{Name: name, Version: version, Resource: body}
			}
			first := &deltav1.Response{Resources: []*deltav1.Resource{wire(c.own, pod, "p1"), wire(c.topics, xdsresource.TopicCollectionResource(true, len(cfg.Topics)), "e.1")}}
			for name, res := range shared {
				first.Resources = append(first.Resources, wire(name, res, "v0"))
			}
			working, subscribed, dirty := map[string]received{}, map[string]bool{c.own: true}, map[string]bool{}
			if _, _, err := c.handle(first, working, subscribed, dirty); err != nil {
				b.Fatal(err)
			}
			changed := xdsresource.TopicName("shop", "t-00001")
			for i := 0; b.Loop(); i++ {
				res := xdsresource.TopicResource(meshconfig.TopicPolicy{Name: "t-00001", Subject: "orders.00001.>", MaxMessageBytes: int64(2048 + i%2)})
				marker := wire(c.topics, xdsresource.TopicCollectionResource(false, len(cfg.Topics)), fmt.Sprint("e.", i+2))
				if _, _, err := c.handle(&deltav1.Response{Resources: []*deltav1.Resource{wire(changed, res, fmt.Sprint("v", i+1)), marker}}, working, subscribed, dirty); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
