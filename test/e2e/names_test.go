package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is where `go test` runs this package from: test/e2e.
const repoRoot = "../.."

// TestAssumedNamesMatchTheirSources checks every name the stories assume
// (names.go, revocations.go, operatorargs.go) against the file it comes
// from.
func TestAssumedNamesMatchTheirSources(t *testing.T) {
	if _, err := os.Stat(filepath.Join(repoRoot, "go.mod")); err != nil {
		t.Skip("not run from test/e2e of the source tree (a copied test binary): no sources to compare with")
	}
	for _, c := range []struct {
		file  string
		wants []string
	}{
		{"controllers/leaderlabel/leaderlabel.go", []string{`Label = "` + LeaderLabel + `"`}},
		{"cmd/weighstation/operatorapp/options.go", []string{`LeaderElectionID = "` + LeaseName + `"`, "LeaseDuration: 15 * time.Second", "o.Zap.BindFlags(fs)"}},
		{"charts/weighstation/templates/operator/deployment.yaml", []string{"- name: " + OperatorContainer, "-leader-elect-lease-duration="}},
		{"charts/weighstation/templates/_helpers.tpl", []string{ComponentLabel + ": " + ComponentOperator, ComponentLabel + ": " + ComponentBroker, InstanceLabel + ": {{ .Release.Name }}", WebhookConfiguration, `printf "%s-sidecar-injector"`}},
		{"controllers/injectionproof/proof.go", []string{`SidecarContainer = "` + SidecarContainer + `"`}},
		{"controllers/webhook/inject.go", []string{"DefaultMetricsPort = 9091", "RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)"}},
		{"charts/weighstation/values.yaml", []string{"metrics:\n    port: 9092", "metrics:\n    port: 8080", "pullPolicy: IfNotPresent", "  extraArgs: []", "  replicas: 1", "leaseDuration: 15s"}},
		{"api/v1alpha1/subscription_types.go", []string{"Engaged bool `json:\"engaged,omitempty\"`", "KillSwitch *KillSwitch `json:\"killSwitch,omitempty\"`", `name="P99.9",type=string,JSONPath=` + "`.status.aggregate.p999`"}},
		{"sidecar/metrics.go", []string{MetricBrokerConnected, MetricBrokerReconnects, MetricBrokerInDoubt, MetricDropped, MetricPending, MetricArrived, MetricDelivered}},
		{"broker/metrics.go", []string{`"` + MetricBrokerConnections + `"`}},
		{"controllers/brokercreds/metrics.go", []string{MetricCredentialsRevoke}},
		{"controllers/brokercreds/keeper.go", []string{`TrustConfigMapName = "` + TrustConfigMapName + `"`}},
		{"controllers/brokercreds/trust.go", []string{`TrustRevocationsKey = "` + TrustRevocationsKey + `"`}},
		{"demo/apps/main.go", []string{`fs.String("nats"`, `fs.String("control"`, `"orders-api":`, `"billing":`, `"spam-filter":`}},
	} {
		b, err := os.ReadFile(filepath.Join(repoRoot, c.file))
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		for _, want := range c.wants {
			if !strings.Contains(string(b), want) {
				t.Errorf("%s no longer holds %q: update the stories' assumption", c.file, want)
			}
		}
	}
}
