// Command demo is `make demo` (issue 13): weighstation end to end on this
// machine in a few minutes, step by step, leaving nothing running.
//
//  1. a real control plane (envtest's kube-apiserver and etcd), and the
//     chart installed into it with helm;
//  2. the operator and a broker as local processes (the chart's Deployment
//     and StatefulSet never run: there is no kubelet), the demo's three
//     Pods (manifests/pods.yaml), their sidecars started by the pod runner
//     (package podrunner) with each Pod's identity, and the sample
//     applications (apps/) on their sidecars;
//  3. the demo's Topics and Subscriptions (manifests/policy.yaml), and
//     steady open-loop load from `weighstation bench`;
//  4. `kubectl get topics,subscriptions` with live latency and drops;
//  5. the spam filter made slow: its automatic kill switch trips while
//     billing's latency holds; then the manual kill switch by `kubectl
//     patch`, its effect and its propagation time;
//  6. an oversize publish and a quota burst refused, in the publisher's
//     log and in the Topics' status;
//  7. demo/report.html (billing's latency percentiles per phase on the
//     nines axis, the kill switch's timeline), then the teardown.
//
// Every wait has a timeout and every step checks its outcome: the demo
// fails, naming what did not happen, rather than print a story. -short is
// the same demo with shorter load, which `make test` runs (demo_test.go).
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/weighstation/weighstation/test/bench/harness"
)

func main() {
	o := defaultOptions()
	flag.StringVar(&o.bin, "bin", o.bin, "the weighstation binary: the operator, the broker and the load generator")
	sidecar := flag.String("sidecar", "", "the sidecar's command, space-separated (default: weighstation-sidecar beside -bin; \"bin/weighstation sidecar\" runs the same sidecar)")
	flag.StringVar(&o.apps, "apps", "", "the sample applications' binary (default: go build ./demo/apps)")
	flag.StringVar(&o.kubectl, "kubectl", o.kubectl, "kubectl")
	flag.StringVar(&o.helm, "helm", o.helm, "helm")
	flag.StringVar(&o.chart, "chart", o.chart, "the Helm chart")
	flag.StringVar(&o.manifests, "manifests", o.manifests, "the demo's manifests (pods.yaml, policy.yaml)")
	flag.StringVar(&o.out, "out", o.out, "where report.html goes")
	short := flag.Bool("short", false, "the same steps with shorter load (what `make test` runs)")
	flag.Float64Var(&o.rate, "rate", o.rate, "orders per second from the load generator")
	flag.Parse()
	if *short {
		o.shorten()
	}
	if *sidecar != "" {
		o.sidecar = strings.Fields(*sidecar)
	}
	// envtest logs through controller-runtime's logger, which complains
	// with a stack trace when none was set.
	ctrllog.SetLogger(logr.Discard())
	benchharness.CleanUpOnSignal("demo")
	start := time.Now()
	_, err := run(o, newProgress(os.Stdout, start))
	benchharness.RunCleanups()
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo failed after %s: %v\n", time.Since(start).Round(time.Second), err)
		os.Exit(1)
	}
	fmt.Printf("[%s] done in %s; nothing is left running\n", elapsed(time.Since(start)), time.Since(start).Round(time.Second))
}
