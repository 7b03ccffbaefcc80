package xdsv1

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"
)

func samplePod() *Resource {
	return &Resource{
		SchemaVersion: 1,
		Kind: &Resource_Pod{Pod: &PodPolicy{
			Namespace: "ns",
			Pod:       "pod-0",
			PodUid:    "uid-0",
			DefaultTopic: &TopicPolicy{
				Name:            "default",
				MaxMessageBytes: 1 << 20,
				PublishRate:     &Rate{MessagesPerSecond: 100, MessagesBurst: 200},
			},
			Topics: []*TopicRef{
				{Name: "orders", MayPublish: true},
				{Name: "audit"},
			},
			Subscriptions: []string{"orders-worker"},
			Access:        &Access{Mode: "enforce", InboxPrefix: "_INBOX.pod-0"},
		}},
	}
}

func TestResourceRoundTrip(t *testing.T) {
	in := samplePod()
	b, err := proto.Marshal(in)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	out := &Resource{}
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	if !proto.Equal(in, out) {
		t.Fatalf("round trip changed the message:\n in: %v\nout: %v", in, out)
	}
	pod := out.GetPod()
	if pod == nil || len(pod.GetTopics()) != 2 || pod.GetTopics()[0].GetName() != "orders" || !pod.GetTopics()[0].GetMayPublish() {
		t.Fatalf("TopicRef lost in round trip: %v", out)
	}
}

func TestDeterministicMarshal(t *testing.T) {
	opts := proto.MarshalOptions{Deterministic: true}
	a, b := samplePod(), samplePod()
	if !proto.Equal(a, b) {
		t.Fatal("samples differ")
	}
	ba, err := opts.Marshal(a)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	bb, err := opts.Marshal(b)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	if !bytes.Equal(ba, bb) {
		t.Fatalf("equal messages marshaled to different bytes:\n%x\n%x", ba, bb)
	}
}
