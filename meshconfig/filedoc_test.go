package meshconfig_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/weighstation/weighstation/meshconfig"
)

// document decodes JSON as configfile does: numbers kept exact.
func document(t *testing.T, s string) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("test document %s: %v", s, err)
	}
	return doc
}

// TestAnEmptyDocumentIsTheDefaultConfiguration: a file that says nothing
// means what a sidecar without one enforces, version included.
func TestAnEmptyDocumentIsTheDefaultConfiguration(t *testing.T) {
	for _, doc := range []string{`{}`, `{"default": null, "topics": null, "subscriptions": [], "access": {}}`,
		`{"default": {"publishRate": {"messagesPerSecond": 1000, "messagesBurst": 2000, "bytesPerSecond": 8388608, "bytesBurst": 16777216}}}`} {
		got, err := meshconfig.FromDocument(document(t, doc))
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if want := meshconfig.DefaultConfig(meshconfig.DefaultPolicy); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", doc, got, want)
		}
	}
}

// TestFileDefaultsAreTheCRDs: what a file leaves out gets the default the
// same field has in the cluster.
func TestFileDefaultsAreTheCRDs(t *testing.T) {
	defaultRate := meshconfig.RateOrNil(meshconfig.DefaultPolicy.PublishRate)
	tests := []struct {
		name  string
		doc   string
		check func(t *testing.T, cfg meshconfig.PodConfig)
	}{
		{"a Topic may publish, 1 MiB, stamped, no quota", `{"topics": [{"name": "orders", "subject": "orders.>"}]}`, func(t *testing.T, cfg meshconfig.PodConfig) {
			want := meshconfig.TopicPolicy{Name: "orders", Subject: "orders.>", MaxMessageBytes: 1 << 20, MayPublish: true, StampHeader: true}
			if got := cfg.Topics[0]; !got.Equal(want) {
				t.Errorf("got %+v, want %+v", got, want)
			}
		}},
		{"a Topic that says so may not publish", `{"topics": [{"name": "orders", "subject": "orders.>", "mayPublish": false}]}`, func(t *testing.T, cfg meshconfig.PodConfig) {
			if cfg.Topics[0].MayPublish {
				t.Error("mayPublish: false was overridden")
			}
		}},
		{"a Subscription is essential with 1000 messages, 8 MiB, DropNewest", `{"subscriptions": [{"name": "billing", "subject": "orders.*"}]}`, func(t *testing.T, cfg meshconfig.PodConfig) {
			want := meshconfig.SubscriptionPolicy{Name: "billing", Subject: "orders.*", Essential: true,
				Limits: meshconfig.Limits{MaxPendingMessages: 1000, MaxPendingBytes: 8 << 20, Overflow: "DropNewest"}}
			if got := cfg.Subscriptions[0]; !got.Equal(want) {
				t.Errorf("got %+v, want %+v", got, want)
			}
		}},
		{"partial limits keep the other defaults", `{"subscriptions": [{"name": "b", "subject": "o", "limits": {"maxPendingMessages": 5}}]}`, func(t *testing.T, cfg meshconfig.PodConfig) {
			if want := (meshconfig.Limits{MaxPendingMessages: 5, MaxPendingBytes: 8 << 20, Overflow: "DropNewest"}); cfg.Subscriptions[0].Limits != want {
				t.Errorf("got %+v, want %+v", cfg.Subscriptions[0].Limits, want)
			}
		}},
		{"null is the same as nothing", `{"subscriptions": [{"name": "b", "subject": "o", "essential": null, "limits": null}]}`, func(t *testing.T, cfg meshconfig.PodConfig) {
			if sp := cfg.Subscriptions[0]; !sp.Essential || sp.Limits.MaxPendingMessages != 1000 {
				t.Errorf("got %+v", sp)
			}
		}},
		{"an automatic kill switch judges over 30s and cools down for 30s", `{"subscriptions": [{"name": "r", "subject": "o", "essential": false, "killSwitch": {"auto": {"maxLatencyMillis": 50}}}]}`, func(t *testing.T, cfg meshconfig.PodConfig) {
			if want := (meshconfig.AutoKillSwitch{MaxLatencyMillis: 50, WindowMillis: 30_000, CooldownMillis: 30_000}); *cfg.Subscriptions[0].KillSwitch.Auto != want {
				t.Errorf("got %+v, want %+v", *cfg.Subscriptions[0].KillSwitch.Auto, want)
			}
		}},
		{"no default block is the operator's default policy, quota included", `{"topics": []}`, func(t *testing.T, cfg meshconfig.PodConfig) {
			want := meshconfig.TopicPolicy{Subject: ">", MaxMessageBytes: 1 << 20, PublishRate: defaultRate, MayPublish: true, StampHeader: true}
			if !cfg.Default.Equal(want) {
				t.Errorf("got %+v, want %+v", cfg.Default, want)
			}
		}},
		{"a default block keeps the operator's size and stamp, and has no quota unless it says", `{"default": {"maxMessageBytes": 4096}}`, func(t *testing.T, cfg meshconfig.PodConfig) {
			want := meshconfig.TopicPolicy{Subject: ">", MaxMessageBytes: 4096, MayPublish: true, StampHeader: true}
			if !cfg.Default.Equal(want) {
				t.Errorf("got %+v, want %+v", cfg.Default, want)
			}
		}},
		{"an empty publishRate is no quota", `{"default": {"publishRate": {}}}`, func(t *testing.T, cfg meshconfig.PodConfig) {
			if cfg.Default.PublishRate != nil {
				t.Errorf("publishRate %+v, want none", *cfg.Default.PublishRate)
			}
		}},
		{"access is enforced", `{"access": {"inboxPrefix": "replies"}}`, func(t *testing.T, cfg meshconfig.PodConfig) {
			if want := (meshconfig.Access{Mode: "enforce", InboxPrefix: "replies"}); cfg.Access != want {
				t.Errorf("got %+v, want %+v", cfg.Access, want)
			}
		}},
		{"a version is kept", `{"version": "v7"}`, func(t *testing.T, cfg meshconfig.PodConfig) {
			if cfg.Version != "v7" {
				t.Errorf("version %q", cfg.Version)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := meshconfig.FromDocument(document(t, tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, cfg)
		})
	}
}

// TestFileProblemsNameTheirKeys: every refusal names the key by its path
// in the file, in the file's words (never a Go field or type name), and
// all problems are reported at once.
func TestFileProblemsNameTheirKeys(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"the Topic resource's limits", `{"topics": [{"name": "o", "subject": "o", "limits": {"maxMessageBytes": 4096}}]}`,
			[]string{"topics[0].limits: unknown field; did you mean maxMessageBytes and publishRate?", "the keys here: name, subject, maxMessageBytes, publishRate, mayPublish, stampHeader"}},
		{"the Topic resource's latency", `{"topics": [{"name": "o", "subject": "o", "latency": {}}]}`, []string{"topics[0].latency: unknown field; did you mean stampHeader?"}},
		{"a selector", `{"subscriptions": [{"name": "b", "subject": "o", "selector": {}}]}`, []string{"subscriptions[0].selector: unknown field; the file is this pod's own configuration"}},
		{"a resource", `{"apiVersion": "weighstation.io/v1alpha1", "kind": "Topic"}`, []string{"apiVersion: unknown field; the file is not a Kubernetes resource", "kind: unknown field"}},
		{"a typo", `{"topics": [{"name": "o", "subject": "o", "maxMesageBytes": 3}]}`, []string{"topics[0].maxMesageBytes: unknown field; did you mean maxMessageBytes?"}},
		{"another case", `{"Subscriptions": []}`, []string{"Subscriptions: unknown field; did you mean subscriptions?"}},
		{"a duration as in the resource", `{"subscriptions": [{"name": "r", "subject": "o", "killSwitch": {"auto": {"window": "30s"}}}]}`,
			[]string{"subscriptions[0].killSwitch.auto.window: unknown field; did you mean windowMillis? Durations are in milliseconds"}},
		{"a string for a number", `{"topics": [{"name": "o", "subject": "o", "maxMessageBytes": "4k"}]}`, []string{`topics[0].maxMessageBytes: want an integer, got the string "4k"`}},
		{"a fraction", `{"subscriptions": [{"name": "b", "subject": "o", "limits": {"maxPendingMessages": 1.5}}]}`, []string{"subscriptions[0].limits.maxPendingMessages: want an integer, got the number 1.5"}},
		{"out of range", `{"subscriptions": [{"name": "b", "subject": "o", "limits": {"maxPendingMessages": 3000000000}}]}`, []string{"subscriptions[0].limits.maxPendingMessages: 3000000000 is out of range"}},
		{"a number for a string", `{"version": 1}`, []string{"version: want a string, got the number 1 (quote it)"}},
		{"a mapping for a list", `{"topics": {"name": "o"}}`, []string{"topics: want a list, got a mapping"}},
		{"not a mapping", `[]`, []string{"the configuration must be a mapping with the keys namespace, pod, version, topics, default, subscriptions, access; got a list"}},
		{"zero pending messages", `{"subscriptions": [{"name": "a", "subject": "a"}, {"name": "b", "subject": "b", "limits": {"maxPendingMessages": 0}}]}`,
			[]string{"subscriptions[1].limits.maxPendingMessages must be positive, got 0"}},
		{"over the CRD's maximum", `{"subscriptions": [{"name": "b", "subject": "b", "limits": {"maxPendingBytes": 2147483648}}]}`,
			[]string{"subscriptions[0].limits.maxPendingBytes must be at most 1073741824 (1 GiB), got 2147483648"}},
		{"an unknown overflow", `{"subscriptions": [{"name": "b", "subject": "b", "limits": {"overflow": "dropOldest"}}]}`,
			[]string{`subscriptions[0].limits.overflow must be DropNewest or DropOldest, got "dropOldest"`}},
		{"no name, no subject", `{"topics": [{}]}`, []string{"topics[0].name is required", "topics[0].subject is required"}},
		{"duplicate names", `{"subscriptions": [{"name": "b", "subject": "a"}, {"name": "b", "subject": "b"}]}`, []string{`subscriptions[1].name "b" is subscriptions[0]'s too`}},
		{"one pattern twice", `{"topics": [{"name": "a", "subject": "o.>"}, {"name": "b", "subject": "o.>"}]}`, []string{`topics[1].subject "o.>" is topics[0]'s too`}},
		{"an invalid pattern", `{"topics": [{"name": "a", "subject": "o.>.x"}]}`, []string{`topics[0].subject "o.>.x":`}},
		{"a reserved pattern", `{"subscriptions": [{"name": "a", "subject": "$WEIGHSTATION.>"}]}`, []string{`subscriptions[0].subject "$WEIGHSTATION.>": subjects under $WEIGHSTATION are reserved`}},
		{"a rate without its burst", `{"topics": [{"name": "a", "subject": "a", "publishRate": {"messagesPerSecond": 10}}]}`,
			[]string{"topics[0].publishRate.messagesPerSecond and topics[0].publishRate.messagesBurst must be set together"}},
		{"a byte burst below the largest message", `{"default": {"maxMessageBytes": 4096, "publishRate": {"bytesPerSecond": 1024, "bytesBurst": 1024}}}`,
			[]string{"default.publishRate.bytesBurst (1024) must be at least default.maxMessageBytes (4096)"}},
		{"a Topic over 8 MiB", `{"topics": [{"name": "a", "subject": "a", "maxMessageBytes": 8388609}]}`, []string{"topics[0].maxMessageBytes must be at most 8388608 (8 MiB), got 8388609"}},
		{"a default for some subjects", `{"default": {"subject": "orders.>"}}`, []string{`default.subject must be ">"`}},
		{"automatic and essential", `{"subscriptions": [{"name": "r", "subject": "o", "killSwitch": {"auto": {"maxPendingMessages": 10}}}]}`,
			[]string{"subscriptions[0].killSwitch.auto is only allowed with subscriptions[0].essential: false"}},
		{"automatic with nothing to trip on", `{"subscriptions": [{"name": "r", "subject": "o", "essential": false, "killSwitch": {"auto": {}}}]}`,
			[]string{"subscriptions[0].killSwitch.auto needs maxPendingMessages, maxLatencyMillis or both"}},
		{"automatic past the queue", `{"subscriptions": [{"name": "r", "subject": "o", "essential": false, "limits": {"maxPendingMessages": 10}, "killSwitch": {"auto": {"maxPendingMessages": 11}}}]}`,
			[]string{"subscriptions[0].killSwitch.auto.maxPendingMessages (11) must not exceed subscriptions[0].limits.maxPendingMessages (10)"}},
		{"a window in seconds", `{"subscriptions": [{"name": "r", "subject": "o", "essential": false, "killSwitch": {"auto": {"maxLatencyMillis": 5, "windowMillis": 30}}}]}`,
			[]string{"subscriptions[0].killSwitch.auto.windowMillis must be between 1000 (1s) and 3600000 (1h), got 30"}},
		{"a queue group with a wildcard", `{"subscriptions": [{"name": "b", "subject": "o", "queueGroup": "a*"}]}`, []string{`subscriptions[0].queueGroup "a*" must be`}},
		{"an access mode", `{"access": {"mode": "permissive"}}`, []string{`access.mode must be enforce or audit, got "permissive"`}},
		{"an inbox prefix", `{"access": {"inboxPrefix": "$R"}}`, []string{"access.inboxPrefix: inbox prefix \"$R\": it must not start with '$'"}},
		{"all at once", `{"topics": [{"limits": {}}], "subscriptions": [{"name": "b"}]}`, []string{"topics[0].limits: unknown field"}},
		{"all at once, after the keys", `{"topics": [{}], "subscriptions": [{"name": "b"}]}`, []string{"topics[0].name is required", "topics[0].subject is required", "subscriptions[0].subject is required"}},
	}
	goNames := []string{"MaxPendingMessages", "TopicPolicy", "SubscriptionPolicy", "PodConfig", "int32", "int64", "Go struct"}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := meshconfig.FromDocument(document(t, tc.doc))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q:\n%v", want, err)
				}
			}
			for _, goName := range goNames {
				if strings.Contains(err.Error(), goName) {
					t.Errorf("the error names %q, a Go name:\n%v", goName, err)
				}
			}
		})
	}
}

// TestManyProblemsAreBounded: a file in another format altogether gets a
// readable error, not one line per key.
func TestManyProblemsAreBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"topics": [`)
	for i := range 30 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"limits": {}}`)
	}
	b.WriteString("]}")
	_, err := meshconfig.FromDocument(document(t, b.String()))
	if err == nil || !strings.Contains(err.Error(), "and 10 more") || strings.Count(err.Error(), "\n") != 20 {
		t.Fatalf("error:\n%v", err)
	}
}
