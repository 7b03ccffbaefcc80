package e2e

import (
	"fmt"
	"regexp"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

// The NetworkPolicy story (story_networkpolicy_test.go): a pod without the
// inject label (the outsider, in a namespace of its own that is not
// labelled for injection) dials the broker's client port, through the
// Service the sidecars use and at every broker pod's IP, and must be
// refused; an injected pod of the applications' namespace (the insider)
// dials the same addresses and must be greeted by a broker (NATS INFO).
// Two controls keep the refusals honest: the outsider also dials a broker
// pod's metrics port, which the policy opens to all (it must get through:
// the outsider's network works), and a canary pod behind a deny-all
// policy of the story's own (it must be refused: the cluster enforces
// NetworkPolicy at all; if it does not, the story is skipped, not failed).
const (
	PodNetpolOutsider = "e2e-netpol-outsider"
	PodNetpolCanary   = "e2e-netpol-canary"
	PodNetpolInsider  = "e2e-netpol-insider"
	// NetpolServiceAccount runs the outsider and the canary.
	NetpolServiceAccount = "e2e-netpol"
	// NetpolDialInterval and NetpolDialTimeout pace the dial role: a
	// round every half second, each dial within a second (a DROP shows as
	// a timeout, a REJECT as a refusal within a millisecond).
	NetpolDialInterval = "500ms"
	NetpolDialTimeout  = "1s"
	// NetpolMinRounds is how many rounds of dials the outsider makes
	// before the story judges: every one of them must be refused.
	NetpolMinRounds = 6
)

// OutsideNamespace is the NetworkPolicy story's namespace: the
// applications' with "-outside" (or e2e-outside when that is too long for
// a name).
func OutsideNamespace(appNamespace string) string {
	if ns := appNamespace + "-outside"; len(ns) <= 63 {
		return ns
	}
	return "e2e-outside"
}

// NetpolPlan is what the dialers dial, each a HOST:PORT.
type NetpolPlan struct {
	// Service is the brokers' Service as the sidecars dial it.
	Service string
	// BrokerClients are the broker pods' IPs at the client port.
	BrokerClients []string
	// BrokerMetrics is a broker pod's IP at its metrics port, which the
	// policy opens to every pod.
	BrokerMetrics string
	// Canary is the canary pod's IP and port, behind a deny-all policy.
	Canary string
}

// ClientAddrs are the broker's client addresses: the Service and the pods.
func (p NetpolPlan) ClientAddrs() []string { return append([]string{p.Service}, p.BrokerClients...) }

// OutsiderAddrs are what the pod without the label dials.
func (p NetpolPlan) OutsiderAddrs() []string {
	return append(p.ClientAddrs(), p.BrokerMetrics, p.Canary)
}

// DialArgs are the dial role's flags for addrs.
func DialArgs(addrs []string) []string {
	return []string{"-addr=" + strings.Join(addrs, ","), "-interval=" + NetpolDialInterval, "-timeout=" + NetpolDialTimeout}
}

// NetpolInsider is the injected pod that dials the broker's client
// addresses itself (not through its sidecar).
func NetpolInsider(p NetpolPlan) ProbePod {
	return ProbePod{Name: PodNetpolInsider, App: PodNetpolInsider, Role: probestats.RoleDial, Inject: true, Args: DialArgs(p.ClientAddrs())}
}

// NetpolNamespace is the story's namespace, its ServiceAccount and the
// canary's deny-all policy.
func (m Manifests) NetpolNamespace(ns string) (string, error) {
	return m.render("netpol-namespace.yaml.tmpl", map[string]any{"Namespace": ns, "ServiceAccount": NetpolServiceAccount, "Canary": PodNetpolCanary})
}

// NetpolPod is a probe pod of the story's namespace (no label, no
// sidecar) in role with args.
func (m Manifests) NetpolPod(ns, name, role string, args []string) (string, error) {
	return m.render("netpol-pod.yaml.tmpl", map[string]any{
		"Namespace": ns, "Name": name, "Role": role, "Args": append([]string{role}, args...),
		"ServiceAccount": NetpolServiceAccount, "Image": m.ProbeImage,
	})
}

// NetpolVerdict is what the dials showed.
type NetpolVerdict struct {
	// Enforced: the canary's last dial was refused or timed out.
	Enforced bool
	// Conclusive: enough rounds, and every control came out as it
	// should, so that polling may stop.
	Conclusive bool
	// Problems are what fails the story (when Enforced).
	Problems []string
}

// JudgeNetpol reads the outsider's and the insider's reports against the
// plan.
func JudgeNetpol(p NetpolPlan, outsider, insider probestats.DialStats) NetpolVerdict {
	var v NetpolVerdict
	target := func(s probestats.DialStats, who, addr string) probestats.DialTarget {
		t, ok := s.Target(addr)
		if !ok {
			v.Problems = append(v.Problems, fmt.Sprintf("the %s's report has no target %s", who, addr))
		}
		return t
	}
	blocked := func(t probestats.DialTarget) bool {
		return t.Last == probestats.DialRefused || t.Last == probestats.DialTimeout
	}
	canary := target(outsider, "outsider", p.Canary)
	v.Enforced = blocked(canary)
	controls := v.Enforced && outsider.Rounds >= NetpolMinRounds
	for _, addr := range p.ClientAddrs() {
		t := target(outsider, "outsider", addr)
		switch {
		case t.Through() > 0:
			v.Problems = append(v.Problems, fmt.Sprintf("the broker's policy let the pod without the label through: %s", t))
		case t.Blocked() != t.Attempts:
			v.Problems = append(v.Problems, fmt.Sprintf("the outsider's dials failed otherwise than refused or timed out, which proves nothing: %s", t))
		}
	}
	if outsider.Rounds < NetpolMinRounds {
		v.Problems = append(v.Problems, fmt.Sprintf("the outsider dialed %d rounds, want at least %d", outsider.Rounds, NetpolMinRounds))
	}
	if m := target(outsider, "outsider", p.BrokerMetrics); m.Through() == 0 {
		v.Problems = append(v.Problems, fmt.Sprintf("the outsider did not get through to the broker's metrics port, which the policy opens to all, so its refusals prove nothing: %s", m))
		controls = false
	}
	for _, addr := range p.ClientAddrs() {
		if t := target(insider, "insider", addr); t.Outcomes[probestats.DialInfo] == 0 || t.Last != probestats.DialInfo {
			v.Problems = append(v.Problems, fmt.Sprintf("the injected (labelled) pod was not greeted by a broker: %s", t))
			controls = false
		}
	}
	v.Conclusive = controls
	return v
}

// PolicySummary is a NetworkPolicy's ingress rules in one line.
func PolicySummary(np *networkingv1.NetworkPolicy) string {
	var rules []string
	for _, r := range np.Spec.Ingress {
		var ports []string
		for _, p := range r.Ports {
			proto := "TCP"
			if p.Protocol != nil {
				proto = string(*p.Protocol)
			}
			port := "all"
			if p.Port != nil {
				port = p.Port.String()
			}
			ports = append(ports, proto+"/"+port)
		}
		if len(ports) == 0 {
			ports = []string{"every port"}
		}
		var from []string
		for _, peer := range r.From {
			from = append(from, peerString(peer))
		}
		if len(from) == 0 {
			from = []string{"anywhere"}
		}
		rules = append(rules, fmt.Sprintf("%s from %s", strings.Join(ports, ","), strings.Join(from, " or ")))
	}
	if len(rules) == 0 {
		return "admits nothing"
	}
	return strings.Join(rules, "; ")
}

func peerString(p networkingv1.NetworkPolicyPeer) string {
	switch {
	case p.IPBlock != nil:
		return "ipBlock " + p.IPBlock.CIDR
	case p.PodSelector != nil && p.NamespaceSelector != nil:
		return fmt.Sprintf("pods {%s} in namespaces {%s}", selectorString(p.PodSelector), selectorString(p.NamespaceSelector))
	case p.PodSelector != nil:
		return fmt.Sprintf("pods {%s} of its namespace", selectorString(p.PodSelector))
	case p.NamespaceSelector != nil:
		return fmt.Sprintf("every pod in namespaces {%s}", selectorString(p.NamespaceSelector))
	}
	return "?"
}

func selectorString(s *metav1.LabelSelector) string {
	if f := metav1.FormatLabelSelector(s); f != "<none>" {
		return f
	}
	return "any"
}

// errorLine matches a log line that reports a failure (klog's E and F
// levels, or the words).
var errorLine = regexp.MustCompile(`(?i)^[EF]\d{4} |error|failed|fatal|cannot|can not`)

// LastErrorLine is the last line of a log that reports a failure, or "".
// When the log ends in a Go panic, it is the last such line before the
// panic (the cause, more often than not), followed by the panic's line.
func LastErrorLine(log string) string {
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	panicLine := ""
	for i, l := range lines {
		if strings.HasPrefix(l, "panic: ") {
			panicLine = strings.TrimSpace(l)
			lines = lines[:i] // the stack after it names functions, not errors
			break
		}
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if errorLine.MatchString(lines[i]) {
			if panicLine != "" {
				return strings.TrimSpace(lines[i]) + " (then " + panicLine + ")"
			}
			return strings.TrimSpace(lines[i])
		}
	}
	return panicLine
}
