package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/weighstation/weighstation/test/bench/harness"
	"github.com/weighstation/weighstation/test/bench/harness/kubeenv"
)

// The chart's release: its name and namespace make the names of the
// operator's ServiceAccount, the webhook configuration, the broker's
// Service and the xDS Service, which kubeenv's constants (the operator's
// defaults) match.
const (
	release              = "weighstation"
	releaseNamespace     = kubeenv.OperatorNamespace
	operatorAccount      = release + "-operator"
	webhookConfiguration = release + "-sidecar-injector"
	// chartBrokerHost and chartBrokerURL are the broker Service's, as the
	// chart gives them to the injected sidecars; chartImage the chart's
	// image (the pod runner runs the local binary in its place).
	chartBrokerHost = release + "-broker." + releaseNamespace + ".svc:4222"
	chartBrokerURL  = "nats://" + chartBrokerHost
	chartImage      = "ghcr.io/weighstation/weighstation:0.1.0"
)

// controlPlane is step 1: the apiserver and etcd, and the chart.
func (d *demo) controlPlane() error {
	d.p.step(1, "starting a control plane: envtest's kube-apiserver and etcd (hack/setup-envtest.sh's builds)")
	cl, err := kubeenv.Start("demo", "") // no CRDs: the chart installs them
	if err != nil {
		return err
	}
	d.cl = cl
	benchharness.AtExit(cl.Stop)
	d.tools.kubeconfig = cl.Kubeconfig
	version, err := d.tools.kubectlOut("version")
	if err != nil {
		return err
	}
	d.p.block("$ kubectl version", version)

	d.p.say("installing the chart with helm: CRDs, RBAC, Services, the sidecar-injection webhook's configuration, the operator's Deployment and the broker's StatefulSet")
	out, err := d.tools.helmOut("install", release, d.o.chart, "--namespace", releaseNamespace, "--create-namespace")
	if err != nil {
		return err
	}
	d.p.block("$ helm install "+release+" "+d.o.chart+" --namespace "+releaseNamespace+" --create-namespace", firstLines(out, 6))
	if _, err := d.tools.kubectlShow(d.p, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/topics.weighstation.io", "crd/subscriptions.weighstation.io"); err != nil {
		return err
	}
	d.p.say("this control plane has no scheduler and no kubelet: the chart's operator and broker Pods never run,")
	d.p.say("so step 2 runs both as local processes, the operator as the chart's ServiceAccount with the chart's RBAC")
	return nil
}

// operatorKubeconfig writes a kubeconfig that authenticates as the chart's
// operator ServiceAccount, with a token the apiserver issues: the operator
// then has the chart's RBAC and nothing more, as in a cluster.
func (d *demo) operatorKubeconfig(ctx context.Context) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNamespace, Name: operatorAccount}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(time.Hour / time.Second))}}
	if err := d.cl.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		return "", fmt.Errorf("requesting a token for the chart's ServiceAccount %s/%s: %w", releaseNamespace, operatorAccount, err)
	}
	cfg, err := clientcmd.LoadFromFile(d.cl.Kubeconfig)
	if err != nil {
		return "", fmt.Errorf("reading the admin kubeconfig: %w", err)
	}
	for name := range cfg.AuthInfos {
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	}
	path := filepath.Join(d.dir, "operator.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("writing the operator's kubeconfig: %w", err)
	}
	return path, nil
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append(lines[:n], "...")
	}
	return strings.Join(lines, "\n")
}
