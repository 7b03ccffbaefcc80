package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/webhook"
	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/internal/proctest"
)

// TestOperatorServesTheInjectionWebhook: the operator process, under its
// generated RBAC, writes its CA bundle into the webhook configuration it
// is named, serves the webhook, and reads namespaces' labels from its
// cache: a pod created in a labelled namespace is stored with the sidecar.
func TestOperatorServesTheInjectionWebhook(t *testing.T) {
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
	if err := c.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}

	logs := &proctest.LockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the operator's logs:\n%s", logs)
		}
	})
	cmd := exec.Command(buildBinary(t), "operator", "-namespace", ns, "-leader-elect=false",
		"-metrics-bind-address", "0", "-health-probe-bind-address", probeAddr, "-xds-listen", xdsAddr,
		"-webhook-configuration", webhook.DefaultConfigurationName, "-webhook-listen", webhookAddr,
		"-sidecar-image", "ghcr.io/weighstation/weighstation:test", "-sidecar-broker", "nats://weighstation-broker.weighstation-system.svc:4222")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})

	waitFor(t, "the operator writes the caBundle", func() error {
		var got admissionregistrationv1.MutatingWebhookConfiguration
		if err := c.Get(ctx, client.ObjectKeyFromObject(cfg), &got); err != nil {
			return err
		}
		if len(got.Webhooks[0].ClientConfig.CABundle) == 0 {
			return errors.New("no caBundle yet")
		}
		return nil
	})
	app := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "shop-", Labels: map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled}}}
	if err := c.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	_, xdsPort, err := net.SplitHostPort(xdsAddr)
	if err != nil {
		t.Fatal(err)
	}
	// Until the apiserver has the caBundle, its calls fail (and the pod
	// with them, failurePolicy Fail): retry.
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
		if got := pod.Spec.InitContainers[0].Args; !slices.Contains(got, "-operator=weighstation-xds.weighstation-system.svc:"+xdsPort) {
			return fmt.Errorf("sidecar args %q lack the default -operator address", got)
		}
		return nil
	})
	noRBACRefusals(t, logs.String())
}
