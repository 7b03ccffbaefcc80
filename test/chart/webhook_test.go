package chart_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// webhookName is the webhook's name (controllers/webhook.Name).
const webhookName = "sidecar-injector.weighstation.io"

// The sidecar-injection webhook: its configuration calls the Service in
// front of every operator replica, on the port the operator serves it,
// never for the release's namespace or kube-system; the operator's flags
// name the configuration, the Service and its own image for the sidecar.
func TestWebhook(t *testing.T) {
	objs := render(t)
	cfg := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, one(t, objs, "MutatingWebhookConfiguration", "weighstation-sidecar-injector"))
	if len(cfg.Webhooks) != 1 {
		t.Fatalf("%d webhooks, want 1", len(cfg.Webhooks))
	}
	wh := cfg.Webhooks[0]
	switch {
	case wh.Name != webhookName:
		t.Errorf("webhook name %q, want %q", wh.Name, webhookName)
	case wh.FailurePolicy == nil || *wh.FailurePolicy != admissionregistrationv1.Fail:
		t.Errorf("failurePolicy %v, want Fail by default", wh.FailurePolicy)
	case wh.TimeoutSeconds == nil || *wh.TimeoutSeconds != 5:
		t.Errorf("timeoutSeconds %v, want 5 by default", wh.TimeoutSeconds)
	case wh.SideEffects == nil || *wh.SideEffects != admissionregistrationv1.SideEffectClassNone:
		t.Errorf("sideEffects %v, want None", wh.SideEffects)
	case wh.ReinvocationPolicy == nil || *wh.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy:
		t.Errorf("reinvocationPolicy %v, want IfNeeded", wh.ReinvocationPolicy)
	case len(wh.Rules) != 2 || !slices.Equal(wh.Rules[0].Resources, []string{"pods"}) || !slices.Equal(wh.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) ||
		!slices.Equal(wh.Rules[1].Resources, []string{"pods/ephemeralcontainers"}) || !slices.Equal(wh.Rules[1].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Update}):
		t.Errorf("rules %+v, want Pod CREATE and pods/ephemeralcontainers UPDATE", wh.Rules)
	case wh.ObjectSelector != nil:
		t.Errorf("objectSelector %+v: the handler decides opt-in (pod or namespace label)", wh.ObjectSelector)
	}
	excluded := wh.NamespaceSelector.MatchExpressions
	if len(excluded) != 1 || excluded[0].Key != "kubernetes.io/metadata.name" || excluded[0].Operator != metav1.LabelSelectorOpNotIn || !slices.Equal(excluded[0].Values, []string{"mesh", "kube-system"}) {
		t.Errorf("namespaceSelector %+v, want kubernetes.io/metadata.name NotIn [mesh kube-system]", wh.NamespaceSelector)
	}

	ref := wh.ClientConfig.Service
	if ref == nil || ref.Namespace != "mesh" || ref.Path == nil || *ref.Path != "/inject-sidecar" {
		t.Fatalf("clientConfig.service %+v, want the webhook Service in mesh, path /inject-sidecar", ref)
	}
	svc := typed[corev1.Service](t, one(t, objs, "Service", ref.Name))
	deploy := typed[appsv1.Deployment](t, one(t, objs, "Deployment", "weighstation-operator"))
	for k, v := range svc.Spec.Selector {
		if deploy.Spec.Template.Labels[k] != v {
			t.Errorf("webhook Service selects %s=%s, which the operator's pods lack", k, v)
		}
	}
	if _, leader := svc.Spec.Selector["weighstation.io/xds-leader"]; leader {
		t.Error("the webhook Service selects the leader alone; every replica serves the webhook")
	}
	if len(svc.Spec.Ports) != 1 || ref.Port == nil || svc.Spec.Ports[0].Port != *ref.Port || svc.Spec.Ports[0].TargetPort != intstr.FromString("webhook") {
		t.Errorf("webhook Service ports %+v, configuration port %v: want one, targetPort webhook", svc.Spec.Ports, ref.Port)
	}
	operator := deploy.Spec.Template.Spec.Containers[0]
	port := int32(0)
	for _, p := range operator.Ports {
		if p.Name == "webhook" {
			port = p.ContainerPort
		}
	}
	for _, want := range []string{
		"-webhook-configuration=" + cfg.Name,
		"-webhook-service=" + svc.Name,
		"-webhook-listen=:" + strconv.Itoa(int(port)),
		"-sidecar-image=" + operator.Image,
		"-sidecar-broker=nats://weighstation-broker.mesh.svc:4222",
		"-sidecar-operator-address=weighstation-xds.mesh.svc:9443",
		"-sidecar-memory-limit=128Mi",
		"-sidecar-memory-max=1Gi",
	} {
		if !slices.Contains(operator.Args, want) {
			t.Errorf("operator args lack %s: %q", want, operator.Args)
		}
	}

	t.Run("values", func(t *testing.T) {
		objs := render(t, "webhook.failurePolicy=Ignore", "webhook.timeoutSeconds=10", "webhook.namespaceSelector.matchLabels.team=shop")
		wh := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, one(t, objs, "MutatingWebhookConfiguration", "weighstation-sidecar-injector")).Webhooks[0]
		if *wh.FailurePolicy != admissionregistrationv1.Ignore || *wh.TimeoutSeconds != 10 || wh.NamespaceSelector.MatchLabels["team"] != "shop" || len(wh.NamespaceSelector.MatchExpressions) != 1 {
			t.Errorf("failurePolicy %v, timeoutSeconds %v, namespaceSelector %+v", *wh.FailurePolicy, *wh.TimeoutSeconds, wh.NamespaceSelector)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		objs := render(t, "webhook.enabled=false")
		if len(find(objs, "MutatingWebhookConfiguration")) != 0 {
			t.Error("webhook.enabled=false still renders the configuration")
		}
		for _, s := range find(objs, "Service") {
			if strings.Contains(s.GetName(), "sidecar-injector") {
				t.Errorf("webhook.enabled=false still renders Service %s", s.GetName())
			}
		}
		args := typed[appsv1.Deployment](t, one(t, objs, "Deployment", "weighstation-operator")).Spec.Template.Spec.Containers[0].Args
		for _, a := range args {
			if strings.HasPrefix(a, "-webhook") || strings.HasPrefix(a, "-sidecar") {
				t.Errorf("webhook.enabled=false still passes %s", a)
			}
		}
	})
}

// checkWebhookInstalled: in the real apiserver, with nothing serving the
// webhook, a pod that is sent to it is refused by name (failurePolicy
// Fail), and a pod in the release's namespace is never sent. No other
// test of this package creates Pods.
func checkWebhookInstalled(t *testing.T, c client.Client, ns, appNS string) {
	t.Helper()
	ctx := context.Background()
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := c.Get(ctx, client.ObjectKey{Name: "weighstation-sidecar-injector"}, cfg); err != nil {
		t.Fatalf("the webhook configuration: %v", err)
	}
	pod := func(namespace string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: "app-"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}
	}
	err := c.Create(ctx, pod(appNS))
	if err == nil || !strings.Contains(err.Error(), `failed calling webhook "`+webhookName+`"`) {
		t.Errorf("a pod in %s with no operator running: %v, want a refusal by %s (failurePolicy Fail)", appNS, err, webhookName)
	}
	if err := c.Create(ctx, pod(ns)); err != nil {
		t.Errorf("a pod in the release's namespace %s: %v, want it admitted without the webhook", ns, err)
	}
}
