package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/hack/benchharness"
	"github.com/weighstation/weighstation/hack/benchharness/kubeenv"
	"github.com/weighstation/weighstation/hack/demo/podrunner"
)

// The demo's namespace and pods (manifests/pods.yaml).
const (
	namespace  = "demo"
	ordersAPI  = "orders-api"
	billing    = "billing"
	spamFilter = "spam-filter"
)

var podNames = []string{ordersAPI, billing, spamFilter}

// mesh is step 2: the operator, the broker, the Pods with their sidecars,
// and the applications.
func (d *demo) mesh(ctx context.Context) error {
	d.p.step(2, "starting the operator and a broker as local processes")
	kubeconfig, err := d.operatorKubeconfig(ctx)
	if err != nil {
		return err
	}
	// Reports every second, written at most every second, over a short
	// window: status follows the demo's phases within seconds.
	d.op, err = benchharness.StartOperator(benchharness.OperatorOptions{
		Bin: d.o.bin, Kubeconfig: kubeconfig, Namespace: releaseNamespace, LogPath: filepath.Join(d.dir, "operator.log"),
		Args: []string{"-report-interval", "1s", "-report-write-interval", "1s", "-report-window", d.o.reportWindow.String(),
			"-ca-bundle-resync", "1s"},
	})
	if err != nil {
		return fmt.Errorf("the operator: %w", err)
	}
	d.p.say("operator: pid %d, xDS on %s, as ServiceAccount %s/%s (the chart's RBAC), reports every 1s over a %s window",
		d.op.Pid(), d.op.XDSAddr, releaseNamespace, operatorAccount, d.o.reportWindow)
	if err := d.startBroker(ctx); err != nil {
		return err
	}

	d.p.say("creating the demo's Pods from %s (ServiceAccounts, spec.nodeName, the sidecar as a native sidecar)", filepath.Join(d.o.manifests, "pods.yaml"))
	if _, err := d.tools.kubectlShow(d.p, "apply", "-f", filepath.Join(d.o.manifests, "pods.yaml")); err != nil {
		return err
	}
	// The operator publishes its CA bundle into every namespace with
	// sidecar pods; a pod mounts it.
	caFile, err := d.cl.WaitBundle(ctx, namespace, d.o.wait, d.op.Alive)
	if err != nil {
		return err
	}
	runner := podrunner.Options{
		Cluster: d.cl, SidecarCommand: d.o.sidecar, BrokerURL: d.brokerURL, BrokerTokenFile: d.brokerTokenFile,
		XDSAddr: d.op.XDSAddr, XDSServerName: kubeenv.XDSServerName(), CAFile: caFile, ReportInterval: time.Second,
		Dir: d.dir, ReadyTimeout: d.o.wait,
	}
	d.p.say("the pod runner plays the kubelet for each Pod's sidecar: TokenRequest for the Pod's projected token, `%s` with the Pod's identity, the Pod's status", strings.Join(d.o.sidecar, " "))
	for _, name := range podNames {
		pod, err := podrunner.Start(ctx, runner, namespace, name)
		if err != nil {
			return err
		}
		d.pods[name] = pod
		d.procs = append(d.procs, pod.Sidecar)
		d.p.say("pod %s: sidecar pid %d on %s, configured by the operator", name, pod.Sidecar.Pid(), strings.TrimPrefix(pod.NATSURL, "nats://"))
	}
	if _, err := d.tools.kubectlShow(d.p, "get", "pods", "-n", namespace, "-o", "wide"); err != nil {
		return err
	}
	d.p.say("READY 1/2: each pod's sidecar runs; its application is the demo's to start, once there is policy for it (step 3)")

	return nil
}

// startBroker runs `weighstation broker` with the chart's token.
func (d *demo) startBroker(ctx context.Context) error {
	var err error
	if d.brokerTokenFile, err = d.brokerToken(ctx); err != nil {
		return err
	}
	addr, err := benchharness.FreeAddr()
	if err != nil {
		return err
	}
	d.brokerURL = "nats://" + addr
	broker, err := benchharness.StartLogged("broker", filepath.Join(d.dir, "broker.log"), d.o.bin, "broker", "-listen", addr, "-token-file", d.brokerTokenFile)
	if err != nil {
		return err
	}
	benchharness.AtExit(broker.Stop)
	d.procs = append(d.procs, broker)
	token, err := readFile(d.brokerTokenFile)
	if err != nil {
		return err
	}
	if err := benchharness.WaitNATS(d.brokerURL, nats.Token(token)); err != nil {
		return fmt.Errorf("%w\n%s", err, broker.Tail(20))
	}
	d.p.say("broker: pid %d on %s, with the token of the chart's Secret %s/%s", broker.Pid(), addr, releaseNamespace, brokerTokenSecret)
	return nil
}

// startApps runs the sample applications (nats.go), each on its pod's
// sidecar, once the Subscriptions exist: a sidecar refuses a SUB that no
// Subscription of its pod covers.
func (d *demo) startApps() error {
	d.p.say("starting the sample applications (nats.go), each on its pod's sidecar")
	for _, name := range podNames {
		a, err := startApp(d.appsBin, name, d.pods[name].NATSURL, filepath.Join(d.dir, name+".log"), d.o.wait)
		if err != nil {
			return err
		}
		d.apps[name] = a
		d.procs = append(d.procs, a.proc)
		d.p.say("%s: pid %d, connected to %s", name, a.proc.Pid(), d.pods[name].NATSURL)
	}
	return nil
}
