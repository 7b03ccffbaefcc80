package policy_test

import (
	"testing"

	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar/policy"
)

func accessConfig(t *testing.T, a meshconfig.Access) *policy.Publish {
	t.Helper()
	cfg := meshconfig.DefaultConfig(meshconfig.DefaultPolicy)
	cfg.Access = a
	limits := meshconfig.Limits{MaxPendingMessages: 1, MaxPendingBytes: 1}
	cfg.Subscriptions = []meshconfig.SubscriptionPolicy{
		{Name: "orders", Subject: "orders.*", Limits: limits},
		{Name: "kv", Subject: "$KV.config.>", Limits: limits},
		{Name: "everything-else", Subject: "events.>", Limits: limits},
	}
	cfg.Topics = []meshconfig.TopicPolicy{
		{Name: "orders", Subject: "orders.>", MaxMessageBytes: 10, MayPublish: true},
		{Name: "audit-log", Subject: "audit.>", MaxMessageBytes: 10, MayPublish: false},
		{Name: "js", Subject: "$JS.API.>", MaxMessageBytes: 10, MayPublish: true},
		{Name: "wide", Subject: ">", MaxMessageBytes: 10, MayPublish: true},
	}
	p, err := policy.Compile(cfg, policy.NewCounters())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckSubscribe(t *testing.T) {
	p := accessConfig(t, meshconfig.Access{Mode: meshconfig.AccessEnforce, InboxPrefix: "_MY.replies"})
	for pattern, want := range map[string]policy.Rule{
		"orders.eu":              policy.Allowed,
		"orders.*":               policy.Allowed,
		"orders.>":               policy.RuleNotCovered, // wider than the Subscription
		"payments.eu":            policy.RuleNotCovered,
		"_INBOX.abc":             policy.Allowed,
		"_INBOX.abc.*":           policy.Allowed, // nats.go's response mux
		"_INBOX.abc.>":           policy.Allowed,
		"_INBOX.>":               policy.RuleInboxWildcard,
		"_INBOX.*":               policy.RuleInboxWildcard,
		"_INBOX.*.x":             policy.RuleInboxWildcard,
		"_INBOX":                 policy.RuleInboxWildcard,
		"_MY.replies.abc.*":      policy.Allowed,
		"_MY.replies.>":          policy.RuleInboxWildcard,
		"_MY.other":              policy.RuleNotCovered, // not under the prefix
		"$KV.config.db":          policy.Allowed,
		"$KV.secrets.db":         policy.RuleDollar,
		"$SYS.>":                 policy.RuleDollar,
		"$WEIGHSTATION.x":        policy.RuleReserved,
		"events.$WEIGHSTATION":   policy.Allowed, // only the first token is reserved
		"events.anything.at.all": policy.Allowed,
	} {
		if got := p.CheckSubscribe(pattern); got != want {
			t.Errorf("CheckSubscribe(%q) = %s, want %s", pattern, got, want)
		}
	}
}

func TestCheckPublish(t *testing.T) {
	p := accessConfig(t, meshconfig.Access{Mode: meshconfig.AccessEnforce})
	var buf []*policy.Topic
	for subject, want := range map[string]policy.Rule{
		"orders.eu":          policy.Allowed,
		"audit.login":        policy.RuleNotPublisher,
		"anything":           policy.Allowed, // the wide Topic
		"$JS.API.INFO":       policy.Allowed,
		"$KV.config.db":      policy.RuleDollar, // a Subscription names it, not a Topic; the wide '>' does not name it
		"$SYS.REQ.SERVER":    policy.RuleDollar,
		"$WEIGHSTATION.ping": policy.RuleReserved,
	} {
		var topic *policy.Topic
		topic, buf = p.Governing(subject, buf)
		if got := p.CheckPublish(subject, topic); got != want {
			t.Errorf("CheckPublish(%q) under %q = %s, want %s", subject, topic.Policy.Name, got, want)
		}
	}
}

func TestAccessModes(t *testing.T) {
	for _, tc := range []struct {
		mode      string
		wantAudit bool
		wantErr   bool
	}{
		{meshconfig.AccessEnforce, false, false},
		{"", false, false},
		{meshconfig.AccessAudit, true, false},
		{"loose", false, true},
	} {
		cfg := meshconfig.DefaultConfig(meshconfig.DefaultPolicy)
		cfg.Access.Mode = tc.mode
		p, err := policy.Compile(cfg, policy.NewCounters())
		if (err != nil) != tc.wantErr || (err == nil && p.Audit() != tc.wantAudit) {
			t.Errorf("mode %q: %v, audit %v; want error %v, audit %v", tc.mode, err, err == nil && p.Audit(), tc.wantErr, tc.wantAudit)
		}
	}
}
