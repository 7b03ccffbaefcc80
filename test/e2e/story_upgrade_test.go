//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// upgradeArg is the changed value: the operator's log level, stated
// (info is the default), so that the upgrade rolls the operator's pods and
// changes nothing else.
const upgradeArg = "-zap-log-level=info"

// stepUpgrade runs `helm upgrade --reuse-values` with one changed value
// (operator.extraArgs): the operator rolls (a leader change included), the
// brokers are left alone, and the data plane keeps flowing with no loss.
func stepUpgrade(s *stepRun) {
	ctx, cfg := s.ctx, s.cfg
	values := filepath.Join(s.t.TempDir(), "upgrade-values.yaml")
	if err := os.WriteFile(values, []byte("operator:\n  extraArgs: [\""+upgradeArg+"\"]\n"), 0o600); err != nil {
		s.fatalf("writing the upgrade's values: %v", err)
	}
	brokers := s.brokerUIDs(ctx)
	before := s.subscriberNow(ctx)
	since := time.Now()
	start := time.Now()
	if _, err := s.c.helm(ctx, helmCommandLimit, "upgrade", ReleaseName, cfg.Chart, "-n", cfg.ReleaseNamespace, "--reuse-values", "-f", values, "--wait", "--timeout", helmInstallTimeout); err != nil {
		s.fatalf("helm upgrade: %v", err)
	}
	s.measure("helm upgrade --wait", time.Since(start), 0)

	out, err := command(ctx, kubectlTimeout, "", cfg.Helm, "status", ReleaseName, "-n", cfg.ReleaseNamespace, "-o", "json")
	if err != nil {
		s.fatalf("%v", err)
	}
	var status struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal([]byte(out), &status); err != nil || status.Version < 2 {
		s.errorf("the release's revision after the upgrade: %d (%v)", status.Version, err)
	}
	s.checkOperatorArg(ctx, upgradeArg)
	if _, err := s.c.waitWorkloadsReady(ctx, cfg.ReleaseNamespace, workloadsReady); err != nil {
		s.errorf("%v", err)
	}
	if leader, _, err := s.c.waitLeader(ctx, leaderElected, "", ""); err != nil {
		s.errorf("%v", err)
	} else {
		s.note("%s leads after the upgrade", leader)
	}
	if after := s.brokerUIDs(ctx); !equalUIDs(brokers, after) {
		s.errorf("the upgrade replaced broker pods (%v → %v): it changed nothing of theirs", brokers, after)
	}
	s.checkStillFlowing(ctx, before)
	s.waitRequesterAnswered(ctx)
	s.checkNoLossSince(ctx, since)
}

func (s *stepRun) checkOperatorArg(ctx context.Context, arg string) {
	deployments, err := s.c.kube.AppsV1().Deployments(s.cfg.ReleaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: componentSelector(ComponentOperator)})
	if err != nil || len(deployments.Items) != 1 {
		s.fatalf("finding the operator's Deployment: %v", err)
	}
	for _, c := range deployments.Items[0].Spec.Template.Spec.Containers {
		if c.Name == OperatorContainer && slices.Contains(c.Args, arg) {
			return
		}
	}
	s.errorf("the operator's Deployment does not run with %s after the upgrade", arg)
}

// brokerUIDs are the broker pods' UIDs by name.
func (s *stepRun) brokerUIDs(ctx context.Context) map[string]types.UID {
	pods, err := s.c.kube.CoreV1().Pods(s.cfg.ReleaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: componentSelector(ComponentBroker)})
	if err != nil {
		s.fatalf("listing the brokers: %v", err)
	}
	out := map[string]types.UID{}
	for _, p := range pods.Items {
		out[p.Name] = p.UID
	}
	return out
}

func equalUIDs(a, b map[string]types.UID) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
