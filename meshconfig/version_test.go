package meshconfig

import (
	"reflect"
	"testing"
)

// Every field of a configuration but Version changes its hash: the hash's
// encoding is written by hand, and a field added to the types without it
// would leave two different configurations with one version. The test
// walks the types by reflection, so a new field is tested without being
// named here.
func TestHashCoversEveryField(t *testing.T) {
	base := func() PodConfig {
		return PodConfig{
			Namespace: "shop", Pod: "p-0", Version: "v",
			Topics:  []TopicPolicy{{Name: "orders", Subject: "orders.>", MaxMessageBytes: 1, PublishRate: &Rate{MessagesPerSecond: 1, MessagesBurst: 1, BytesPerSecond: 1, BytesBurst: 1}}},
			Default: TopicPolicy{Subject: ">", MaxMessageBytes: 1, PublishRate: &Rate{MessagesPerSecond: 1, MessagesBurst: 1, BytesPerSecond: 1, BytesBurst: 1}},
			Subscriptions: []SubscriptionPolicy{{Name: "billing", Subject: "orders.*", QueueGroup: "q",
				KillSwitch: KillSwitch{Reason: "r", Auto: &AutoKillSwitch{MaxPendingMessages: 1, MaxLatencyMillis: 1, WindowMillis: 1, CooldownMillis: 1}},
				Limits:     Limits{MaxPendingMessages: 1, MaxPendingBytes: 1, Overflow: "DropNewest"}}},
			Access: Access{Mode: "enforce", InboxPrefix: "_I"},
		}
	}
	want, _ := Hash(base())
	changes := func(mutate func(cfg *PodConfig)) bool {
		cfg := base()
		mutate(&cfg)
		got, _ := Hash(cfg)
		return got != want
	}
	// The configuration's own leaves (leafPaths and bump: equal_test.go);
	// its lists, through their elements.
	cfgType := reflect.TypeOf(PodConfig{})
	lists := map[string]reflect.Type{}
	for _, path := range leafPaths(cfgType, nil) {
		f := cfgType.FieldByIndex(path)
		if f.Type.Kind() == reflect.Slice {
			lists[f.Name] = f.Type.Elem()
			continue
		}
		changed := changes(func(cfg *PodConfig) { bump(reflect.ValueOf(cfg).Elem(), path) })
		if f.Name == "Version" && changed {
			t.Fatal("the Version field changed the hash it is computed from")
		}
		if f.Name != "Version" && !changed {
			t.Errorf("changing %s left the hash as it was", f.Name)
		}
	}
	if len(lists) != 2 || lists["Topics"] == nil || lists["Subscriptions"] == nil {
		t.Fatalf("PodConfig's lists are %v: teach this test (and Hash) about a new one", lists)
	}
	for _, path := range leafPaths(lists["Topics"], nil) {
		if !changes(func(cfg *PodConfig) { bump(reflect.ValueOf(&cfg.Topics[0]).Elem(), path) }) {
			t.Errorf("changing a Topic's %s left the hash as it was", lists["Topics"].FieldByIndex(path).Name)
		}
	}
	for _, path := range leafPaths(lists["Subscriptions"], nil) {
		if !changes(func(cfg *PodConfig) { bump(reflect.ValueOf(&cfg.Subscriptions[0]).Elem(), path) }) {
			t.Errorf("changing a Subscription's %s left the hash as it was", lists["Subscriptions"].FieldByIndex(path).Name)
		}
	}
	// Optional parts: absent is not zero.
	cfg := base()
	cfg.Topics[0].PublishRate = &Rate{}
	zeroRate, _ := Hash(cfg)
	cfg.Topics[0].PublishRate = nil
	noRate, _ := Hash(cfg)
	if zeroRate == noRate {
		t.Error("a zero publish rate and none hash alike")
	}
	// Strings are delimited: moving a byte from one to the next changes it.
	a, b := base(), base()
	a.Namespace, a.Pod = "ab", "c"
	b.Namespace, b.Pod = "a", "bc"
	ha, _ := Hash(a)
	hb, _ := Hash(b)
	if ha == hb {
		t.Error(`namespace "ab", pod "c" and namespace "a", pod "bc" hash alike`)
	}
}
