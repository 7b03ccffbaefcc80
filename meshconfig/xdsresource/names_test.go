package xdsresource_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/meshconfig/xdsresource"
)

// ParseName is called for every acknowledged Topic: it allocates only
// for an error.
func TestParseNameDoesNotAllocate(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _, _ = xdsresource.ParseName("shop/topic/orders") }); n != 0 {
		t.Fatalf("ParseName allocates %v times", n)
	}
}

func TestParseName(t *testing.T) {
	tests := []struct {
		in      string
		want    xdsresource.Name
		wantErr string
	}{
		{in: "shop/pod/billing-0", want: xdsresource.Name{Kind: xdsresource.KindPod, Namespace: "shop", Name: "billing-0", Schema: 2}},
		{in: "shop/billing-0", want: xdsresource.Name{Kind: xdsresource.KindPod, Namespace: "shop", Name: "billing-0", Schema: 1}},
		{in: "shop/topic/orders", want: xdsresource.Name{Kind: xdsresource.KindTopic, Namespace: "shop", Name: "orders"}},
		{in: "shop/topic/*", want: xdsresource.Name{Kind: xdsresource.KindTopicCollection, Namespace: "shop"}},
		{in: "shop/subscription/billing", want: xdsresource.Name{Kind: xdsresource.KindSubscription, Namespace: "shop", Name: "billing"}},
		{in: "*", wantErr: "only <namespace>/topic/* is a collection"},
		{in: "shop/subscription/*", wantErr: "only <namespace>/topic/* is a collection"},
		{in: "shop/pod/*", wantErr: "only <namespace>/topic/* is a collection"},
		{in: "*/topic/orders", wantErr: "only <namespace>/topic/* is a collection"},
		{in: "shop", wantErr: "is none of"},
		{in: "shop//x", wantErr: "empty segment"},
		{in: "shop/queue/x", wantErr: "is none of"},
		{in: "shop/topic/a/b", wantErr: "is none of"},
		{in: "shop/topic/*/b", wantErr: "only <namespace>/topic/* is a collection"},
		{in: "shop/topic/a/", wantErr: "empty segment"},
	}
	for _, tc := range tests {
		got, err := xdsresource.ParseName(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseName(%q) = %+v, %v; want an error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want || got.String() != tc.in {
			t.Errorf("ParseName(%q) = %+v (%q), %v; want %+v", tc.in, got, got.String(), err, tc.want)
		}
	}
}

// TestDecodeRefuses: what the sidecar NACKs, each with a reason that says
// what is wrong.
func TestDecodeRefuses(t *testing.T) {
	encode := func(r *xdsv1.Resource) []byte {
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	topic := &xdsv1.Resource{SchemaVersion: xdsresource.SchemaVersion, Kind: &xdsv1.Resource_Topic{Topic: &xdsv1.TopicPolicy{Name: "orders"}}}
	sharedV1 := xdsresource.TopicResource(meshconfig.TopicPolicy{Name: "orders", Subject: "orders.>"})
	future := &xdsv1.Resource{SchemaVersion: xdsresource.SchemaVersion + 1, Kind: &xdsv1.Resource_Topic{Topic: &xdsv1.TopicPolicy{Name: "orders"}}}
	empty := &xdsv1.Resource{SchemaVersion: xdsresource.SchemaVersion}
	pod := xdsresource.BuildPodResource(xdsresource.OwnContent{Namespace: "shop", Pod: "billing-0"})
	podOfV1 := &xdsv1.Resource{SchemaVersion: 1, Kind: pod.GetKind()}
	marker := xdsresource.TopicCollectionResource(true, 3)
	markerOfV1 := &xdsv1.Resource{SchemaVersion: 1, Kind: marker.GetKind()}
	tests := []struct {
		name, resource string
		body           *anypb.Any
		wantErr        string
	}{
		{name: "a topic", resource: "shop/topic/orders", body: &anypb.Any{TypeUrl: xdsresource.TypeURL, Value: encode(topic)}},
		{name: "another type", resource: "shop/topic/orders", body: &anypb.Any{TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster", Value: encode(topic)}, wantErr: "has type"},
		{name: "a topic as schema 1 writes it", resource: "shop/topic/orders", body: &anypb.Any{TypeUrl: xdsresource.TypeURL, Value: encode(sharedV1)}},
		{name: "a pod", resource: "shop/pod/billing-0", body: &anypb.Any{TypeUrl: xdsresource.TypeURL, Value: encode(pod)}},
		{name: "a collection's marker", resource: "shop/topic/*", body: &anypb.Any{TypeUrl: xdsresource.TypeURL, Value: encode(marker)}},
		{name: "a newer schema", resource: "shop/topic/orders", body: &anypb.Any{TypeUrl: xdsresource.TypeURL, Value: encode(future)}, wantErr: "schema version 3; this sidecar understands 2 only"},
		{name: "a pod resource of schema 1", resource: "shop/pod/billing-0", body: &anypb.Any{TypeUrl: xdsresource.TypeURL, Value: encode(podOfV1)}, wantErr: "schema version 1; this sidecar understands 2 only"},
		{name: "a marker of schema 1", resource: "shop/topic/*", body: &anypb.Any{TypeUrl: xdsresource.TypeURL, Value: encode(markerOfV1)}, wantErr: "schema version 1; this sidecar understands 2 only"},
		{name: "the schema-1 pod name", resource: "shop/billing-0", body: &anypb.Any{TypeUrl: xdsresource.TypeURL, Value: encode(pod)}, wantErr: "this sidecar reads shop/pod/billing-0 of schema 2"},
		{name: "no policy", resource: "shop/topic/orders", body: &anypb.Any{TypeUrl: xdsresource.TypeURL, Value: encode(empty)}, wantErr: "holds no policy"},
		{name: "named as another kind", resource: "shop/subscription/orders", body: &anypb.Any{TypeUrl: xdsresource.TypeURL, Value: encode(topic)}, wantErr: "is named as a subscription but holds a topic"},
		{name: "garbage", resource: "shop/topic/orders", body: &anypb.Any{TypeUrl: xdsresource.TypeURL, Value: []byte{0xff, 0xff}}, wantErr: "decoding resource"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := xdsresource.Decode(tc.resource, tc.body)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Decode: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
