package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/pki"
	"github.com/weighstation/weighstation/controllers/webhook"
	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/internal/proctest"
	"github.com/weighstation/weighstation/internal/testcert"
)

// TestOperatorServesTheInjectionWebhook: the operator process, under its
// generated RBAC, serves the webhook and reads namespaces' labels from its
// cache: a pod created in a labelled namespace is stored with the sidecar.
// Its serving certificate comes from its own CA, whose bundle it writes
// into the webhook configuration it is named, or, with -webhook-cert-dir,
// from files that another issuer (cert-manager) keeps, with the caBundle
// left to that issuer: here the test plays cert-manager and its
// cainjector, and renews the certificate from a new CA while the operator
// runs.
func TestOperatorServesTheInjectionWebhook(t *testing.T) {
	t.Run("from its CA", func(t *testing.T) {
		run := startWebhookOperator(t, nil)
		waitFor(t, "the operator writes the caBundle", func() error {
			var got admissionregistrationv1.MutatingWebhookConfiguration
			if err := run.c.Get(context.Background(), client.ObjectKeyFromObject(run.cfg), &got); err != nil {
				return err
			}
			if len(got.Webhooks[0].ClientConfig.CABundle) == 0 {
				return errors.New("no caBundle yet")
			}
			return nil
		})
		run.checkInjects(t)
		noRBACRefusals(t, run.logs.String())
	})
	t.Run("from -webhook-cert-dir", func(t *testing.T) {
		first, second := testcert.NewCA(t, "first"), testcert.NewCA(t, "second")
		dir := t.TempDir()
		writeWebhookPair(t, dir, first)
		run := startWebhookOperator(t, &webhookFiles{dir: dir, caBundle: first.PEM})
		// Until the apiserver has read the configuration, and the
		// operator's cache is synced, calls fail: checkInjects retries.
		run.checkInjects(t)
		// cert-manager renews the certificate from another CA: its
		// cainjector writes the new CA into the configuration, and the
		// kubelet updates the mounted Secret. Pods are injected once both
		// have happened, which needs the operator to serve the new files.
		writeWebhookPair(t, dir, second)
		setCABundle(t, run.c, run.cfg.Name, second.PEM)
		run.checkInjects(t)
		var got admissionregistrationv1.MutatingWebhookConfiguration
		if err := run.c.Get(context.Background(), client.ObjectKeyFromObject(run.cfg), &got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Webhooks[0].ClientConfig.CABundle, second.PEM) {
			t.Errorf("caBundle is not the one the issuer wrote: the operator wrote it with -webhook-cert-dir set")
		}
		out := run.logs.String()
		if strings.Contains(out, "does not name its Service") {
			t.Errorf("the operator warns about a certificate that names its Service:\n%s", out)
		}
		noRBACRefusals(t, out)
	})
}

// webhookFiles is the -webhook-cert-dir mode of startWebhookOperator: the
// directory, and the caBundle the configuration starts with (what
// cainjector writes).
type webhookFiles struct {
	dir      string
	caBundle []byte
}

// webhookRun is an apiserver and an operator that serves its webhook.
type webhookRun struct {
	c    client.Client
	cfg  *admissionregistrationv1.MutatingWebhookConfiguration
	logs *proctest.LockedBuffer
	// xdsPort is the operator's, which the sidecar's default -operator
	// address carries.
	xdsPort string
}

// startWebhookOperator starts an apiserver with the webhook configuration
// registered by URL, and the operator serving it, with files when given.
func startWebhookOperator(t *testing.T, files *webhookFiles) webhookRun {
	t.Helper()
	const ns = "weighstation-system"
	c, kubeconfig := startAPIServer(t, ns)
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	webhookAddr, probeAddr, xdsAddr := natstest.FreeAddr(t), natstest.FreeAddr(t), natstest.FreeAddr(t)
	url := "https://" + webhookAddr + webhook.Path
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: webhook.DefaultConfigurationName},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    webhook.Name,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url},
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			TimeoutSeconds:          ptr.To[int32](5),
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{ns, "kube-system"},
			}}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
		}},
	}
	args := []string{"operator", "-namespace", ns, "-leader-elect=false",
		"-metrics-bind-address", "0", "-health-probe-bind-address", probeAddr, "-xds-listen", xdsAddr,
		"-webhook-configuration", webhook.DefaultConfigurationName, "-webhook-listen", webhookAddr,
		"-sidecar-image", "ghcr.io/weighstation/weighstation:test", "-sidecar-broker", "nats://weighstation-broker.weighstation-system.svc:4222"}
	if files != nil {
		cfg.Webhooks[0].ClientConfig.CABundle = files.caBundle
		args = append(args, "-webhook-cert-dir", files.dir)
	}
	if err := c.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}

	logs := &proctest.LockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the operator's logs:\n%s", logs)
		}
	})
	cmd := exec.Command(buildBinary(t), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	_, xdsPort, err := net.SplitHostPort(xdsAddr)
	if err != nil {
		t.Fatal(err)
	}
	return webhookRun{c: c, cfg: cfg, logs: logs, xdsPort: xdsPort}
}

// checkInjects creates a labelled namespace and waits for a pod created
// there to be stored with the sidecar. Until the apiserver trusts the
// webhook's certificate, its calls fail (and the pod with them,
// failurePolicy Fail): it retries.
func (r webhookRun) checkInjects(t *testing.T) {
	t.Helper()
	ctx, c := context.Background(), r.c
	app := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "shop-", Labels: map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled}}}
	if err := c.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a pod in a labelled namespace stored with the sidecar", func() error {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: app.Name, GenerateName: "app-"},
			Spec:       corev1.PodSpec{ServiceAccountName: "app", Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}
		if err := c.Create(ctx, pod); err != nil {
			return err
		}
		if len(pod.Spec.InitContainers) != 1 || pod.Spec.InitContainers[0].Name != webhook.ContainerName || pod.Spec.InitContainers[0].Image != "ghcr.io/weighstation/weighstation:test" {
			return fmt.Errorf("stored without the sidecar: init containers %+v", pod.Spec.InitContainers)
		}
		if got := pod.Spec.InitContainers[0].Args; !slices.Contains(got, "-operator=weighstation-xds.weighstation-system.svc:"+r.xdsPort) {
			return fmt.Errorf("sidecar args %q lack the default -operator address", got)
		}
		return nil
	})
}

// setCABundle writes bundle into every webhook of the configuration, as
// cert-manager's cainjector does.
func setCABundle(t *testing.T, c client.Client, name string, bundle []byte) {
	t.Helper()
	ctx := context.Background()
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &cfg); err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Webhooks {
		cfg.Webhooks[i].ClientConfig.CABundle = bundle
	}
	if err := c.Update(ctx, &cfg); err != nil {
		t.Fatal(err)
	}
}

// writeWebhookPair writes a serving certificate from ca for the webhook
// Service's DNS names and 127.0.0.1 (the tests register the webhook by
// URL) into dir, as a mounted kubernetes.io/tls Secret holds it.
func writeWebhookPair(t *testing.T, dir string, ca testcert.CA) {
	t.Helper()
	testcert.WriteSecretVolume(t, dir, ca.IssueServing(t, pki.ServiceDNSNames("weighstation-sidecar-injector", "weighstation-system"), []net.IP{net.IPv4(127, 0, 0, 1)}))
}
