package policy_test

import (
	"slices"
	"testing"

	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar/policy"
)

func TestNamesAreTheConfigurationsPoliciesWithoutTheDefault(t *testing.T) {
	cfg := meshconfig.DefaultConfig(meshconfig.DefaultPolicy)
	cfg.Topics = []meshconfig.TopicPolicy{
		{Name: "orders", Subject: "orders.>", MaxMessageBytes: 100},
		{Name: "eu-created", Subject: "orders.eu.created", MaxMessageBytes: 300},
		{Name: "audit", Subject: "audit", MaxMessageBytes: 10},
	}
	limits := meshconfig.Limits{MaxPendingMessages: 10, MaxPendingBytes: 1000}
	cfg.Subscriptions = []meshconfig.SubscriptionPolicy{
		{Name: "workers", Subject: "jobs.*", Limits: limits},
		{Name: "all-jobs", Subject: "jobs.>", Limits: limits},
	}
	p, err := policy.Compile(cfg, policy.NewCounters())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.TopicNames(), []string{"audit", "eu-created", "orders"}; !slices.Equal(got, want) {
		t.Errorf("TopicNames() = %q, want %q", got, want)
	}
	if got, want := p.SubscriptionNames(), []string{"all-jobs", "workers"}; !slices.Equal(got, want) {
		t.Errorf("SubscriptionNames() = %q, want %q", got, want)
	}
	// Matching still works on the trie that was walked.
	if topic, _ := p.Governing("orders.eu.created", nil); topic.Policy.Name != "eu-created" {
		t.Errorf("orders.eu.created is governed by %q after TopicNames", topic.Policy.Name)
	}

	empty, err := policy.Compile(meshconfig.DefaultConfig(meshconfig.DefaultPolicy), policy.NewCounters())
	if err != nil {
		t.Fatal(err)
	}
	if got := empty.TopicNames(); len(got) != 0 {
		t.Errorf("the defaults have Topics %q", got)
	}
	if got := empty.SubscriptionNames(); len(got) != 0 {
		t.Errorf("the defaults have Subscriptions %q", got)
	}
}
