package policy_test

import (
	"testing"
	"time"

	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar/policy"
)

func TestGoverningTopicIsTheMostSpecific(t *testing.T) {
	cfg := meshconfig.DefaultConfig(meshconfig.DefaultPolicy)
	cfg.Topics = []meshconfig.TopicPolicy{
		{Name: "all-orders", Subject: "orders.>", MaxMessageBytes: 100},
		{Name: "eu-orders", Subject: "orders.eu.*", MaxMessageBytes: 200},
		{Name: "eu-created", Subject: "orders.eu.created", MaxMessageBytes: 300},
	}
	p, err := policy.Compile(cfg, policy.NewCounters())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ subject, want string }{
		{"orders.eu.created", "eu-created"},
		{"orders.eu.paid", "eu-orders"},
		{"orders.us.created", "all-orders"},
		{"orders.eu.created.late", "all-orders"},
		{"payments.eu", ""}, // the default policy
	}
	var buf []*policy.Topic
	for _, tc := range tests {
		var got *policy.Topic
		got, buf = p.Governing(tc.subject, buf)
		if got.Policy.Name != tc.want {
			t.Errorf("%s is governed by %q, want %q", tc.subject, got.Policy.Name, tc.want)
		}
	}
}

func TestQuotaSpendsBothBucketsOrNeither(t *testing.T) {
	topic := quotaTopic(t, meshconfig.Rate{MessagesPerSecond: 1, MessagesBurst: 3, BytesPerSecond: 1, BytesBurst: 150})
	now := time.Unix(0, 0)
	steps := []struct {
		size int
		want policy.Verdict
	}{
		{101, policy.RefuseSize}, // over the size limit: spends nothing
		{100, policy.Allow},      // 1 message, 100 bytes
		{60, policy.RefuseRate},  // 60 > 50 bytes left: the message token is not spent either
		{50, policy.Allow},       // 2 messages, 150 bytes
		{0, policy.Allow},        // 3 messages
		{0, policy.RefuseRate},   // no message tokens left
	}
	for i, s := range steps {
		if got := topic.Check(s.size, now); got != s.want {
			t.Fatalf("step %d (size %d): %v, want %v", i, s.size, got, s.want)
		}
	}
	c := topic.Counters
	if c.Attempts.Load() != 6 || c.RefusedSize.Load() != 1 || c.RefusedRate.Load() != 2 {
		t.Fatalf("attempts %d, size refusals %d, rate refusals %d", c.Attempts.Load(), c.RefusedSize.Load(), c.RefusedRate.Load())
	}
}

func TestInvalidConfigurationsAreRefused(t *testing.T) {
	base := meshconfig.DefaultConfig(meshconfig.DefaultPolicy)
	tests := []struct {
		name   string
		mutate func(*meshconfig.PodConfig)
	}{
		{"bad topic pattern", func(c *meshconfig.PodConfig) {
			c.Topics = []meshconfig.TopicPolicy{{Name: "x", Subject: "a..b", MaxMessageBytes: 1}}
		}},
		{"zero size limit", func(c *meshconfig.PodConfig) { c.Default.MaxMessageBytes = 0 }},
		{"byte burst below the size limit", func(c *meshconfig.PodConfig) {
			c.Topics = []meshconfig.TopicPolicy{{Name: "x", Subject: "a", MaxMessageBytes: 100, PublishRate: &meshconfig.Rate{BytesPerSecond: 10, BytesBurst: 99}}}
		}},
		{"bad subscription pattern", func(c *meshconfig.PodConfig) {
			c.Subscriptions = []meshconfig.SubscriptionPolicy{{Name: "s", Subject: "a.>.b", Limits: meshconfig.Limits{MaxPendingMessages: 1, MaxPendingBytes: 1}}}
		}},
		{"zero pending limit", func(c *meshconfig.PodConfig) {
			c.Subscriptions = []meshconfig.SubscriptionPolicy{{Name: "s", Subject: "a", Limits: meshconfig.Limits{MaxPendingMessages: 0, MaxPendingBytes: 1}}}
		}},
		{"automatic kill switch with nothing to trip on", func(c *meshconfig.PodConfig) {
			c.Subscriptions = []meshconfig.SubscriptionPolicy{{Name: "s", Subject: "a", Limits: meshconfig.Limits{MaxPendingMessages: 1, MaxPendingBytes: 1},
				KillSwitch: meshconfig.KillSwitch{Auto: &meshconfig.AutoKillSwitch{WindowMillis: 1000, CooldownMillis: 1000}}}}
		}},
		{"automatic kill switch without a cooldown", func(c *meshconfig.PodConfig) {
			c.Subscriptions = []meshconfig.SubscriptionPolicy{{Name: "s", Subject: "a", Limits: meshconfig.Limits{MaxPendingMessages: 1, MaxPendingBytes: 1},
				KillSwitch: meshconfig.KillSwitch{Auto: &meshconfig.AutoKillSwitch{MaxPendingMessages: 1, WindowMillis: 1000}}}}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.mutate(&cfg)
			if _, err := policy.Compile(cfg, policy.NewCounters()); err == nil {
				t.Fatal("compiled")
			}
		})
	}
}

func TestSubscriptionForPicksTheMostSpecificCover(t *testing.T) {
	cfg := meshconfig.DefaultConfig(meshconfig.DefaultPolicy)
	lim := meshconfig.Limits{MaxPendingMessages: 1, MaxPendingBytes: 1}
	cfg.Subscriptions = []meshconfig.SubscriptionPolicy{
		{Name: "all", Subject: "orders.>", Limits: lim},
		{Name: "eu", Subject: "orders.eu.*", Limits: lim},
	}
	p, err := policy.Compile(cfg, policy.NewCounters())
	if err != nil {
		t.Fatal(err)
	}
	for pattern, want := range map[string]string{"orders.eu.created": "eu", "orders.eu.*": "eu", "orders.us.*": "all", "orders.>": "all", "_INBOX.abc.*": ""} {
		sp, ok := p.SubscriptionFor(pattern)
		if sp.Name != want || ok != (want != "") {
			t.Errorf("SubscriptionFor(%q) = %q, %v; want %q", pattern, sp.Name, ok, want)
		}
	}
}

// TestQuotaCreditsOutOfOrderTimesOnce: connections charge a Topic with the
// times their reads returned, out of order. One connection's times lag the
// other's by 500 ms while the two take turns for one second: the buckets
// must allow what one second allows (the burst and a second's refill), not
// refill on every turn.
func TestQuotaCreditsOutOfOrderTimesOnce(t *testing.T) {
	topic := quotaTopic(t, meshconfig.Rate{MessagesPerSecond: 100, MessagesBurst: 10, BytesPerSecond: 10_000, BytesBurst: 1_000})
	start := time.Unix(1_000, 0)
	allowed := 0
	for i := range 1000 {
		ahead := start.Add(time.Duration(i) * time.Millisecond)
		for _, now := range []time.Time{ahead, ahead.Add(-500 * time.Millisecond)} {
			if topic.Check(10, now) == policy.Allow {
				allowed++
			}
		}
	}
	// 10 at once, then 100/s over 0.999 s: 109 (bytes allow 1,099).
	if allowed < 105 || allowed > 110 {
		t.Fatalf("allowed %d of 2,000 publishes over one second, want about 109 (burst 10 + 100/s)", allowed)
	}
}

// quotaTopic compiles a configuration with one Topic, "q" (messages up to
// 100 bytes), under the given quota, and returns it.
func quotaTopic(t *testing.T, quota meshconfig.Rate) *policy.Topic {
	t.Helper()
	cfg := meshconfig.DefaultConfig(meshconfig.DefaultPolicy)
	cfg.Topics = []meshconfig.TopicPolicy{{Name: "q", Subject: "q", MaxMessageBytes: 100, PublishRate: &quota}}
	p, err := policy.Compile(cfg, policy.NewCounters())
	if err != nil {
		t.Fatal(err)
	}
	topic, _ := p.Governing("q", nil)
	return topic
}

// TestQuotaOutlivesRecompilation: a Topic's buckets are its name's, not
// one compiled configuration's. Compiling again (any change to the pod's
// configuration, even to nothing) refills nothing; a new rate applies to
// the tokens left, from the first charge under it. Before, every
// compilation made new, full buckets.
func TestQuotaOutlivesRecompilation(t *testing.T) {
	counters := policy.NewCounters()
	compile := func(r meshconfig.Rate) *policy.Topic {
		t.Helper()
		cfg := meshconfig.DefaultConfig(meshconfig.DefaultPolicy)
		cfg.Topics = []meshconfig.TopicPolicy{{Name: "q", Subject: "q", MaxMessageBytes: 100, PublishRate: &r}}
		p, err := policy.Compile(cfg, counters)
		if err != nil {
			t.Fatal(err)
		}
		topic, _ := p.Governing("q", nil)
		return topic
	}
	allowed := func(topic *policy.Topic, n int, at time.Time) int {
		ok := 0
		for range n {
			if topic.Check(10, at) == policy.Allow {
				ok++
			}
		}
		return ok
	}
	slow := meshconfig.Rate{MessagesPerSecond: 1, MessagesBurst: 5}
	start := time.Now()
	for _, tc := range []struct {
		step  string
		topic *policy.Topic
		at    time.Duration
		want  int
	}{
		{"the burst", compile(slow), 0, 5},
		{"the same configuration again: nothing refilled", compile(slow), 0, 0},
		{"a faster rate: one token accrued at the old rate until it applies", compile(meshconfig.Rate{MessagesPerSecond: 10, MessagesBurst: 5}), time.Second, 1},
		{"then the new rate, up to the burst", compile(meshconfig.Rate{MessagesPerSecond: 10, MessagesBurst: 5}), 1500 * time.Millisecond, 5},
		{"no quota", compile(meshconfig.Rate{}), 1500 * time.Millisecond, 20},
	} {
		if got := allowed(tc.topic, 20, start.Add(tc.at)); got != tc.want {
			t.Fatalf("%s: %d of 20 allowed, want %d", tc.step, got, tc.want)
		}
	}
}
