package configfile_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar/configfile"
	"github.com/weighstation/weighstation/sidecar/policy"
)

// TestLoadNamesTheFormatItRead: errors say YAML for a YAML file and JSON
// for a JSON one, by extension or, without one, by content, and carry the
// key's path or the syntax error's position.
func TestLoadNamesTheFormatItRead(t *testing.T) {
	tests := []struct {
		name, file, content string
		want                []string
	}{
		{"the Topic resource's shape in YAML", "pod.yaml", "topics:\n- name: orders\n  subject: orders.>\n  limits:\n    maxMessageBytes: 4096\n",
			[]string{"as YAML: topics[0].limits: unknown field; did you mean maxMessageBytes and publishRate?"}},
		{"the same in JSON", "pod.json", `{"topics": [{"name": "orders", "subject": "orders.>", "limits": {"maxMessageBytes": 4096}}]}`,
			[]string{"as JSON: topics[0].limits: unknown field"}},
		{"JSON without an extension", "pod", `{"topics": [{"limits": {}}]}`, []string{"as JSON: topics[0].limits"}},
		{"YAML without an extension", "pod.conf", "topics:\n- limits: {}\n", []string{"as YAML: topics[0].limits"}},
		{"a .yml file", "pod.yml", "version: [", []string{"as YAML: "}},
		{"a YAML syntax error", "pod.yaml", "topics: [x\n", []string{"as YAML: line 1: did not find expected ',' or ']'"}},
		{"a JSON syntax error", "pod.json", "{\n  \"topics\": [}\n", []string{"as JSON: line 2, column 14: invalid character '}'"}},
		{"two YAML documents", "pod.yaml", "version: a\n---\nversion: b\n", []string{"as YAML: more than one document"}},
		{"two JSON documents", "pod.json", `{"version": "a"} {"version": "b"}`, []string{"as JSON: more than one document"}},
		{"a key given twice", "pod.yaml", "version: a\nversion: b\n", []string{"as YAML: ", `key "version" already set`}},
		{"zero pending messages", "pod.yaml", "subscriptions:\n- name: a\n  subject: a\n- name: b\n  subject: b\n  limits: {maxPendingMessages: 0}\n",
			[]string{"as YAML: subscriptions[1].limits.maxPendingMessages must be positive, got 0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), tc.file)
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := configfile.Load(path)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, want := range append(tc.want, "decoding "+path) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q:\n%v", want, err)
				}
			}
			if strings.Contains(err.Error(), "converting YAML to JSON") {
				t.Errorf("the error speaks of a conversion the user never asked for:\n%v", err)
			}
		})
	}
}

// TestTheSampleConfigurationLoads: the documented example is a valid
// configuration and means what its comments say.
func TestTheSampleConfigurationLoads(t *testing.T) {
	cfg, _, err := configfile.Load("../../config/samples/sidecar/sidecar-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Version != "v1" || cfg.Namespace != "shop" || cfg.Pod != "checkout-0" {
		t.Errorf("identity %q/%q version %q", cfg.Namespace, cfg.Pod, cfg.Version)
	}
	if want := meshconfig.DefaultConfig(meshconfig.DefaultPolicy).Default; !cfg.Default.Equal(want) {
		t.Errorf("default %+v, want the operator's default policy %+v, as its comment says", cfg.Default, want)
	}
	wantTopics := []meshconfig.TopicPolicy{
		{Name: "orders", Subject: "orders.>", MaxMessageBytes: 262144, MayPublish: true, StampHeader: true,
			PublishRate: &meshconfig.Rate{MessagesPerSecond: 500, MessagesBurst: 1000, BytesPerSecond: 4 << 20, BytesBurst: 8 << 20}},
		{Name: "orders-eu", Subject: "orders.eu.*", MaxMessageBytes: 65536, MayPublish: true},
	}
	equalPolicies(t, "topics", cfg.Topics, wantTopics)
	wantSubs := []meshconfig.SubscriptionPolicy{
		{Name: "billing", Subject: "orders.*.created", QueueGroup: "billing", Essential: true,
			Limits: meshconfig.Limits{MaxPendingMessages: 5000, MaxPendingBytes: 8 << 20, Overflow: "DropOldest"}},
		{Name: "recommendations", Subject: "orders.>",
			Limits:     meshconfig.Limits{MaxPendingMessages: 1000, MaxPendingBytes: 8 << 20, Overflow: "DropNewest"},
			KillSwitch: meshconfig.KillSwitch{Auto: &meshconfig.AutoKillSwitch{MaxPendingMessages: 200, MaxLatencyMillis: 50, WindowMillis: 30_000, CooldownMillis: 60_000}}},
	}
	equalPolicies(t, "subscriptions", cfg.Subscriptions, wantSubs)
	if cfg.Access != (meshconfig.Access{Mode: meshconfig.AccessEnforce}) {
		t.Errorf("access %+v", cfg.Access)
	}
	if _, err := policy.Compile(cfg, policy.NewCounters()); err != nil {
		t.Errorf("the sidecar refuses the sample: %v", err)
	}
}

// TestAFullyWrittenFileMeansWhatItDidBefore: a file that gives every key,
// as the benchmarks' do, decodes to what the plain strict decoding of the
// first file format gave, version aside. (A key left out now gets the
// CRDs' default where it got Go's zero value: stampHeader true, say.)
func TestAFullyWrittenFileMeansWhatItDidBefore(t *testing.T) {
	files := map[string]string{
		"bench-sidecar's": `
version: bench
default: {subject: ">", maxMessageBytes: 1048576, mayPublish: true, stampHeader: true}
topics: []
subscriptions:
- {name: bench, subject: "bench.>", essential: true, killSwitch: {engaged: false}, limits: {maxPendingMessages: 100000, maxPendingBytes: 33554432, overflow: DropNewest}}
access: {mode: enforce}
`,
		"bench-overload's": `
default: {subject: ">", maxMessageBytes: 1048576, mayPublish: true, stampHeader: true}
topics:
- {name: load, subject: "load.>", maxMessageBytes: 1048576, mayPublish: true, stampHeader: true, publishRate: {messagesPerSecond: 500, messagesBurst: 100}}
subscriptions:
- {name: optional, subject: "load.>", essential: false, killSwitch: {engaged: false}, limits: {maxPendingMessages: 100000, maxPendingBytes: 67108864, overflow: DropNewest}}
- {name: critical, subject: "probe.>", essential: true, killSwitch: {engaged: false}, limits: {maxPendingMessages: 100000, maxPendingBytes: 33554432, overflow: DropNewest}}
access: {mode: enforce}
`,
	}
	for name, content := range files {
		t.Run(name, func(t *testing.T) {
			var before meshconfig.PodConfig
			if err := yaml.UnmarshalStrict([]byte(content), &before); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "pod.yaml")
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			now, _, err := configfile.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if before.Version == "" {
				before.Version = now.Version // the hash a file without one gets now
			}
			if before.Topics == nil {
				before.Topics = []meshconfig.TopicPolicy{}
			}
			if !reflect.DeepEqual(now, before) {
				t.Errorf("now  %+v\nwas %+v", now, before)
			}
		})
	}
}

// equalPolicies expects got to be want, policy by policy (Equal); name
// says which list.
func equalPolicies[P interface{ Equal(P) bool }](t *testing.T, name string, got, want []P) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s %+v", name, got)
	}
	for i := range want {
		if !got[i].Equal(want[i]) {
			t.Errorf("%s[%d] = %+v, want %+v", name, i, got[i], want[i])
		}
	}
}
