package xds_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/weighstation/weighstation/controllers/xds"
	"github.com/weighstation/weighstation/meshconfig/xdsresource"
)

// TestRequestsOutsideThePodAreRefused speaks raw delta ADS, as a
// misbehaving or hostile sidecar would, and checks that every request for
// something that is not the pod's to read ends the stream.
func TestRequestsOutsideThePodAreRefused(t *testing.T) {
	pub := newPublisher(t)
	pub.Set(podConfig("shop", "billing-0", false), "uid-1")
	pub.Set(podConfig("shop", "billing-1", false), "uid-2")
	pub.Set(podConfig("other", "billing-0", false), "uid-3")
	pub.MarkSynced()
	r := startServer(t, pub, xds.NewTracker(), tokens{"t1": {Namespace: "shop", Pod: "billing-0", PodUID: "uid-1", Expiry: time.Now().Add(time.Hour)}}, "", nil)
	conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	own := &corev3.Node{Id: "shop/billing-0"}
	tests := []struct {
		name     string
		requests []*discoveryv3.DeltaDiscoveryRequest
		code     codes.Code
		want     string
	}{
		{
			name:     "the wildcard",
			requests: []*discoveryv3.DeltaDiscoveryRequest{{Node: own, TypeUrl: xdsresource.TypeURL, ResourceNamesSubscribe: []string{"*"}}},
			code:     codes.PermissionDenied, want: "wildcard",
		},
		{
			name:     "an empty first subscription (the legacy wildcard)",
			requests: []*discoveryv3.DeltaDiscoveryRequest{{Node: own, TypeUrl: xdsresource.TypeURL}},
			code:     codes.PermissionDenied, want: "legacy wildcard",
		},
		{
			name:     "another pod's resource",
			requests: []*discoveryv3.DeltaDiscoveryRequest{{Node: own, TypeUrl: xdsresource.TypeURL, ResourceNamesSubscribe: []string{"shop/billing-1"}}},
			code:     codes.PermissionDenied, want: "another pod's configuration",
		},
		{
			name:     "the same pod name in another namespace",
			requests: []*discoveryv3.DeltaDiscoveryRequest{{Node: own, TypeUrl: xdsresource.TypeURL, ResourceNamesSubscribe: []string{"other/billing-0"}}},
			code:     codes.PermissionDenied, want: "another pod's configuration",
		},
		{
			name:     "another namespace's shared resource",
			requests: []*discoveryv3.DeltaDiscoveryRequest{{Node: own, TypeUrl: xdsresource.TypeURL, ResourceNamesSubscribe: []string{"shop/billing-0", "other/subscription/billing"}}},
			code:     codes.PermissionDenied, want: "another namespace's resource",
		},
		{
			name: "another pod's resource, later in the stream",
			requests: []*discoveryv3.DeltaDiscoveryRequest{
				{Node: own, TypeUrl: xdsresource.TypeURL, ResourceNamesSubscribe: []string{"shop/billing-0"}},
				{TypeUrl: xdsresource.TypeURL, ResourceNamesSubscribe: []string{"shop/billing-1"}},
			},
			code: codes.PermissionDenied, want: "another pod's configuration",
		},
		{
			name:     "another pod's resource as an initial version",
			requests: []*discoveryv3.DeltaDiscoveryRequest{{Node: own, TypeUrl: xdsresource.TypeURL, ResourceNamesSubscribe: []string{"shop/billing-0"}, InitialResourceVersions: map[string]string{"shop/billing-1": "x"}}},
			code:     codes.PermissionDenied, want: "another pod's configuration",
		},
		{
			name:     "no node ID",
			requests: []*discoveryv3.DeltaDiscoveryRequest{{TypeUrl: xdsresource.TypeURL, ResourceNamesSubscribe: []string{"shop/billing-0"}}},
			code:     codes.PermissionDenied, want: "must carry the node ID",
		},
		{
			name:     "another type",
			requests: []*discoveryv3.DeltaDiscoveryRequest{{Node: own, TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster", ResourceNamesSubscribe: []string{"shop/billing-0"}}},
			code:     codes.PermissionDenied, want: "is not served",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer t1")
			st, err := ads.DeltaAggregatedResources(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, req := range tc.requests {
				if err := st.Send(req); err != nil {
					break // the server ended the stream; Recv says why
				}
			}
			for {
				resp, err := st.Recv()
				if err == nil {
					for _, res := range resp.GetResources() {
						if res.GetName() != "shop/billing-0" && !strings.HasPrefix(res.GetName(), "shop/") {
							t.Fatalf("received %s", res.GetName())
						}
					}
					continue
				}
				if s := status.Convert(err); s.Code() != tc.code || !strings.Contains(s.Message(), tc.want) {
					t.Fatalf("stream ended with %v %q, want %v containing %q", s.Code(), s.Message(), tc.code, tc.want)
				}
				return
			}
		})
	}
	t.Run("the state-of-the-world RPC", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer t1"), 10*time.Second)
		defer cancel()
		st, err := ads.StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = st.Recv()
		if status.Code(err) != codes.Unimplemented {
			t.Fatalf("state-of-the-world stream: %v, want Unimplemented", err)
		}
	})
}
