package brokercreds

import (
	"slices"
	"testing"

	"github.com/weighstation/weighstation/meshconfig"
)

// boundConfig is a namespace's policy as one pod sees it: it may publish
// to orders and to payment refunds, not to payments in general nor to
// audit records; it names $KV in a Topic it publishes to and $JS in a
// Subscription, and $O only in a Topic it may not publish to.
func boundConfig(mode string) meshconfig.PodConfig {
	return meshconfig.PodConfig{
		Namespace: "shop", Pod: "orders-0",
		Topics: []meshconfig.TopicPolicy{
			{Name: "kv", Subject: "$KV.config.>", MaxMessageBytes: 100, MayPublish: true},
			{Name: "objects", Subject: "$O.store.>", MaxMessageBytes: 100, MayPublish: false},
			{Name: "audit", Subject: "audit.*", MaxMessageBytes: 100, MayPublish: false},
			{Name: "orders", Subject: "orders.>", MaxMessageBytes: 1024, MayPublish: true},
			{Name: "payments", Subject: "payments.>", MaxMessageBytes: 4096, MayPublish: false},
			{Name: "refunds", Subject: "payments.refunds", MaxMessageBytes: 512, MayPublish: true},
			{Name: "reserved", Subject: "$WEIGHSTATION.>", MaxMessageBytes: 100, MayPublish: true},
		},
		Default: meshconfig.TopicPolicy{Subject: ">", MaxMessageBytes: 256, MayPublish: true},
		Subscriptions: []meshconfig.SubscriptionPolicy{
			{Name: "orders", Subject: "orders.>"},
			{Name: "streams", Subject: "$JS.API.>"},
			{Name: "reserved", Subject: "$WEIGHSTATION.x"},
		},
		Access: meshconfig.Access{Mode: mode},
	}
}

const testInbox = "_INBOX.abcdefghijklmnopqrst"

func TestBoundOf(t *testing.T) {
	tests := []struct {
		name          string
		cfg           meshconfig.PodConfig
		namespaceSubs []string
		want          meshconfig.BrokerBound
	}{{
		// payments.> is not denied: payments.refunds, more specific and
		// open to the pod, overlaps it (a deny would win over it). audit.*
		// is. $KV and $JS are named; $O only by a Topic the pod may not
		// publish to (which is denied as a Topic too). The namespace's
		// other Subscriptions are not the
		// pod's. $WEIGHSTATION stays shut, named or not.
		name:          "enforce",
		cfg:           boundConfig(meshconfig.AccessEnforce),
		namespaceSubs: []string{"inventory.>"},
		want: meshconfig.BrokerBound{
			PublishAllow:   []string{">"},
			PublishDeny:    []string{"$O.>", "$O.store.>", "$SRV.>", "$SYS.>", "$WEIGHSTATION.>", "audit.*"},
			SubscribeAllow: []string{"$JS.API.>", testInbox + ".>", "orders.>"},
			MaxPayload:     4096 + meshconfig.ReservedHeaderRoom,
		},
	}, {
		// Audit: the pod may try anything of its namespace, so every
		// Topic's '$' token is open, no Topic is denied, and every
		// Subscription of the namespace may be subscribed to.
		name:          "audit",
		cfg:           boundConfig(meshconfig.AccessAudit),
		namespaceSubs: []string{"inventory.>", "$WEIGHSTATION.>", "$SRV.INFO"},
		want: meshconfig.BrokerBound{
			PublishAllow:   []string{">"},
			PublishDeny:    []string{"$SYS.>", "$WEIGHSTATION.>"},
			SubscribeAllow: []string{"$JS.API.>", "$SRV.INFO", testInbox + ".>", "inventory.>", "orders.>"},
			MaxPayload:     4096 + meshconfig.ReservedHeaderRoom,
		},
	}, {
		// No Topics and no Subscriptions: the default policy's size, its
		// own inboxes, and every '$' space shut.
		name: "defaults only",
		cfg: meshconfig.PodConfig{
			Default: meshconfig.TopicPolicy{Subject: ">", MaxMessageBytes: 1 << 20, MayPublish: true},
			Access:  meshconfig.Access{Mode: meshconfig.AccessEnforce},
		},
		want: meshconfig.BrokerBound{
			PublishAllow:   []string{">"},
			PublishDeny:    []string{"$JS.>", "$KV.>", "$O.>", "$SRV.>", "$SYS.>", "$WEIGHSTATION.>"},
			SubscribeAllow: []string{testInbox + ".>"},
			MaxPayload:     1<<20 + meshconfig.ReservedHeaderRoom,
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := meshconfig.BrokerBoundOf(tt.cfg, testInbox, tt.namespaceSubs)
			if !slices.Equal(got.PublishAllow, tt.want.PublishAllow) {
				t.Errorf("PublishAllow = %q, want %q", got.PublishAllow, tt.want.PublishAllow)
			}
			if !slices.Equal(got.PublishDeny, tt.want.PublishDeny) {
				t.Errorf("PublishDeny = %q, want %q", got.PublishDeny, tt.want.PublishDeny)
			}
			if !slices.Equal(got.SubscribeAllow, tt.want.SubscribeAllow) {
				t.Errorf("SubscribeAllow = %q, want %q", got.SubscribeAllow, tt.want.SubscribeAllow)
			}
			if got.MaxPayload != tt.want.MaxPayload {
				t.Errorf("MaxPayload = %d, want %d", got.MaxPayload, tt.want.MaxPayload)
			}
			if !got.Covers(got) {
				t.Error("a bound does not cover itself")
			}
		})
	}
}

// A Topic the pod may not publish to is denied, unless a more specific
// Topic that it may publish to overlaps it: nats-server's deny wins over
// every allow, so denying the general Topic would refuse the specific
// one. Each case is one such pair; which way it goes is overlaps' and the
// specificity order's.
func TestBoundDeniesATopicUnlessAMoreSpecificAllowedOneOverlaps(t *testing.T) {
	tests := []struct {
		denied, allowed string
		wantDenied      bool
	}{
		{"payments.>", "payments.refunds", false},     // '>' covers the rest
		{"payments.*", "payments.refunds", false},     // '*' against a literal
		{"*.created", "orders.*", false},              // a.b matches both
		{">", "orders.>", false},                      // a catch-all Topic
		{"payments.*", "payments.refunds.x", true},    // one token more: no subject matches both
		{"orders.*", "payments.x", true},              // literals differ
		{"a.>", "a", true},                            // '>' needs one token or more
		{"orders.created", "orders.*", true},          // the allowed one is less specific
		{"payments.refunds", "payments.>", true},      // likewise
		{"audit.*.x", "audit.eu.y", true},             // the last literals differ
		{"audit.*.x.>", "audit.eu.*.y.z", false},      // token by token
		{"audit.*.x.>", "audit.eu.*", true},           // shorter than '>' needs
		{"audit.*.x", "audit.eu.*.y", true},           // longer
		{"audit.eu.x", "audit.eu.x.y", true},          // a literal Topic and a longer one
		{"$JS.API.>", "$JS.API.STREAM.INFO.*", false}, // '$' Topics alike
	}
	for _, tt := range tests {
		t.Run(tt.denied+" vs "+tt.allowed, func(t *testing.T) {
			cfg := meshconfig.PodConfig{
				Topics: []meshconfig.TopicPolicy{
					{Subject: tt.denied, MaxMessageBytes: 1, MayPublish: false},
					{Subject: tt.allowed, MaxMessageBytes: 1, MayPublish: true},
				},
				Default: meshconfig.TopicPolicy{Subject: ">", MaxMessageBytes: 1, MayPublish: true},
				Access:  meshconfig.Access{Mode: meshconfig.AccessEnforce},
			}
			b := meshconfig.BrokerBoundOf(cfg, testInbox, nil)
			if got := slices.Contains(b.PublishDeny, tt.denied); got != tt.wantDenied {
				t.Errorf("%q denied: %v, want %v (deny list %q)", tt.denied, got, tt.wantDenied, b.PublishDeny)
			}
			if slices.Contains(b.PublishDeny, tt.allowed) {
				t.Errorf("the Topic the pod may publish to, %q, is denied", tt.allowed)
			}
		})
	}
}

// Covers: a credential needs no renewal for a configuration whose bound
// allows no more than the credential's.
func TestBoundCovers(t *testing.T) {
	base := meshconfig.BrokerBound{
		PublishAllow:   []string{">"},
		PublishDeny:    []string{"$JS.>", "$WEIGHSTATION.>", "audit.*"},
		SubscribeAllow: []string{testInbox + ".>", "orders.>"},
		MaxPayload:     1024,
	}
	with := func(change func(*meshconfig.BrokerBound)) meshconfig.BrokerBound {
		b := base
		b.PublishAllow = slices.Clone(base.PublishAllow)
		b.PublishDeny = slices.Clone(base.PublishDeny)
		b.SubscribeAllow = slices.Clone(base.SubscribeAllow)
		change(&b)
		return b
	}
	tests := []struct {
		name string
		want meshconfig.BrokerBound
		ok   bool
	}{
		{"the same", with(func(*meshconfig.BrokerBound) {}), true},
		{"a smaller payload", with(func(b *meshconfig.BrokerBound) { b.MaxPayload = 10 }), true},
		{"a larger payload", with(func(b *meshconfig.BrokerBound) { b.MaxPayload = 1025 }), false},
		{"a Subscription less", with(func(b *meshconfig.BrokerBound) { b.SubscribeAllow = b.SubscribeAllow[:1] }), true},
		{"a Subscription more", with(func(b *meshconfig.BrokerBound) { b.SubscribeAllow = append(b.SubscribeAllow, "payments.>") }), false},
		{"another inbox", with(func(b *meshconfig.BrokerBound) { b.SubscribeAllow[0] = "_INBOX.other.>" }), false},
		{"a deny more (narrower)", with(func(b *meshconfig.BrokerBound) { b.PublishDeny = append(b.PublishDeny, "payments.>") }), true},
		{"a deny less (a Topic opened)", with(func(b *meshconfig.BrokerBound) { b.PublishDeny = b.PublishDeny[:2] }), false},
		{"a '$' space opened", with(func(b *meshconfig.BrokerBound) { b.PublishDeny = b.PublishDeny[1:] }), false},
		{"a publish allow more", with(func(b *meshconfig.BrokerBound) { b.PublishAllow = append(b.PublishAllow, "x") }), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := base.Covers(tt.want); got != tt.ok {
				t.Errorf("Covers = %v, want %v", got, tt.ok)
			}
		})
	}
}
