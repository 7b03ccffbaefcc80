package e2e

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

func testManifests() Manifests {
	return Manifests{AppNamespace: "e2e-apps", ProbeImage: "weighstation.local/e2e-probe:e2e", DemoImage: "weighstation.local/demo-apps:e2e", PullPolicy: "Never"}
}

func decodeDocs(t *testing.T, text string) []unstructured.Unstructured {
	t.Helper()
	var out []unstructured.Unstructured
	for _, doc := range strings.Split(text, "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("decoding %q: %v", doc, err)
		}
		if obj == nil {
			continue
		}
		out = append(out, unstructured.Unstructured{Object: obj})
	}
	return out
}

func TestApplicationsManifests(t *testing.T) {
	text, err := testManifests().Applications()
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string]corev1.Pod{}
	accounts := map[string]bool{}
	for _, u := range decodeDocs(t, text) {
		if u.GetNamespace() != "e2e-apps" {
			t.Errorf("%s %s in namespace %q", u.GetKind(), u.GetName(), u.GetNamespace())
		}
		switch u.GetKind() {
		case "ServiceAccount":
			accounts[u.GetName()] = true
		case "Pod":
			b, _ := yaml.Marshal(u.Object)
			var p corev1.Pod
			if err := yaml.UnmarshalStrict(b, &p); err != nil {
				t.Fatalf("pod %s: %v", u.GetName(), err)
			}
			pods[p.Name] = p
		default:
			t.Errorf("unexpected %s", u.GetKind())
		}
	}
	for _, name := range ApplicationPods() {
		p, ok := pods[name]
		if !ok {
			t.Errorf("no pod %s", name)
			continue
		}
		if !accounts[p.Spec.ServiceAccountName] {
			t.Errorf("pod %s: its ServiceAccount %s is not created before it", name, p.Spec.ServiceAccountName)
		}
		if p.Labels[v1alpha1.InjectLabel] != v1alpha1.InjectEnabled || p.Labels["app"] != name {
			t.Errorf("pod %s labels %v", name, p.Labels)
		}
		c := p.Spec.Containers[0]
		if c.ImagePullPolicy != corev1.PullNever || p.Spec.NodeName != "" || p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
			t.Errorf("pod %s: pull policy %q, nodeName %q, automount %v", name, c.ImagePullPolicy, p.Spec.NodeName, p.Spec.AutomountServiceAccountToken)
		}
		if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil {
			t.Errorf("pod %s has no readiness probe", name)
		}
	}
	spam := pods["spam-filter"].Spec.Containers[0]
	if spam.Image != "weighstation.local/demo-apps:e2e" || strings.Join(spam.Args, " ") != "spam-filter -nats=nats://127.0.0.1:4222 -control=0.0.0.0:8081" {
		t.Errorf("spam-filter runs %s %q", spam.Image, spam.Args)
	}
	req := pods[PodRequester].Spec.Containers[0]
	if req.Image != "weighstation.local/e2e-probe:e2e" || req.Args[0] != "requester" || !strings.Contains(strings.Join(req.Args, " "), "-subject=e2e.rpc") {
		t.Errorf("requester runs %s %q", req.Image, req.Args)
	}
}

func TestPolicyManifest(t *testing.T) {
	text, err := testManifests().Policy()
	if err != nil {
		t.Fatal(err)
	}
	subs := map[string]v1alpha1.Subscription{}
	topics := 0
	for _, u := range decodeDocs(t, text) {
		b, _ := yaml.Marshal(u.Object)
		switch u.GetKind() {
		case "Subscription":
			var s v1alpha1.Subscription
			if err := yaml.UnmarshalStrict(b, &s); err != nil {
				t.Fatalf("subscription %s: %v", u.GetName(), err)
			}
			subs[s.Name] = s
		case "Topic":
			var tp v1alpha1.Topic
			if err := yaml.UnmarshalStrict(b, &tp); err != nil {
				t.Fatalf("topic %s: %v", u.GetName(), err)
			}
			topics++
		default:
			t.Errorf("unexpected %s", u.GetKind())
		}
	}
	if topics != 3 || len(subs) != 4 {
		t.Fatalf("%d Topics and %d Subscriptions, want 3 and 4", topics, len(subs))
	}
	if s := subs[SubscriptionStream]; string(s.Spec.Subject) != SubjectStream || !s.Spec.IsEssential() || s.Spec.Selector.MatchLabels["app"] != PodSubscriber {
		t.Errorf("the stream's Subscription %+v", s.Spec)
	}
	if s := subs[SubscriptionRPC]; string(s.Spec.Subject) != SubjectRPC || s.Spec.IsEssential() || s.Spec.KillSwitch != nil || s.Spec.Selector.MatchLabels["app"] != PodResponder {
		t.Errorf("the responder's Subscription %+v", s.Spec)
	}
}

func TestSingleProbeManifests(t *testing.T) {
	m := testManifests()
	text, err := m.Probe(InjectCheck())
	if err != nil {
		t.Fatal(err)
	}
	docs := decodeDocs(t, text)
	if len(docs) != 1 || docs[0].GetKind() != "Pod" {
		t.Fatalf("the inject check (default ServiceAccount) renders %d objects", len(docs))
	}
	if sa, _, _ := unstructured.NestedString(docs[0].Object, "spec", "serviceAccountName"); sa != "default" {
		t.Errorf("the inject check runs as %q", sa)
	}
	text, err = m.Probe(RevokeTarget())
	if err != nil {
		t.Fatal(err)
	}
	if docs := decodeDocs(t, text); len(docs) != 2 || docs[0].GetKind() != "ServiceAccount" {
		t.Fatalf("the revoke target renders %d objects, want its ServiceAccount and itself", len(docs))
	}
	ns, err := m.Namespace()
	if err != nil {
		t.Fatal(err)
	}
	if d := decodeDocs(t, ns); d[0].GetLabels()[v1alpha1.InjectLabel] != v1alpha1.InjectEnabled {
		t.Errorf("the namespace is not labelled for injection: %v", d[0].GetLabels())
	}
}
