package desired_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/controllers/desired"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/meshconfig/xdsresource"
)

func topic(ns, name, subject string, mutate ...func(*v1alpha1.Topic)) v1alpha1.Topic {
	t := v1alpha1.Topic{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.TopicSpec{Subject: v1alpha1.SubjectPattern(subject), Limits: v1alpha1.TopicLimits{MaxMessageBytes: 1 << 20}},
	}
	for _, m := range mutate {
		m(&t)
	}
	return t
}

func subscription(ns, name, subject string, selector map[string]string, mutate ...func(*v1alpha1.Subscription)) v1alpha1.Subscription {
	s := v1alpha1.Subscription{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.SubscriptionSpec{
			Subject:  v1alpha1.SubjectPattern(subject),
			Selector: metav1.LabelSelector{MatchLabels: selector},
			Limits:   v1alpha1.SubscriptionLimits{MaxPendingMessages: 1000, MaxPendingBytes: 8 << 20, Overflow: v1alpha1.DropNewest},
		},
	}
	for _, m := range mutate {
		m(&s)
	}
	return s
}

var billingPod = desired.Pod{Namespace: "shop", Name: "billing-0", Labels: map[string]string{"app": "billing"}}

func TestCompute(t *testing.T) {
	notEssential := false
	tests := []struct {
		name          string
		topics        []v1alpha1.Topic
		subscriptions []v1alpha1.Subscription
		check         func(t *testing.T, cfg meshconfig.PodConfig)
	}{
		{
			name: "no resources: the operator's defaults govern everything",
			check: func(t *testing.T, cfg meshconfig.PodConfig) {
				if len(cfg.Topics) != 0 || len(cfg.Subscriptions) != 0 {
					t.Fatalf("topics %v subscriptions %v", cfg.Topics, cfg.Subscriptions)
				}
				d := cfg.Default
				if d.Subject != ">" || d.MaxMessageBytes != 1<<20 || d.PublishRate == nil || d.PublishRate.MessagesPerSecond != 1000 || !d.MayPublish {
					t.Fatalf("default policy %+v", d)
				}
			},
		},
		{
			name:          "resources of other namespaces are ignored",
			topics:        []v1alpha1.Topic{topic("other", "tight", ">"), topic("shop", "orders", "orders.>")},
			subscriptions: []v1alpha1.Subscription{subscription("other", "all", ">", map[string]string{"app": "billing"})},
			check: func(t *testing.T, cfg meshconfig.PodConfig) {
				if len(cfg.Topics) != 1 || cfg.Topics[0].Name != "orders" || len(cfg.Subscriptions) != 0 {
					t.Fatalf("topics %+v subscriptions %+v", cfg.Topics, cfg.Subscriptions)
				}
			},
		},
		{
			name: "only subscriptions whose selector matches the pod",
			subscriptions: []v1alpha1.Subscription{
				subscription("shop", "billing", "orders.*", map[string]string{"app": "billing"}),
				subscription("shop", "shipping", "orders.*", map[string]string{"app": "shipping"}),
			},
			check: func(t *testing.T, cfg meshconfig.PodConfig) {
				if len(cfg.Subscriptions) != 1 || cfg.Subscriptions[0].Name != "billing" || !cfg.Subscriptions[0].Essential {
					t.Fatalf("subscriptions %+v", cfg.Subscriptions)
				}
			},
		},
		{
			name: "publishers selector decides MayPublish",
			topics: []v1alpha1.Topic{
				topic("shop", "open", "open.>"),
				topic("shop", "mine", "mine.>", func(t *v1alpha1.Topic) {
					t.Spec.Publishers = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "billing"}}
				}),
				topic("shop", "theirs", "theirs.>", func(t *v1alpha1.Topic) {
					t.Spec.Publishers = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "checkout"}}
				}),
			},
			check: func(t *testing.T, cfg meshconfig.PodConfig) {
				got := map[string]bool{}
				for _, p := range cfg.Topics {
					got[p.Name] = p.MayPublish
				}
				if !got["open"] || !got["mine"] || got["theirs"] {
					t.Fatalf("MayPublish %v", got)
				}
				// A Topic that does not apply to the pod is only a refusal
				// under its subject, with the defaults' limits: the pod's
				// configuration does not follow that Topic's limits.
				for _, p := range cfg.Topics {
					if p.Name == "theirs" && (p.Subject != "theirs.>" || p.MaxMessageBytes != cfg.Default.MaxMessageBytes || p.PublishRate != cfg.Default.PublishRate) {
						t.Fatalf("excluded topic %+v, default %+v", p, cfg.Default)
					}
				}
			},
		},
		{
			name:   "of two Topics with one pattern, the name sorting first is in force",
			topics: []v1alpha1.Topic{topic("shop", "zeta", "orders.*"), topic("shop", "alpha", "orders.*")},
			check: func(t *testing.T, cfg meshconfig.PodConfig) {
				if len(cfg.Topics) != 1 || cfg.Topics[0].Name != "alpha" {
					t.Fatalf("topics %+v", cfg.Topics)
				}
			},
		},
		{
			name: "limits, rate, stamping and the kill switch are carried over",
			topics: []v1alpha1.Topic{topic("shop", "orders", "orders.>", func(t *v1alpha1.Topic) {
				n, b := int64(10), int64(20)
				no := false
				t.Spec.Limits.MaxMessageBytes = 4096
				t.Spec.Limits.PublishRate = &v1alpha1.PublishRate{MessagesPerSecond: &n, MessagesBurst: &b}
				t.Spec.Latency.StampHeader = &no
			})},
			subscriptions: []v1alpha1.Subscription{subscription("shop", "recs", "orders.>", map[string]string{"app": "billing"}, func(s *v1alpha1.Subscription) {
				pending := int32(50)
				s.Spec.Essential = &notEssential
				s.Spec.KillSwitch = &v1alpha1.KillSwitch{Engaged: true, Reason: "test", Auto: &v1alpha1.AutoKillSwitch{
					MaxPendingMessages: &pending,
					MaxLatency:         &metav1.Duration{Duration: 50 * time.Millisecond},
					Window:             &metav1.Duration{Duration: 30 * time.Second},
					Cooldown:           &metav1.Duration{Duration: time.Minute},
				}}
			})},
			check: func(t *testing.T, cfg meshconfig.PodConfig) {
				tp := cfg.Topics[0]
				if tp.MaxMessageBytes != 4096 || tp.PublishRate == nil || tp.PublishRate.MessagesPerSecond != 10 || tp.PublishRate.MessagesBurst != 20 || tp.PublishRate.BytesPerSecond != 0 || tp.StampHeader {
					t.Fatalf("topic policy %+v rate %+v", tp, tp.PublishRate)
				}
				sp := cfg.Subscriptions[0]
				want := meshconfig.AutoKillSwitch{MaxPendingMessages: 50, MaxLatencyMillis: 50, WindowMillis: 30000, CooldownMillis: 60000}
				if sp.Essential || !sp.KillSwitch.Engaged || sp.KillSwitch.Reason != "test" || sp.KillSwitch.Auto == nil || *sp.KillSwitch.Auto != want {
					t.Fatalf("subscription policy %+v auto %+v", sp, sp.KillSwitch.Auto)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, problems, err := desired.Compute(billingPod, tc.topics, tc.subscriptions, meshconfig.DefaultPolicy)
			if err != nil || len(problems) > 0 {
				t.Fatalf("problems %v, error %v", problems, err)
			}
			if cfg.Namespace != "shop" || cfg.Pod != "billing-0" || len(cfg.Version) != 16 {
				t.Fatalf("identity %s/%s version %q", cfg.Namespace, cfg.Pod, cfg.Version)
			}
			tc.check(t, cfg)
			// What the sidecar assembles from the xDS resources is what was
			// computed, down to the version.
			pod, shared := xdsresource.Split(cfg, "uid")
			wire := map[string]*xdsv1.Resource{}
			for name, res := range shared {
				b, err := proto.Marshal(res)
				if err != nil {
					t.Fatal(err)
				}
				decoded, err := xdsresource.Decode(name, &anypb.Any{TypeUrl: xdsresource.TypeURL, Value: b})
				if err != nil {
					t.Fatal(err)
				}
				wire[name] = decoded
			}
			assembled, missing, err := xdsresource.Assemble(pod.GetPod(), wire)
			if err != nil || len(missing) > 0 {
				t.Fatalf("assembling: missing %v, %v", missing, err)
			}
			if !reflect.DeepEqual(assembled, cfg) {
				t.Fatalf("assembled from the wire:\n%+v\ncomputed:\n%+v", assembled, cfg)
			}
		})
	}
}

// TestComputeIsDeterministic: the same resources in any order give the
// same bytes and version; a change of content changes the version.
func TestComputeIsDeterministic(t *testing.T) {
	topics := []v1alpha1.Topic{topic("shop", "a", "a.>"), topic("shop", "b", "b.*"), topic("shop", "c", "c"), topic("shop", "c2", "c")}
	subs := []v1alpha1.Subscription{
		subscription("shop", "x", "a.*", map[string]string{"app": "billing"}),
		subscription("shop", "y", "b.*", map[string]string{"app": "billing"}),
	}
	first, _, err := desired.Compute(billingPod, topics, subs, meshconfig.DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	firstJSON, _ := json.Marshal(first)
	slices.Reverse(topics)
	slices.Reverse(subs)
	again, _, err := desired.Compute(billingPod, topics, subs, meshconfig.DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	againJSON, _ := json.Marshal(again)
	if string(firstJSON) != string(againJSON) {
		t.Fatalf("reordered input changed the output:\n%s\n%s", firstJSON, againJSON)
	}
	// topics[0] is now "c2", shadowed by "c" (same pattern, name sorts
	// first): its limits are not in force, so the version stays.
	topics[0].Spec.Limits.MaxMessageBytes = 1234
	if shadowed, _, _ := desired.Compute(billingPod, topics, subs, meshconfig.DefaultPolicy); shadowed.Version != first.Version {
		t.Fatal("a change to a shadowed Topic changed the version")
	}
	topics[len(topics)-1].Spec.Limits.MaxMessageBytes = 1234 // "a", in force
	changed, _, err := desired.Compute(billingPod, topics, subs, meshconfig.DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if changed.Version == first.Version {
		t.Fatal("a changed limit kept the version")
	}
}

// TestAnInvalidSelectorStopsOnlyItsResource: a selector the CRD schema
// accepts but that is not valid selects nothing. The resource is reported
// as a problem, the rest of the namespace is configured, and a bad
// publishers selector refuses its subjects rather than opening them.
func TestAnInvalidSelectorStopsOnlyItsResource(t *testing.T) {
	emptyIn := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn}}}
	unknownOperator := metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near", Values: []string{"billing"}}}}
	badValue := metav1.LabelSelector{MatchLabels: map[string]string{"app": "billing and more"}}
	topics := []v1alpha1.Topic{
		topic("shop", "orders", "orders.>"),
		topic("shop", "payments", "payments.>", func(t *v1alpha1.Topic) { t.Spec.Publishers = emptyIn }),
	}
	subs := []v1alpha1.Subscription{
		subscription("shop", "billing", "orders.*", map[string]string{"app": "billing"}),
		subscription("shop", "near", "orders.>", nil, func(s *v1alpha1.Subscription) { s.Spec.Selector = unknownOperator }),
		subscription("shop", "spaced", "orders.>", nil, func(s *v1alpha1.Subscription) { s.Spec.Selector = badValue }),
		// Another namespace's problems are not this pod's.
		subscription("other", "near", "orders.>", nil, func(s *v1alpha1.Subscription) { s.Spec.Selector = unknownOperator }),
	}
	cfg, problems, err := desired.Compute(billingPod, topics, subs, meshconfig.DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if subscriptionNames := func() (names []string) {
		for _, s := range cfg.Subscriptions {
			names = append(names, s.Name)
		}
		return names
	}(); !slices.Equal(subscriptionNames, []string{"billing"}) {
		t.Fatalf("subscriptions %v, want only billing", subscriptionNames)
	}
	policies := map[string]meshconfig.TopicPolicy{}
	for _, p := range cfg.Topics {
		policies[p.Name] = p
	}
	if len(policies) != 2 || !policies["orders"].MayPublish {
		t.Fatalf("topics %+v", cfg.Topics)
	}
	if p := policies["payments"]; p.MayPublish || p.Subject != "payments.>" || p.MaxMessageBytes != cfg.Default.MaxMessageBytes {
		t.Fatalf("the Topic with an invalid publishers selector is %+v; want its subjects refused under the defaults", p)
	}
	want := []string{
		"Subscription shop/near: spec.selector: ",
		"Subscription shop/spaced: spec.selector: ",
		"Topic shop/payments: spec.publishers: ",
	}
	if len(problems) != len(want) {
		t.Fatalf("problems %v, want %d", problems, len(want))
	}
	for i, p := range problems {
		if !strings.HasPrefix(p.Error(), want[i]) || !strings.HasPrefix(p.Message(), strings.SplitN(want[i], ": ", 2)[1]) {
			t.Errorf("problem %d is %q (message %q), want it to start with %q", i, p.Error(), p.Message(), want[i])
		}
	}
	// What the reconcilers report agrees with what Compute left out.
	if desired.TopicProblem(&topics[1]) == nil || desired.TopicProblem(&topics[0]) != nil ||
		desired.SubscriptionProblem(&subs[1]) == nil || desired.SubscriptionProblem(&subs[0]) != nil {
		t.Fatal("TopicProblem or SubscriptionProblem disagrees with Compute")
	}
	// The pod's own annotations and its namespace's access mode are what
	// stops its configuration: that pod keeps its last good one.
	_, _, err = desired.Compute(desired.Pod{Namespace: "shop", Name: "p", AccessMode: "loose"}, topics, subs, meshconfig.DefaultPolicy)
	if err == nil || !strings.Contains(err.Error(), "pod shop/p: namespace label "+v1alpha1.AccessModeLabel) {
		t.Fatalf("a bad access mode gave %v, want an error naming the pod and the namespace label", err)
	}
}

func TestStoreKeepsTopicsOncePerNamespace(t *testing.T) {
	onlyBilling := func(tp *v1alpha1.Topic) {
		tp.Spec.Publishers = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "billing"}}
	}
	topics := []v1alpha1.Topic{topic("shop", "orders", "orders.>"), topic("shop", "ledger", "ledger.>", onlyBilling), topic("shop", "audit", "audit.>", onlyBilling)}
	subs := []v1alpha1.Subscription{subscription("shop", "orders-in", "orders.>", map[string]string{"app": "billing"})}
	view := desired.NewView("shop", topics, subs)
	s := desired.NewStore()
	changed := s.Changed()
	if !s.SetTopics("shop", view.Topics()) {
		t.Fatal("the first SetTopics reported no change")
	}
	select {
	case <-changed:
	default:
		t.Fatal("Changed was not closed by a change")
	}
	if s.SetTopics("shop", view.Topics()) {
		t.Fatal("setting the same Topics reported a change")
	}
	pods := []desired.Pod{
		billingPod,
		{Namespace: "shop", Name: "web-0", Labels: map[string]string{"app": "web"}},
		{Namespace: "shop", Name: "web-1", Labels: map[string]string{"app": "web"}},
	}
	var parts []desired.PodPart
	for _, pod := range pods {
		part, _, err := view.ComputePart(pod, meshconfig.DefaultPolicy)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, part)
		if !s.SetPod(part, "") {
			t.Fatalf("the first SetPod of %s reported no change", pod.Name)
		}
		if s.SetPod(part, "") {
			t.Fatalf("setting %s's same part reported a change", pod.Name)
		}
		// What the store assembles is what Compute computes.
		want, _, err := desired.Compute(pod, topics, subs, meshconfig.DefaultPolicy)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := s.Get(k8stypes.NamespacedName{Namespace: "shop", Name: pod.Name})
		if !ok || got.Version != want.Version || !reflect.DeepEqual(got, want) {
			t.Fatalf("the store assembled %+v for %s; Compute gives %+v", got, pod.Name, want)
		}
	}
	if want := []string{"audit", "ledger"}; !slices.Equal(parts[1].Excluded, want) || len(parts[0].Excluded) != 0 {
		t.Fatalf("excluded: billing %v, web %v; want none and %v", parts[0].Excluded, parts[1].Excluded, want)
	}
	// Pods the selectors treat alike share one exclusion set.
	if &parts[1].Excluded[0] != &parts[2].Excluded[0] {
		t.Fatal("two pods excluded alike hold two copies of their exclusion set")
	}
	// A Topic's limits change: one SetTopics, and every pod's assembled
	// configuration follows without a SetPod.
	topics[0].Spec.Limits.MaxMessageBytes = 2048
	if !s.SetTopics("shop", desired.NewView("shop", topics, subs).Topics()) {
		t.Fatal("a Topic's new limit was not a change")
	}
	for _, pod := range pods {
		got, _ := s.Get(k8stypes.NamespacedName{Namespace: "shop", Name: pod.Name})
		if got.Topics[slices.IndexFunc(got.Topics, func(p meshconfig.TopicPolicy) bool { return p.Name == "orders" })].MaxMessageBytes != 2048 {
			t.Fatalf("%s's configuration kept the old limit", pod.Name)
		}
	}
	if !s.Delete(k8stypes.NamespacedName{Namespace: "shop", Name: "web-0"}) || s.Delete(k8stypes.NamespacedName{Namespace: "shop", Name: "web-0"}) {
		t.Fatal("Delete reported the wrong change")
	}
	// A namespace left without Topics holds no entry.
	if !s.SetTopics("shop", nil) || s.Topics("shop") != nil || s.SetTopics("shop", nil) || s.SetTopics("empty", nil) {
		t.Fatal("a namespace without Topics kept an entry, or reported a change twice")
	}
}

func TestAccessFromNamespaceAndPodAnnotations(t *testing.T) {
	tests := []struct {
		name        string
		mode        string // the namespace's label, or the operator's flag
		annotations map[string]string
		want        meshconfig.Access
		wantErr     string
	}{
		{"enforced by default", "", nil, meshconfig.Access{Mode: meshconfig.AccessEnforce}, ""},
		{"audit", "audit", nil, meshconfig.Access{Mode: meshconfig.AccessAudit}, ""},
		{"unknown mode", "permissive", nil, meshconfig.Access{}, `it must be "enforce" or "audit"`},
		// A pod cannot turn its own ACLs off: the annotation that earlier
		// versions read is ignored.
		{"the pod's own audit annotation", "", map[string]string{v1alpha1.AccessModeLabel: "audit"}, meshconfig.Access{Mode: meshconfig.AccessEnforce}, ""},
		{"custom inbox prefix", "", map[string]string{v1alpha1.InboxPrefixAnnotation: "_MY.inbox"}, meshconfig.Access{Mode: meshconfig.AccessEnforce, InboxPrefix: "_MY.inbox"}, ""},
		{"wildcard inbox prefix", "", map[string]string{v1alpha1.InboxPrefixAnnotation: "_MY.*"}, meshconfig.Access{}, "inbox prefix"},
		{"'$' inbox prefix", "", map[string]string{v1alpha1.InboxPrefixAnnotation: "$JS"}, meshconfig.Access{}, "must not start with '$'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, err := desired.Compute(desired.Pod{Namespace: "ns", Name: "p", Annotations: tc.annotations, AccessMode: tc.mode}, nil, nil, meshconfig.DefaultPolicy)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || cfg.Access != tc.want {
				t.Fatalf("access %+v, %v; want %+v", cfg.Access, err, tc.want)
			}
		})
	}
}

// A Topic whose publishers go from every pod ({}) to none (an invalid
// selector) excludes every pod: the Views' exclusion keys must differ, or
// the pods computed under the first would never be computed again.
func TestExclusionKeyTellsEveryoneFromNoOne(t *testing.T) {
	everyone := topic("shop", "orders", "orders.>", func(tp *v1alpha1.Topic) { tp.Spec.Publishers = &metav1.LabelSelector{} })
	noOne := topic("shop", "orders", "orders.>", func(tp *v1alpha1.Topic) {
		tp.Spec.Publishers = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn}}}
	})
	none := topic("shop", "orders", "orders.>")
	keys := map[string]uint64{}
	for name, tp := range map[string]v1alpha1.Topic{"publishers {}": everyone, "an invalid selector": noOne, "no publishers": none} {
		keys[name] = desired.NewView("shop", []v1alpha1.Topic{tp}, nil).ExclusionKey()
	}
	if keys["publishers {}"] == keys["an invalid selector"] {
		t.Fatal("a Topic open to every pod and one open to none give one exclusion key")
	}
	part, _, _ := desired.NewView("shop", []v1alpha1.Topic{noOne}, nil).ComputePart(billingPod, meshconfig.DefaultPolicy)
	if !part.Excludes("orders") {
		t.Fatal("an invalid publishers selector did not exclude the pod")
	}
}
