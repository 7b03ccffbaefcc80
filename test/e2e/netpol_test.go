package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

func TestOutsideNamespace(t *testing.T) {
	if got := OutsideNamespace("e2e-apps"); got != "e2e-apps-outside" {
		t.Errorf("got %q", got)
	}
	if got := OutsideNamespace(strings.Repeat("a", 60)); got != "e2e-outside" {
		t.Errorf("a long name gives %q", got)
	}
}

// The story's pods: the outsider and the canary carry no inject label in
// a namespace without one (so no sidecar, and the broker's policy does
// not admit them); the insider carries it; the canary's policy denies
// every ingress.
func TestNetpolManifests(t *testing.T) {
	m := testManifests()
	plan := NetpolPlan{Service: "weighstation-broker.weighstation-system.svc:4222", BrokerClients: []string{"10.244.0.5:4222", "10.244.0.6:4222"},
		BrokerMetrics: "10.244.0.5:9092", Canary: "10.244.0.9:8080"}
	text, err := m.NetpolNamespace("e2e-apps-outside")
	if err != nil {
		t.Fatal(err)
	}
	docs := decodeDocs(t, text)
	if len(docs) != 3 || docs[0].GetKind() != "Namespace" || docs[1].GetKind() != "ServiceAccount" || docs[2].GetKind() != "NetworkPolicy" {
		t.Fatalf("the namespace renders %d objects", len(docs))
	}
	if l := docs[0].GetLabels(); l[v1alpha1.InjectLabel] != "" || l["e2e.weighstation.io/owner"] != "e2e" {
		t.Errorf("the namespace's labels: %v", l)
	}
	var np networkingv1.NetworkPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(docs[2].Object, &np); err != nil {
		t.Fatal(err)
	}
	if np.Spec.PodSelector.MatchLabels["app"] != PodNetpolCanary || len(np.Spec.Ingress) != 0 || len(np.Spec.PolicyTypes) != 1 || np.Spec.PolicyTypes[0] != networkingv1.PolicyTypeIngress {
		t.Errorf("the canary's policy is not a deny-all of the canary: %+v", np.Spec)
	}
	if got := PolicySummary(&np); got != "admits nothing" {
		t.Errorf("PolicySummary(deny-all) = %q", got)
	}

	text, err = m.NetpolPod("e2e-apps-outside", PodNetpolOutsider, probestats.RoleDial, DialArgs(plan.OutsiderAddrs()))
	if err != nil {
		t.Fatal(err)
	}
	docs = decodeDocs(t, text)
	var pod corev1.Pod
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(docs[0].Object, &pod); err != nil {
		t.Fatal(err)
	}
	if pod.Namespace != "e2e-apps-outside" || pod.Labels[v1alpha1.InjectLabel] != "" || pod.Spec.ServiceAccountName != NetpolServiceAccount {
		t.Errorf("the outsider: %s/%s labels %v account %s", pod.Namespace, pod.Name, pod.Labels, pod.Spec.ServiceAccountName)
	}
	wantArgs := "dial -addr=weighstation-broker.weighstation-system.svc:4222,10.244.0.5:4222,10.244.0.6:4222,10.244.0.5:9092,10.244.0.9:8080 -interval=500ms -timeout=1s"
	if got := strings.Join(pod.Spec.Containers[0].Args, " "); got != wantArgs {
		t.Errorf("the outsider's args: %s\nwant %s", got, wantArgs)
	}

	text, err = m.Probe(NetpolInsider(plan))
	if err != nil {
		t.Fatal(err)
	}
	docs = decodeDocs(t, text)
	if len(docs) != 2 {
		t.Fatalf("the insider renders %d objects, want its ServiceAccount and itself", len(docs))
	}
	if docs[1].GetNamespace() != "e2e-apps" || docs[1].GetLabels()[v1alpha1.InjectLabel] != v1alpha1.InjectEnabled {
		t.Errorf("the insider: namespace %s, labels %v", docs[1].GetNamespace(), docs[1].GetLabels())
	}
}

func dialTarget(addr string, outcomes map[string]int64, last string) probestats.DialTarget {
	var n int64
	for _, v := range outcomes {
		n += v
	}
	return probestats.DialTarget{Addr: addr, Attempts: n, Outcomes: outcomes, Last: last}
}

func TestJudgeNetpol(t *testing.T) {
	plan := NetpolPlan{Service: "svc:4222", BrokerClients: []string{"b0:4222"}, BrokerMetrics: "b0:9092", Canary: "c:8080"}
	refused := map[string]int64{probestats.DialRefused: 5, probestats.DialTimeout: 1}
	outsider := func(client, canary probestats.DialTarget) probestats.DialStats {
		return probestats.DialStats{Role: probestats.RoleDial, Rounds: 6, Targets: []probestats.DialTarget{
			client, dialTarget("b0:4222", refused, probestats.DialRefused),
			dialTarget("b0:9092", map[string]int64{probestats.DialConnected: 6}, probestats.DialConnected), canary,
		}}
	}
	blockedSvc := dialTarget("svc:4222", refused, probestats.DialRefused)
	blockedCanary := dialTarget("c:8080", map[string]int64{probestats.DialInfo: 0, probestats.DialRefused: 6}, probestats.DialRefused)
	greeted := probestats.DialStats{Role: probestats.RoleDial, Rounds: 3, Targets: []probestats.DialTarget{
		dialTarget("svc:4222", map[string]int64{probestats.DialRefused: 1, probestats.DialInfo: 2}, probestats.DialInfo),
		dialTarget("b0:4222", map[string]int64{probestats.DialInfo: 3}, probestats.DialInfo),
	}}

	v := JudgeNetpol(plan, outsider(blockedSvc, blockedCanary), greeted)
	if !v.Enforced || !v.Conclusive || len(v.Problems) != 0 {
		t.Errorf("refused outside, greeted inside: %+v", v)
	}

	// Through the Service: the policy failed.
	v = JudgeNetpol(plan, outsider(dialTarget("svc:4222", map[string]int64{probestats.DialRefused: 5, probestats.DialInfo: 1}, probestats.DialRefused), blockedCanary), greeted)
	if !v.Enforced || len(v.Problems) != 1 || !strings.Contains(v.Problems[0], "let the pod without the label through") {
		t.Errorf("through the Service: %+v", v)
	}

	// A name that did not resolve is no refusal.
	v = JudgeNetpol(plan, outsider(dialTarget("svc:4222", map[string]int64{probestats.DialError: 6}, probestats.DialError), blockedCanary), greeted)
	if len(v.Problems) != 1 || !strings.Contains(v.Problems[0], "proves nothing") {
		t.Errorf("dial errors: %+v", v)
	}

	// The canary reached: the cluster does not enforce.
	v = JudgeNetpol(plan, outsider(dialTarget("svc:4222", map[string]int64{probestats.DialInfo: 6}, probestats.DialInfo),
		dialTarget("c:8080", map[string]int64{probestats.DialConnected: 6}, probestats.DialConnected)), greeted)
	if v.Enforced || v.Conclusive {
		t.Errorf("no enforcement: %+v", v)
	}

	// The insider not (yet) greeted: not conclusive, a problem.
	notYet := greeted
	notYet.Targets = []probestats.DialTarget{greeted.Targets[0], dialTarget("b0:4222", map[string]int64{probestats.DialRefused: 1}, probestats.DialRefused)}
	v = JudgeNetpol(plan, outsider(blockedSvc, blockedCanary), notYet)
	if v.Conclusive || len(v.Problems) != 1 {
		t.Errorf("insider refused: %+v", v)
	}

	// Too few rounds: not conclusive.
	few := outsider(blockedSvc, blockedCanary)
	few.Rounds = 2
	if v = JudgeNetpol(plan, few, greeted); v.Conclusive {
		t.Errorf("2 rounds: %+v", v)
	}
}

// TestNetpolAssumptions checks what the NetworkPolicy story assumes of
// the chart: its broker policy admits the inject label, and the brokers'
// Service names its client port nats.
func TestNetpolAssumptions(t *testing.T) {
	if _, err := os.Stat(filepath.Join(repoRoot, "go.mod")); err != nil {
		t.Skip("not run from test/e2e of the source tree (a copied test binary): no sources to compare with")
	}
	for file, want := range map[string]string{
		"charts/weighstation/templates/broker/networkpolicy.yaml": v1alpha1.InjectLabel + ": " + v1alpha1.InjectEnabled,
		"charts/weighstation/templates/broker/service.yaml":       "- name: nats",
	} {
		b, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("%s no longer has %q", file, want)
		}
	}
}

// TestPolicySummary on the shape of the chart's broker policy
// (charts/weighstation/templates/broker/networkpolicy.yaml).
func TestPolicySummary(t *testing.T) {
	tcp := corev1.ProtocolTCP
	port := func(n int) []networkingv1.NetworkPolicyPort {
		p := intstr.FromInt(n)
		return []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p}}
	}
	np := &networkingv1.NetworkPolicy{Spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{
		{Ports: port(4222), From: []networkingv1.NetworkPolicyPeer{
			{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled}}},
			{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{ComponentLabel: ComponentOperator}}},
		}},
		{Ports: port(9092)},
	}}}
	want := "TCP/4222 from pods {weighstation.io/inject=enabled} in namespaces {any} or pods {app.kubernetes.io/component=operator} of its namespace; TCP/9092 from anywhere"
	if got := PolicySummary(np); got != want {
		t.Errorf("PolicySummary:\n got %s\nwant %s", got, want)
	}
}

func TestLastErrorLine(t *testing.T) {
	log := `I1129 02:26:31.606254   12436 controller.go:669] "Syncing nftables rules"
I1129 02:26:31.620358   12436 controller.go:883] "syncing nftables rules" error=<
	conn.Receive: netlink receive: no such file or directory
 >
I1129 02:26:32.000000   12436 controller.go:900] "ok"
`
	if got := LastErrorLine(log); !strings.Contains(got, `"syncing nftables rules" error=<`) {
		t.Errorf("got %q", got)
	}
	if got := LastErrorLine("failed to run kube-router: failed to create network policy controller\n"); !strings.HasPrefix(got, "failed to run kube-router") {
		t.Errorf("got %q", got)
	}
	panicked := "I1129 starting\nfailed to run kube-router: failed to create network policy controller\npanic: runtime error: invalid memory address\n\ngoroutine 129 [running]:\nfoo.HandleError(0x0)\n"
	if got := LastErrorLine(panicked); got != "failed to run kube-router: failed to create network policy controller (then panic: runtime error: invalid memory address)" {
		t.Errorf("after a panic: got %q", got)
	}
	if got := LastErrorLine("I1129 all is well\npanic: boom\n"); got != "panic: boom" {
		t.Errorf("a panic alone: got %q", got)
	}
	if got := LastErrorLine("I1129 all is well\n"); got != "" {
		t.Errorf("got %q", got)
	}
}
