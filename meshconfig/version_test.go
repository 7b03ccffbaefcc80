package meshconfig_test

import (
	"reflect"
	"testing"

	"github.com/weighstation/weighstation/meshconfig"
)

// Every field of a configuration but Version changes its hash: the hash's
// encoding is written by hand, and a field added to the types without it
// would leave two different configurations with one version. The test
// walks the types by reflection, so a new field is tested without being
// named here.
func TestHashCoversEveryField(t *testing.T) {
	base := func() meshconfig.PodConfig {
		return meshconfig.PodConfig{
			Namespace: "shop", Pod: "p-0", Version: "v",
			Topics:  []meshconfig.TopicPolicy{{Name: "orders", Subject: "orders.>", MaxMessageBytes: 1, PublishRate: &meshconfig.Rate{MessagesPerSecond: 1, MessagesBurst: 1, BytesPerSecond: 1, BytesBurst: 1}}},
			Default: meshconfig.TopicPolicy{Subject: ">", MaxMessageBytes: 1, PublishRate: &meshconfig.Rate{MessagesPerSecond: 1, MessagesBurst: 1, BytesPerSecond: 1, BytesBurst: 1}},
			Subscriptions: []meshconfig.SubscriptionPolicy{{Name: "billing", Subject: "orders.*", QueueGroup: "q",
				KillSwitch: meshconfig.KillSwitch{Reason: "r", Auto: &meshconfig.AutoKillSwitch{MaxPendingMessages: 1, MaxLatencyMillis: 1, WindowMillis: 1, CooldownMillis: 1}},
				Limits:     meshconfig.Limits{MaxPendingMessages: 1, MaxPendingBytes: 1, Overflow: "DropNewest"}}},
			Access: meshconfig.Access{Mode: "enforce", InboxPrefix: "_I"},
		}
	}
	want, _ := meshconfig.Hash(base())
	// Each path is a way to one leaf of a fresh base configuration.
	var paths [][]int
	var walk func(typ reflect.Type, path []int)
	walk = func(typ reflect.Type, path []int) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			p := append(append([]int(nil), path...), i)
			ft := f.Type
			for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				walk(ft, p)
				continue
			}
			paths = append(paths, p)
		}
	}
	walk(reflect.TypeOf(meshconfig.PodConfig{}), nil)
	for _, path := range paths {
		cfg := base()
		v := reflect.ValueOf(&cfg).Elem()
		name := ""
		for _, i := range path {
			for v.Kind() == reflect.Pointer || v.Kind() == reflect.Slice {
				if v.Kind() == reflect.Slice {
					v = v.Index(0)
				} else {
					v = v.Elem()
				}
			}
			name += "." + v.Type().Field(i).Name
			v = v.Field(i)
		}
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "x")
		case reflect.Bool:
			v.SetBool(!v.Bool())
		case reflect.Int32, reflect.Int64:
			v.SetInt(v.Int() + 1)
		default:
			t.Fatalf("field %s is a %s: teach this test (and Hash) about it", name, v.Kind())
		}
		got, _ := meshconfig.Hash(cfg)
		if name == ".Version" {
			if got != want {
				t.Fatal("the Version field changed the hash it is computed from")
			}
			continue
		}
		if got == want {
			t.Errorf("changing %s left the hash as it was", name)
		}
	}
	// Optional parts: absent is not zero.
	cfg := base()
	cfg.Topics[0].PublishRate = &meshconfig.Rate{}
	zeroRate, _ := meshconfig.Hash(cfg)
	cfg.Topics[0].PublishRate = nil
	noRate, _ := meshconfig.Hash(cfg)
	if zeroRate == noRate {
		t.Error("a zero publish rate and none hash alike")
	}
	// Strings are delimited: moving a byte from one to the next changes it.
	a, b := base(), base()
	a.Namespace, a.Pod = "ab", "c"
	b.Namespace, b.Pod = "a", "bc"
	ha, _ := meshconfig.Hash(a)
	hb, _ := meshconfig.Hash(b)
	if ha == hb {
		t.Error(`namespace "ab", pod "c" and namespace "a", pod "bc" hash alike`)
	}
}
