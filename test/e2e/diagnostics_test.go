//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Bounds of what a failure prints.
const (
	diagnoseBudget   = 3 * time.Minute
	nodeLogLines     = 40
	podLogLines      = "60"
	eventLines       = 30
	diagnoseCmdLimit = 20 * time.Second
)

// diagnose prints what helps find why a step failed: the end of every
// node component's log (E2E_LOGDIR/*.log), `kubectl describe` of what is
// not Ready in the release's and the applications' namespaces, the recent
// Events there, the logs of the operator, of the pods that are not Ready
// and of the step's suspects, and the probes' last stats.
func (w *world) diagnose(stepName string, suspects []string) {
	ctx, cancel := context.WithTimeout(context.Background(), diagnoseBudget)
	defer cancel()
	fmt.Printf("\n======== DIAGNOSTICS for %s ========\n", stepName)
	defer fmt.Printf("======== end of DIAGNOSTICS for %s ========\n\n", stepName)
	w.nodeLogs()
	notReady := map[string][]string{}
	for _, ns := range []string{w.cfg.ReleaseNamespace, w.cfg.AppNamespace} {
		notReady[ns] = w.describeNotReady(ctx, ns)
		w.printCmd(ctx, eventLines, "get", "events", "-n", ns, "--sort-by=.lastTimestamp")
	}
	w.printCmd(ctx, 0, "logs", "-n", w.cfg.ReleaseNamespace, "-l", componentSelector(ComponentOperator), "--all-containers", "--prefix", "--tail="+podLogLines)
	for ns, pods := range notReady {
		for _, p := range pods {
			w.podLogs(ctx, ns, p)
		}
	}
	for _, p := range suspects {
		if !slices.Contains(notReady[w.cfg.AppNamespace], p) {
			w.podLogs(ctx, w.cfg.AppNamespace, p)
		}
	}
	for _, name := range []string{PodPublisher, PodSubscriber, PodRequester, PodResponder} {
		s, err := w.c.probeStats(ctx, w.cfg.AppNamespace, name)
		if err != nil {
			fmt.Printf("---- probe %s: %v\n", name, err)
			continue
		}
		line, _ := FormatProbeSummary(s)
		fmt.Printf("---- probe %s: %s\n", name, line)
	}
}

func (w *world) nodeLogs() {
	if w.cfg.LogDir == "" {
		fmt.Println("---- node logs: E2E_LOGDIR is unset")
		return
	}
	logs, err := filepath.Glob(filepath.Join(w.cfg.LogDir, "*.log"))
	if err != nil || len(logs) == 0 {
		fmt.Printf("---- node logs: no *.log in %s (%v)\n", w.cfg.LogDir, err)
		return
	}
	for _, path := range logs {
		tail, err := TailLines(path, nodeLogLines)
		if err != nil {
			fmt.Printf("---- %s: %v\n", path, err)
			continue
		}
		fmt.Printf("---- %s (last %d lines)\n%s\n", filepath.Base(path), nodeLogLines, tail)
	}
}

// describeNotReady describes the pods, Deployments and StatefulSets of ns
// that are not Ready, and returns those pods' names.
func (w *world) describeNotReady(ctx context.Context, ns string) []string {
	var pods []string
	list, err := w.c.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Printf("---- pods of %s: %v\n", ns, err)
		return nil
	}
	w.printCmd(ctx, 0, "get", "pods", "-n", ns, "-o", "wide")
	for i := range list.Items {
		if PodNotReady(&list.Items[i]) != "" {
			pods = append(pods, list.Items[i].Name)
			w.printCmd(ctx, 0, "describe", "pod", "-n", ns, list.Items[i].Name)
		}
	}
	if deployments, err := w.c.kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for i := range deployments.Items {
			if DeploymentNotReady(&deployments.Items[i]) != "" {
				w.printCmd(ctx, 0, "describe", "deployment", "-n", ns, deployments.Items[i].Name)
			}
		}
	}
	if sets, err := w.c.kube.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for i := range sets.Items {
			if StatefulSetNotReady(&sets.Items[i]) != "" {
				w.printCmd(ctx, 0, "describe", "statefulset", "-n", ns, sets.Items[i].Name)
			}
		}
	}
	return pods
}

func (w *world) podLogs(ctx context.Context, ns, pod string) {
	w.printCmd(ctx, 0, "logs", "-n", ns, pod, "--all-containers", "--prefix", "--tail="+podLogLines)
	// A container that restarted: what its last run said.
	w.printCmd(ctx, 0, "logs", "-n", ns, pod, "--all-containers", "--prefix", "--previous", "--tail=20")
}

// printCmd prints a kubectl command's output, its last lines when last >
// 0, or its error.
func (w *world) printCmd(ctx context.Context, last int, args ...string) {
	fmt.Printf("---- kubectl %s\n", strings.Join(args, " "))
	out, err := command(ctx, diagnoseCmdLimit, "", w.cfg.Kubectl, args...)
	if err != nil {
		fmt.Printf("(%v)\n", err)
	}
	out = strings.TrimRight(out, "\n")
	if lines := strings.Split(out, "\n"); last > 0 && len(lines) > last {
		out = strings.Join(lines[len(lines)-last:], "\n")
	}
	if out != "" {
		fmt.Println(out)
	}
}
