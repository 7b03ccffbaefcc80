package controllers_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/internal/subjectcases"
)

// decodeManifests splits a multi-document YAML file into objects.
func decodeManifests(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decoding manifest: %v", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

func TestSamplesApply(t *testing.T) {
	ns := newNamespace(t)
	files, err := filepath.Glob(filepath.Join("..", "config", "samples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples found: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range decodeManifests(t, data) {
			obj.SetNamespace(ns)
			if err := k8sClient.Create(context.Background(), obj); err != nil {
				t.Errorf("%s: %s %s was refused: %v", filepath.Base(f), obj.GetKind(), obj.GetName(), err)
			}
		}
	}
}

func TestInvalidManifestsAreRejected(t *testing.T) {
	ns := newNamespace(t)
	topic := func(spec string) string {
		return "apiVersion: weighstation.io/v1alpha1\nkind: Topic\nmetadata:\n  name: t\nspec:\n" + spec
	}
	subscription := func(spec string) string {
		return "apiVersion: weighstation.io/v1alpha1\nkind: Subscription\nmetadata:\n  name: s\nspec:\n  selector:\n    matchLabels: {app: a}\n" + spec
	}
	tests := []struct {
		name     string
		manifest string
		message  string
	}{
		{"empty token", topic("  subject: orders..eu\n"), "invalid subject: tokens must not be empty (no leading, trailing or double '.')"},
		{"full wildcard in the middle", topic("  subject: orders.>.eu\n"), "invalid subject: '>' is only allowed as the last token"},
		{"whitespace in a subject", topic("  subject: \"orders eu\"\n"), "invalid subject: tokens must not contain whitespace"},
		{"too many tokens", topic("  subject: " + strings.Repeat("a.", 32) + "a\n"), "invalid subject: a subject must have at most 32 tokens (MaxTokens)"},
		{"message size over 8 MiB", topic("  subject: orders\n  limits:\n    maxMessageBytes: 8388609\n"), "spec.limits.maxMessageBytes: Invalid value: 8388609: spec.limits.maxMessageBytes in body should be less than or equal to 8388608"},
		{"message size zero", topic("  subject: orders\n  limits:\n    maxMessageBytes: 0\n"), "should be greater than or equal to 1"},
		{"byte burst below the message size", topic("  subject: orders\n  limits:\n    maxMessageBytes: 1048576\n    publishRate:\n      bytesPerSecond: 1000000\n      bytesBurst: 1000\n"),
			"limits.publishRate.bytesBurst must be at least limits.maxMessageBytes"},
		{"message rate without its burst", topic("  subject: orders\n  limits:\n    publishRate:\n      messagesPerSecond: 10\n"), "publishRate.messagesPerSecond and publishRate.messagesBurst must be set together"},
		{"empty publish rate", topic("  subject: orders\n  limits:\n    publishRate: {}\n"), "publishRate must limit messages, bytes or both"},
		{"automatic kill on an essential subscription", subscription("  subject: orders\n  killSwitch:\n    auto:\n      maxPendingMessages: 10\n"),
			"killSwitch.auto is only allowed with essential: false"},
		{"auto threshold above the queue limit", subscription("  subject: orders\n  essential: false\n  killSwitch:\n    auto:\n      maxPendingMessages: 2000\n"),
			"killSwitch.auto.maxPendingMessages must not exceed limits.maxPendingMessages"},
		{"auto with nothing to trip on", subscription("  subject: orders\n  essential: false\n  killSwitch:\n    auto:\n      window: 10s\n"),
			"killSwitch.auto needs maxPendingMessages, maxLatency or both to trip on"},
		{"zero max latency", subscription("  subject: orders\n  essential: false\n  killSwitch:\n    auto:\n      maxLatency: 0s\n"), "killSwitch.auto.maxLatency must be positive"},
		{"window too short", subscription("  subject: orders\n  essential: false\n  killSwitch:\n    auto:\n      maxLatency: 10ms\n      window: 100ms\n"), "killSwitch.auto.window must be between 1s and 1h"},
		{"queue group with a space", subscription("  subject: orders\n  queueGroup: \"billing workers\"\n"), "invalid queueGroup: it must not contain whitespace, '*' or '>'"},
		{"zero pending messages", subscription("  subject: orders\n  limits:\n    maxPendingMessages: 0\n"), "should be greater than or equal to 1"},
		{"unknown overflow policy", subscription("  subject: orders\n  limits:\n    overflow: DropAll\n"), `Unsupported value: "DropAll"`},
		// $WEIGHSTATION.> is reserved (sidecar/policy.ReservedToken): no
		// pattern may start with that token, for either kind.
		{"a reserved topic", topic("  subject: $WEIGHSTATION.>\n"), reservedSubject},
		{"the reserved token alone", topic("  subject: $WEIGHSTATION\n"), reservedSubject},
		{"a reserved literal subscription", subscription("  subject: $WEIGHSTATION.config.pods\n"), reservedSubject},
		{"a reserved wildcard subscription", subscription("  subject: $WEIGHSTATION.*\n"), reservedSubject},
		{"no selector", "apiVersion: weighstation.io/v1alpha1\nkind: Subscription\nmetadata:\n  name: s\nspec:\n  subject: orders\n", "spec.selector: Required value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := decodeManifests(t, []byte(tc.manifest))
			obj := objs[0]
			obj.SetNamespace(ns)
			err := k8sClient.Create(context.Background(), obj)
			if err == nil {
				t.Fatalf("the apiserver accepted it; want a refusal with %q", tc.message)
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("refused with %v\nwant a message containing %q", err, tc.message)
			}
		})
	}
}

// reservedSubject is the refusal of a pattern under $WEIGHSTATION.
const reservedSubject = "reserved subject: $WEIGHSTATION.> is reserved for weighstation; a pattern must not start with the token $WEIGHSTATION"

// TestReservedRuleRefusesOnlyTheReservedToken: patterns that cover the
// reserved subjects by wildcard, or whose first token only resembles
// $WEIGHSTATION, are accepted (the sidecar keeps $WEIGHSTATION closed
// under any pattern).
func TestReservedRuleRefusesOnlyTheReservedToken(t *testing.T) {
	ns := newNamespace(t)
	for i, subject := range []string{">", "*", "*.>", "*.config.pods", "$WEIGHSTATIONS.x", "$weighstation.x", "WEIGHSTATION.x", "orders.$WEIGHSTATION.>", "$JS.API.>"} {
		topic := newTopic(ns, "topic-"+strconv.Itoa(i), subject)
		sub := newSubscription(ns, "sub-"+strconv.Itoa(i), subject, map[string]string{"app": "a"})
		for _, obj := range []client.Object{topic, sub} {
			if err := k8sClient.Create(context.Background(), obj); err != nil {
				t.Errorf("%T %q was refused: %v", obj, subject, err)
			}
		}
	}
}

// TestSubjectValidationAgreesWithMatcher creates a Topic for every case of
// the table that matcher's tests hold against server.IsValidSubject.
func TestSubjectValidationAgreesWithMatcher(t *testing.T) {
	ns := newNamespace(t)
	// The OpenAPI length limits speak for themselves; every other rule is a
	// CEL rule whose message carries the matcher's wording.
	messageFor := map[string]string{
		subjectcases.RuleEmpty:   "spec.subject in body should be at least 1 chars long",
		subjectcases.RuleTooLong: "spec.subject: Too long: may not be more than 1024 bytes",
	}
	for i, tc := range subjectcases.Cases {
		topic := &v1alpha1.Topic{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "case-" + strconv.Itoa(i)},
			Spec:       v1alpha1.TopicSpec{Subject: v1alpha1.SubjectPattern(tc.Subject)},
		}
		err := k8sClient.Create(context.Background(), topic)
		switch {
		case tc.Rule == "" && err != nil:
			t.Errorf("case %d %q: refused, but it is a valid pattern: %v", i, tc.Subject, err)
		case tc.Rule != "" && err == nil:
			t.Errorf("case %d %q: accepted, but it breaks %q", i, tc.Subject, tc.Rule)
		case tc.Rule != "":
			want, ok := messageFor[tc.Rule]
			if !ok {
				want = "invalid subject: " + tc.Rule
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("case %d %q: refused with %v\nwant a message containing %q", i, tc.Subject, err, want)
			}
		}
	}
}
