package v1alpha1_test

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/weighstation/weighstation/meshconfig"
)

// TestSidecarFileDefaultsAreTheCRDs: a sidecar's configuration file gives
// the fields it leaves out meshconfig's copies of the CRDs' defaults (the
// sidecar may not import this package). This compares them with the
// generated CRDs, so that a changed kubebuilder marker fails here until
// meshconfig follows.
func TestSidecarFileDefaultsAreTheCRDs(t *testing.T) {
	tests := []struct {
		crd, path, keyword string
		want               any
	}{
		{"topics", "limits.maxMessageBytes", "default", meshconfig.DefaultTopicMaxMessageBytes},
		{"topics", "limits.maxMessageBytes", "maximum", meshconfig.MaxTopicMaxMessageBytes},
		{"topics", "latency.stampHeader", "default", meshconfig.DefaultTopicStampHeader},
		{"subscriptions", "essential", "default", meshconfig.DefaultSubscriptionEssential},
		{"subscriptions", "limits.maxPendingMessages", "default", meshconfig.DefaultMaxPendingMessages},
		{"subscriptions", "limits.maxPendingMessages", "maximum", meshconfig.MaxMaxPendingMessages},
		{"subscriptions", "limits.maxPendingBytes", "default", meshconfig.DefaultMaxPendingBytes},
		{"subscriptions", "limits.maxPendingBytes", "maximum", meshconfig.MaxMaxPendingBytes},
		{"subscriptions", "limits.overflow", "default", meshconfig.DefaultOverflow},
		{"subscriptions", "limits.overflow", "enum", []any{meshconfig.OverflowDropNewest, meshconfig.OverflowDropOldest}},
		{"subscriptions", "killSwitch.auto.window", "default", millisAsDuration(meshconfig.DefaultKillSwitchWindowMillis)},
		{"subscriptions", "killSwitch.auto.cooldown", "default", millisAsDuration(meshconfig.DefaultKillSwitchCooldownMillis)},
		{"subscriptions", "queueGroup", "maxLength", meshconfig.MaxQueueGroupLength},
	}
	specs := map[string]map[string]any{}
	for _, crd := range []string{"topics", "subscriptions"} {
		specs[crd] = specSchema(t, "../../config/crd/bases/weighstation.io_"+crd+".yaml")
	}
	for _, tc := range tests {
		t.Run(tc.crd+"."+tc.path+"."+tc.keyword, func(t *testing.T) {
			schema := specs[tc.crd]
			for key := range strings.SplitSeq(tc.path, ".") {
				props, _ := schema["properties"].(map[string]any)
				schema, _ = props[key].(map[string]any)
				if schema == nil {
					t.Fatalf("the %s CRD has no spec.%s", tc.crd, tc.path)
				}
			}
			got, ok := schema[tc.keyword]
			if !ok {
				t.Fatalf("the %s CRD's spec.%s has no %s", tc.crd, tc.path, tc.keyword)
			}
			if want := normalize(tc.want); !reflect.DeepEqual(normalize(got), want) {
				t.Errorf("the %s CRD's spec.%s %s is %v; meshconfig's copy is %v", tc.crd, tc.path, tc.keyword, got, tc.want)
			}
		})
	}
	// The kill switch's bounds are CEL rules: check that they say what
	// meshconfig enforces.
	for _, tc := range []struct {
		path, rule string
	}{
		{"killSwitch.auto.window", fmt.Sprintf("duration(self) >= duration('%s') && duration(self) <= duration('%s')",
			millisAsDuration(meshconfig.MinKillSwitchWindowMillis), millisAsDuration(meshconfig.MaxKillSwitchWindowMillis))},
		{"killSwitch.auto.cooldown", fmt.Sprintf("duration(self) >= duration('%s') && duration(self) <= duration('%s')",
			millisAsDuration(meshconfig.MinKillSwitchCooldownMillis), millisAsDuration(meshconfig.MaxKillSwitchCooldownMillis))},
	} {
		schema := specs["subscriptions"]
		for key := range strings.SplitSeq(tc.path, ".") {
			schema = schema["properties"].(map[string]any)[key].(map[string]any)
		}
		if rules := fmt.Sprint(schema["x-kubernetes-validations"]); !strings.Contains(rules, tc.rule) {
			t.Errorf("the Subscription CRD's spec.%s rules %s do not say %q", tc.path, rules, tc.rule)
		}
	}
}

// specSchema is the openAPIV3Schema of a CRD's spec.
func specSchema(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("%s: %d versions; this test reads one", path, len(crd.Spec.Versions))
	}
	spec, _ := crd.Spec.Versions[0].Schema.OpenAPIV3Schema["properties"].(map[string]any)["spec"].(map[string]any)
	if spec == nil {
		t.Fatalf("%s: no spec schema", path)
	}
	return spec
}

// millisAsDuration writes milliseconds as the CRD writes a duration.
func millisAsDuration(ms int) string {
	switch {
	case ms%3_600_000 == 0:
		return fmt.Sprintf("%dh", ms/3_600_000)
	case ms%60_000 == 0 && ms < 3_600_000:
		return fmt.Sprintf("%dm", ms/60_000)
	case ms%1_000 == 0:
		return fmt.Sprintf("%ds", ms/1_000)
	}
	return fmt.Sprintf("%dms", ms)
}

// normalize makes YAML's numbers (float64 from JSON) and Go's integer
// constants comparable.
func normalize(v any) any {
	switch v := v.(type) {
	case int:
		return float64(v)
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = normalize(x)
		}
		return out
	}
	return v
}
