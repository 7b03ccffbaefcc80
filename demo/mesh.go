package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/brokercreds"
	"github.com/weighstation/weighstation/controllers/webhook"
	"github.com/weighstation/weighstation/demo/podrunner"
	"github.com/weighstation/weighstation/test/bench/harness"
	"github.com/weighstation/weighstation/test/bench/harness/kubeenv"
)

// The demo's namespace and pods (manifests/pods.yaml).
const (
	namespace  = "demo"
	ordersAPI  = "orders-api"
	billing    = "billing"
	spamFilter = "spam-filter"
)

var podNames = []string{ordersAPI, billing, spamFilter}

// mesh is step 2: the operator (with its sidecar-injection webhook), the
// broker, the Pods with their injected sidecars, and the applications.
func (d *demo) mesh(ctx context.Context) error {
	d.p.step(2, "starting the operator and a broker as local processes")
	kubeconfig, err := d.operatorKubeconfig(ctx)
	if err != nil {
		return err
	}
	webhookAddr, err1 := benchharness.FreeAddr()
	brokerAddr, err2 := benchharness.FreeAddr()
	brokerMetrics, err3 := benchharness.FreeAddr()
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	d.brokerURL = "nats://" + brokerAddr
	// The apiserver cannot reach the webhook's Service here (nothing runs
	// the chart's Pods): it calls the operator on loopback, by URL. The
	// webhook's certificate names 127.0.0.1 for this.
	webhookURL := "https://" + webhookAddr + webhook.Path
	d.p.say("pointing the chart's webhook configuration at the operator's local address (on a cluster: the Service %s)", webhookConfiguration)
	// Both of its entries: pods opted in by their namespace's label, and by
	// their own.
	var ops []string
	for _, i := range []string{"0", "1"} {
		ops = append(ops, `{"op":"remove","path":"/webhooks/`+i+`/clientConfig/service"}`, `{"op":"add","path":"/webhooks/`+i+`/clientConfig/url","value":"`+webhookURL+`"}`)
	}
	if _, err := d.tools.kubectlShow(d.p, "patch", "mutatingwebhookconfiguration", webhookConfiguration, "--type=json", "-p", "["+strings.Join(ops, ",")+"]"); err != nil {
		return err
	}
	// Reports every second, written at most every second, over a short
	// window: status follows the demo's phases within seconds.
	d.op, err = benchharness.StartOperator(benchharness.OperatorOptions{
		Bin: d.o.bin, Kubeconfig: kubeconfig, Namespace: releaseNamespace, LogPath: filepath.Join(d.dir, "operator.log"),
		Args: []string{"-report-interval", "1s", "-report-write-interval", "1s", "-report-window", d.o.reportWindow.String(),
			"-ca-bundle-resync", "1s",
			// What the chart gives the operator, less the addresses no
			// kubelet serves here: the webhook and the broker are local.
			"-webhook-configuration", webhookConfiguration, "-webhook-listen", webhookAddr,
			"-sidecar-image", chartImage, "-sidecar-broker", chartBrokerURL, "-broker-url", d.brokerURL},
	})
	if err != nil {
		return fmt.Errorf("the operator: %w", err)
	}
	d.p.say("operator: pid %d, xDS on %s, the sidecar-injection webhook on %s, as ServiceAccount %s/%s (the chart's RBAC), reports every 1s over a %s window",
		d.op.Pid(), d.op.XDSAddr, webhookAddr, releaseNamespace, operatorAccount, d.o.reportWindow)
	if err := d.startBroker(ctx, brokerAddr, brokerMetrics); err != nil {
		return err
	}

	d.p.say("creating the demo's Pods from %s: plain application pods labelled %s=%s; the apiserver calls the webhook, which adds the sidecar",
		filepath.Join(d.o.manifests, "pods.yaml"), v1alpha1.InjectLabel, v1alpha1.InjectEnabled)
	if err := d.applyThroughWebhook(ctx, filepath.Join(d.o.manifests, "pods.yaml")); err != nil {
		return err
	}
	if err := d.showInjected(ordersAPI); err != nil {
		return err
	}
	services := map[string]string{chartBrokerHost: brokerAddr}
	_, xdsPort, err := net.SplitHostPort(d.op.XDSAddr)
	if err != nil {
		return err
	}
	services[net.JoinHostPort(kubeenv.XDSServerName(), xdsPort)] = d.op.XDSAddr
	runner := podrunner.Options{
		Cluster: d.cl, SidecarCommand: d.o.sidecar, Services: services, Dir: d.dir, ReadyTimeout: d.o.wait,
		// The demo's own: reports every second (status follows its phases),
		// and a short drain at its end.
		Extra: []string{"-report-interval=1s", "-drain-grace=1s", "-zap-time-encoding=rfc3339nano"},
	}
	d.p.say("the pod runner plays the kubelet for each Pod's injected sidecar: its volumes (TokenRequest for the projected token, the CA bundle ConfigMap), its downward API, the Services in its flags resolved to the local processes, and the Pod's status")
	for _, name := range podNames {
		pod, err := podrunner.Start(ctx, runner, namespace, name)
		if err != nil {
			return err
		}
		d.pods[name] = pod
		d.procs = append(d.procs, pod.Sidecar)
		if name == ordersAPI {
			d.p.block("$ # the injected sidecar of "+name+", as the pod runner ran it", strings.Join(pod.Command, " \\\n    "))
		}
		d.p.say("pod %s: sidecar pid %d on %s, configured by the operator, with the broker credential it issued", name, pod.Sidecar.Pid(), strings.TrimPrefix(pod.NATSURL, "nats://"))
	}
	if _, err := d.tools.kubectlShow(d.p, "get", "pods", "-n", namespace, "-o", "wide"); err != nil {
		return err
	}
	d.p.say("READY 1/2: each pod's sidecar runs; its application is the demo's to start, once there is policy for it (step 3)")

	return nil
}

// applyThroughWebhook applies the pods' manifest, again until the
// apiserver has the webhook's caBundle (which the operator writes at
// start) and the webhook admits them: with failurePolicy Fail, a pod the
// webhook cannot be asked about is refused, never created bare.
func (d *demo) applyThroughWebhook(ctx context.Context, manifest string) error {
	deadline := time.Now().Add(d.o.wait)
	for {
		out, err := d.tools.kubectlOut("apply", "-f", manifest)
		if err == nil {
			d.p.block("$ kubectl apply -f "+manifest, out)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the webhook did not admit the demo's pods within %s: %w\n%s", d.o.wait, err, d.op.Tail(20))
		}
		if aliveErr := d.op.Alive(); aliveErr != nil {
			return aliveErr
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// showInjected prints what the webhook added to a pod: its annotation and
// its sidecar container, from `kubectl get pod -o yaml`.
func (d *demo) showInjected(name string) error {
	out, err := d.tools.kubectlOut("get", "pod", name, "-n", namespace, "-o", "yaml")
	if err != nil {
		return err
	}
	d.p.block("$ kubectl get pod "+name+" -n "+namespace+" -o yaml   # what the webhook added", injectedExcerpt(out))
	return nil
}

// injectedExcerpt is the injected annotation and the initContainers block
// of a pod's YAML.
func injectedExcerpt(podYAML string) string {
	var keep []string
	inBlock := false
	for line := range strings.Lines(podYAML) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.Contains(line, v1alpha1.InjectedAnnotation+":"):
			keep = append(keep, "metadata.annotations:", line)
		case line == "  initContainers:":
			inBlock = true
			keep = append(keep, "spec:", line)
		case inBlock && strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "   ") && !strings.HasPrefix(line, "  -"):
			inBlock = false
		case inBlock:
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}

// startBroker runs `weighstation broker` as the chart's StatefulSet does:
// with -trust-dir, the ConfigMap of the operator's JWTs, so that it admits
// the credentials the operator issues each sidecar and nothing else.
func (d *demo) startBroker(ctx context.Context, addr, metricsAddr string) error {
	trustDir := filepath.Join(d.dir, "broker-trust")
	if err := d.cl.WaitConfigMap(ctx, releaseNamespace, brokercreds.TrustConfigMapName, trustDir, d.o.wait, d.op.Alive); err != nil {
		return err
	}
	broker, err := benchharness.StartLogged("broker", filepath.Join(d.dir, "broker.log"), d.o.bin, "broker", "-listen", addr, "-trust-dir", trustDir, "-account-dir", filepath.Join(d.dir, "broker-accounts"), "-metrics-listen", metricsAddr)
	if err != nil {
		return err
	}
	benchharness.AtExit(broker.Stop)
	d.procs = append(d.procs, broker)
	if err := benchharness.WaitHTTPReady("http://"+metricsAddr+"/healthz", d.o.wait, broker.Alive); err != nil {
		return fmt.Errorf("%w\n%s", err, broker.Tail(20))
	}
	d.p.say("broker: pid %d on %s, trusting the operator's JWTs from ConfigMap %s/%s: only a sidecar with the credential the operator issued it gets in",
		broker.Pid(), addr, releaseNamespace, brokercreds.TrustConfigMapName)
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
