//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

// Bounds of the NetworkPolicy story.
const (
	netpolPodsReady = 2 * time.Minute
	// netpolObserve bounds the dials' observation: the outsider's rounds
	// (NetpolMinRounds, half a second apart, a timed-out dial a second)
	// and the insider's first greeting, which waits for the enforcer to
	// learn the new pod's address.
	netpolObserve = 30 * time.Second
	// netpolNamespaceGone bounds the removal of a namespace an earlier run
	// left.
	netpolNamespaceGone = 2 * time.Minute
	// netpolLogLines of an enforcer's node log are printed when the
	// cluster does not enforce.
	netpolLogLines = 20
)

// netpolEnforcerLogs are the node logs (E2E_LOGDIR) of the NetworkPolicy
// implementations hack/e2e-node.sh runs or has tried (docs/development.md).
var netpolEnforcerLogs = []string{"kube-router.log", "kube-network-policies.log"}

// stepNetworkPolicy shows the broker's NetworkPolicy at work: a pod
// without the inject label, in a namespace of its own, is refused on the
// broker's client port (the Service the sidecars use, and every broker
// pod's IP), while the sidecars are connected and an injected pod dialing
// the same addresses is greeted by a broker. See netpol.go for the
// controls; a cluster that does not enforce NetworkPolicy skips it.
func stepNetworkPolicy(s *stepRun) {
	ctx, cfg := s.ctx, s.cfg
	rel := cfg.ReleaseNamespace

	nps, err := s.c.kube.NetworkingV1().NetworkPolicies(rel).List(ctx, metav1.ListOptions{LabelSelector: componentSelector(ComponentBroker)})
	if err != nil {
		s.fatalf("listing the brokers' NetworkPolicies in %s: %v", rel, err)
	}
	if len(nps.Items) == 0 {
		s.skipf("no NetworkPolicy of the brokers in %s (chart value broker.networkPolicy.enabled=false?)", rel)
	}
	np := &nps.Items[0]
	s.note("NetworkPolicy %s/%s on pods {%s}: %s", rel, np.Name, selectorString(&np.Spec.PodSelector), PolicySummary(np))

	plan, names := s.netpolPlan(ctx)

	// The sidecars already running (step 2): connected to a broker.
	sidecars := s.sidecarPods(ctx)
	connected := 0
	for name, st := range s.scrapeSidecars(ctx, sidecars) {
		switch {
		case st.err != nil:
			s.errorf("sidecar of %s: %v", name, st.err)
		case !st.connected:
			s.errorf("the sidecar of %s (labelled %s=%s) is not connected to a broker", name, v1alpha1.InjectLabel, v1alpha1.InjectEnabled)
		default:
			connected++
		}
	}
	s.note("sidecars connected to the brokers (%s 1): %d of %d", MetricBrokerConnected, connected, len(sidecars))

	ns := OutsideNamespace(cfg.AppNamespace)
	s.prepareOutsideNamespace(ctx, ns)
	if !cfg.Keep {
		defer s.removeNetpolObjects(ns)
	}
	s.suspects = []string{PodNetpolInsider}
	nsDoc, err := s.m.NetpolNamespace(ns)
	if err != nil {
		s.fatalf("%v", err)
	}
	canaryDoc, err := s.m.NetpolPod(ns, PodNetpolCanary, probestats.RoleIdle, nil)
	if err != nil {
		s.fatalf("%v", err)
	}
	insiderDoc, err := s.m.Probe(NetpolInsider(plan))
	if err != nil {
		s.fatalf("%v", err)
	}
	if err := s.c.apply(ctx, "namespace "+ns+" (not labelled for injection) and a canary behind a deny-all policy", join(nsDoc, canaryDoc)); err != nil {
		s.fatalf("%v", err)
	}
	if err := s.c.apply(ctx, "an injected pod that dials the broker itself", insiderDoc); err != nil {
		s.fatalf("%v", err)
	}
	if _, err := s.c.waitPodsReady(ctx, ns, []string{PodNetpolCanary}, netpolPodsReady); err != nil {
		s.fatalf("%v", err)
	}
	canary, err := s.c.pod(ctx, ns, PodNetpolCanary)
	if err != nil {
		s.fatalf("%v", err)
	}
	plan.Canary = netJoin(canary.Status.PodIP, ProbeStatsPort)
	names[plan.Canary] = fmt.Sprintf("canary %s/%s behind a deny-all policy", ns, PodNetpolCanary)
	outsiderDoc, err := s.m.NetpolPod(ns, PodNetpolOutsider, probestats.RoleDial, DialArgs(plan.OutsiderAddrs()))
	if err != nil {
		s.fatalf("%v", err)
	}
	if err := s.c.apply(ctx, "a pod without the label "+v1alpha1.InjectLabel+" that dials the broker", outsiderDoc); err != nil {
		s.fatalf("%v", err)
	}
	if _, err := s.c.waitPodsReady(ctx, ns, []string{PodNetpolOutsider}, netpolPodsReady); err != nil {
		s.fatalf("%v", err)
	}
	if _, err := s.c.waitPodsReady(ctx, cfg.AppNamespace, []string{PodNetpolInsider}, netpolPodsReady); err != nil {
		s.fatalf("%v", err)
	}
	outsiderPod, err := s.c.pod(ctx, ns, PodNetpolOutsider)
	if err != nil {
		s.fatalf("%v", err)
	}
	insiderPod, err := s.c.pod(ctx, cfg.AppNamespace, PodNetpolInsider)
	if err != nil {
		s.fatalf("%v", err)
	}
	if Injected(outsiderPod) || outsiderPod.Labels[v1alpha1.InjectLabel] != "" {
		s.fatalf("the outsider %s/%s was injected or labelled: it must be neither", ns, PodNetpolOutsider)
	}
	if !Injected(insiderPod) {
		s.fatalf("the insider %s/%s has no sidecar: the webhook did not inject it", cfg.AppNamespace, PodNetpolInsider)
	}

	var outsider, insider probestats.DialStats
	var verdict NetpolVerdict
	read := false
	_, pollErr := Poll(ctx, "the dials' outcomes", netpolObserve, apiPoll, func(ctx context.Context) (bool, string) {
		o, err := s.dialStats(ctx, outsiderPod)
		if err != nil {
			return false, err.Error()
		}
		i, err := s.dialStats(ctx, insiderPod)
		if err != nil {
			return false, err.Error()
		}
		outsider, insider, read = o, i, true
		verdict = JudgeNetpol(plan, outsider, insider)
		return verdict.Conclusive, fmt.Sprintf("outsider %d round(s), insider %d; %s", outsider.Rounds, insider.Rounds, strings.Join(verdict.Problems, "; "))
	})
	if !read {
		s.fatalf("%v", pollErr)
	}
	for _, t := range outsider.Targets {
		s.note("outsider %s/%s (no label, no sidecar) → %s: %s", ns, PodNetpolOutsider, names[t.Addr], t)
	}
	for _, t := range insider.Targets {
		s.note("insider %s/%s (labelled, injected) → %s: %s", cfg.AppNamespace, PodNetpolInsider, names[t.Addr], t)
	}
	if !verdict.Enforced {
		canaryT, _ := outsider.Target(plan.Canary)
		s.skipf("the cluster does not enforce NetworkPolicy: the pod without the label reached the canary behind a deny-all policy (%s); %s", canaryT, s.netpolEnforcerError())
	}
	for _, p := range verdict.Problems {
		s.errorf("%s", p)
	}
	if pollErr != nil && len(verdict.Problems) == 0 {
		s.errorf("%v", pollErr)
	}

	var dials, refused, timedOut int64
	var slowest float64
	for _, addr := range plan.ClientAddrs() {
		t, _ := outsider.Target(addr)
		dials += t.Attempts
		refused += t.Outcomes[probestats.DialRefused]
		timedOut += t.Outcomes[probestats.DialTimeout]
		if t.Last == probestats.DialRefused {
			slowest = max(slowest, t.LastMillis)
		}
	}
	span := time.Duration(outsider.AtUnixNano - outsider.StartedUnixNano)
	s.note("the pod without the label: %d dial(s) to the broker's client port over %s, %d refused (REJECT) and %d timed out (none through)",
		dials, span.Round(100*time.Millisecond), refused, timedOut)
	if svc, ok := insider.Target(plan.Service); ok && svc.FirstThroughUnixNano > 0 {
		s.measure("injected pod's dialer started → its first dial through the broker's policy", time.Duration(svc.FirstThroughUnixNano-insider.StartedUnixNano), 0)
	}
}

// netpolPlan finds the broker's Service (as the sidecars dial it) and its
// pods, and names each address for the output.
func (s *stepRun) netpolPlan(ctx context.Context) (NetpolPlan, map[string]string) {
	rel := s.cfg.ReleaseNamespace
	names := map[string]string{}
	var plan NetpolPlan
	svcs, err := s.c.kube.CoreV1().Services(rel).List(ctx, metav1.ListOptions{LabelSelector: componentSelector(ComponentBroker)})
	if err != nil {
		s.fatalf("listing the brokers' Services: %v", err)
	}
	var clientPort int32
	for _, svc := range svcs.Items {
		if svc.Spec.ClusterIP == corev1.ClusterIPNone {
			continue
		}
		for _, p := range svc.Spec.Ports {
			if p.Name == "nats" {
				plan.Service = fmt.Sprintf("%s.%s.svc:%d", svc.Name, rel, p.Port)
				names[plan.Service] = fmt.Sprintf("Service %s (the sidecars' broker address)", plan.Service)
				clientPort = p.TargetPort.IntVal
				if clientPort == 0 {
					clientPort = p.Port
				}
			}
		}
	}
	if plan.Service == "" {
		s.fatalf("no Service of the brokers in %s with a port named nats", rel)
	}
	pods, err := s.c.kube.CoreV1().Pods(rel).List(ctx, metav1.ListOptions{LabelSelector: componentSelector(ComponentBroker)})
	if err != nil {
		s.fatalf("listing the brokers: %v", err)
	}
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].Name < pods.Items[j].Name })
	for _, p := range pods.Items {
		if p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		addr := netJoin(p.Status.PodIP, int(clientPort))
		plan.BrokerClients = append(plan.BrokerClients, addr)
		names[addr] = fmt.Sprintf("broker %s at its IP, client port", p.Name)
		if plan.BrokerMetrics == "" {
			plan.BrokerMetrics = netJoin(p.Status.PodIP, BrokerMetricsPort)
			names[plan.BrokerMetrics] = fmt.Sprintf("broker %s, metrics port (open to all)", p.Name)
		}
	}
	if len(plan.BrokerClients) == 0 {
		s.fatalf("no running broker with an IP in %s", rel)
	}
	return plan, names
}

// prepareOutsideNamespace refuses a namespace that is not the stories',
// and removes one an earlier run left.
func (s *stepRun) prepareOutsideNamespace(ctx context.Context, ns string) {
	existing, err := s.c.kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return
	case err != nil:
		s.fatalf("reading namespace %s: %v", ns, err)
	case existing.Labels["e2e.weighstation.io/owner"] != "e2e":
		s.fatalf("namespace %s exists and is not the stories' (no label e2e.weighstation.io/owner=e2e)", ns)
	}
	say("namespace %s is left from an earlier run: deleting it first", ns)
	if existing.DeletionTimestamp == nil {
		if err := s.c.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			s.fatalf("deleting namespace %s: %v", ns, err)
		}
	}
	if _, err := Poll(ctx, "namespace "+ns+" gone", netpolNamespaceGone, apiPoll, func(ctx context.Context) (bool, string) {
		_, err := s.c.kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	}); err != nil {
		s.fatalf("%v", err)
	}
}

// removeNetpolObjects deletes what the story made, without waiting.
func (s *stepRun) removeNetpolObjects(ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{"delete", "pod,serviceaccount", PodNetpolInsider, "-n", s.cfg.AppNamespace, "--ignore-not-found", "--wait=false"},
		{"delete", "namespace", ns, "--ignore-not-found", "--wait=false"},
	} {
		say("$ kubectl %s", strings.Join(args, " "))
		if _, err := s.c.kubectl(ctx, args...); err != nil {
			say("  %v", err)
		}
	}
}

// dialStats reads a dial probe's /stats.
func (s *stepRun) dialStats(ctx context.Context, p *corev1.Pod) (probestats.DialStats, error) {
	b, err := s.c.podGet(ctx, p, ProbeStatsPort, "/stats")
	if err != nil {
		return probestats.DialStats{}, err
	}
	st, err := probestats.ParseDialStats(b)
	if err != nil {
		return st, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return st, nil
}

// netpolEnforcerError prints the end of the NetworkPolicy enforcers' node
// logs, and returns their last error lines: why none enforces.
func (s *stepRun) netpolEnforcerError() string {
	if s.cfg.LogDir == "" {
		return "E2E_LOGDIR is unset: no node log to say why"
	}
	var found []string
	for _, name := range netpolEnforcerLogs {
		path := filepath.Join(s.cfg.LogDir, name)
		tail, err := TailLines(path, netpolLogLines)
		if err != nil {
			continue
		}
		say("---- %s (last %d lines)\n%s", name, netpolLogLines, tail)
		if line := LastErrorLine(tail); line != "" {
			found = append(found, name+": "+line)
		} else {
			found = append(found, name+": no error in its last lines")
		}
	}
	if len(found) == 0 {
		return fmt.Sprintf("no NetworkPolicy enforcer's log (%s) in %s", strings.Join(netpolEnforcerLogs, ", "), s.cfg.LogDir)
	}
	return strings.Join(found, "; ")
}
