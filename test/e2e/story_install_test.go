//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

// Bounds of the install story.
const (
	helmInstallTimeout = "5m"
	helmCommandLimit   = 6 * time.Minute
	workloadsReady     = 2 * time.Minute
	leaderElected      = 90 * time.Second
	webhookServing     = 90 * time.Second
	brokerReplicas     = 3
	operatorReplicas   = 2 // values.yaml operator.replicas
)

// stepInstall installs the chart with three brokers and checks that it
// runs: every Deployment and StatefulSet Ready, one operator pod leading
// (its label and the Lease agree), and the injection webhook answering
// through its Service (a dry-run pod comes back with the sidecar).
func stepInstall(s *stepRun) {
	ctx, cfg := s.ctx, s.cfg
	s.preflight(ctx)
	start := time.Now()
	// values.yaml: image.repository, image.tag, image.pullPolicy,
	// broker.replicas.
	args := []string{"install", ReleaseName, cfg.Chart, "-n", cfg.ReleaseNamespace, "--create-namespace",
		"--set", "image.repository=" + cfg.ImageRepository, "--set", "image.tag=" + cfg.ImageTag,
		"--set", "image.pullPolicy=" + cfg.PullPolicy, "--set", fmt.Sprintf("broker.replicas=%d", brokerReplicas),
		"--wait", "--timeout", helmInstallTimeout}
	_, err := s.c.helm(ctx, helmCommandLimit, args...)
	s.installed = true // even a failed install may have left objects
	if err != nil {
		s.fatalf("helm install: %v", err)
	}
	installed := time.Now()
	s.measure("helm install --wait", installed.Sub(start), 0)

	if _, err := s.c.waitWorkloadsReady(ctx, cfg.ReleaseNamespace, workloadsReady); err != nil {
		s.fatalf("%v", err)
	}
	s.checkReplicas(ctx)
	s.c.show(ctx, "get", "deployments,statefulsets,pods", "-n", cfg.ReleaseNamespace, "-o", "wide", "-L", LeaderLabel)

	s.readLeaseDuration(ctx)
	leader, _, err := s.c.waitLeader(ctx, leaderElected, "", "")
	if err != nil {
		s.fatalf("%v", err)
	}
	s.note("the leading operator pod is %s (label %s=true, and it holds the Lease %s)", leader, LeaderLabel, LeaseName)

	s.checkWebhook(ctx, installed)
}

// preflight refuses to run over a release or a namespace it does not own.
func (s *stepRun) preflight(ctx context.Context) {
	cfg := s.cfg
	if _, err := command(ctx, kubectlTimeout, "", cfg.Helm, "status", ReleaseName, "-n", cfg.ReleaseNamespace); err == nil {
		s.fatalf("a release %s already exists in %s (a previous run kept with E2E_KEEP?): `helm uninstall %s -n %s` first", ReleaseName, cfg.ReleaseNamespace, ReleaseName, cfg.ReleaseNamespace)
	}
	_, err := s.c.kube.CoreV1().Namespaces().Get(ctx, cfg.ReleaseNamespace, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		s.ownReleaseNamespace = true
	case err != nil:
		s.fatalf("reading namespace %s: %v", cfg.ReleaseNamespace, err)
	default:
		s.note("namespace %s exists already: the stories will not delete it", cfg.ReleaseNamespace)
	}
	ns, err := s.c.kube.CoreV1().Namespaces().Get(ctx, cfg.AppNamespace, metav1.GetOptions{})
	if err == nil && ns.Labels["e2e.weighstation.io/owner"] != "e2e" {
		s.fatalf("namespace %s exists and is not the stories' (no label e2e.weighstation.io/owner=e2e): choose another E2E_APP_NAMESPACE; the stories delete theirs at the end", cfg.AppNamespace)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		s.fatalf("reading namespace %s: %v", cfg.AppNamespace, err)
	}
	s.ownAppNamespace = true
}

func (s *stepRun) checkReplicas(ctx context.Context) {
	ns := s.cfg.ReleaseNamespace
	brokers, err := s.c.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: componentSelector(ComponentBroker)})
	if err != nil {
		s.fatalf("listing the brokers: %v", err)
	}
	operators, err := s.c.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: componentSelector(ComponentOperator)})
	if err != nil {
		s.fatalf("listing the operator's pods: %v", err)
	}
	if len(brokers.Items) != brokerReplicas || len(operators.Items) != operatorReplicas {
		s.fatalf("%d broker pods and %d operator pods, want %d and %d", len(brokers.Items), len(operators.Items), brokerReplicas, operatorReplicas)
	}
}

// readLeaseDuration reads -leader-elect-lease-duration from the operator's
// Deployment (the chart's operator.leaderElection.leaseDuration): the
// SIGKILL story's target is that plus 5 s.
func (s *stepRun) readLeaseDuration(ctx context.Context) {
	deployments, err := s.c.kube.AppsV1().Deployments(s.cfg.ReleaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: componentSelector(ComponentOperator)})
	if err != nil || len(deployments.Items) != 1 {
		s.fatalf("finding the operator's Deployment: %v (%d found)", err, len(deployments.Items))
	}
	for _, c := range deployments.Items[0].Spec.Template.Spec.Containers {
		if c.Name != OperatorContainer {
			continue
		}
		d, err := LeaseDuration(c.Args)
		if err != nil {
			s.fatalf("the operator's arguments: %v", err)
		}
		s.leaseDuration = d
		s.note("the operator's lease duration is %s (-leader-elect-lease-duration)", d)
		return
	}
	s.fatalf("the operator's Deployment has no container %q", OperatorContainer)
}

// checkWebhook creates (dry run) a pod labelled for injection in the
// applications' namespace: the apiserver calls the webhook through its
// Service, and the pod comes back with the sidecar.
func (s *stepRun) checkWebhook(ctx context.Context, installed time.Time) {
	cfg := s.cfg
	mwc, err := s.c.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, WebhookConfiguration, metav1.GetOptions{})
	if err != nil {
		s.fatalf("the webhook configuration: %v", err)
	}
	if mwc.Labels[InstanceLabel] != ReleaseName {
		s.errorf("MutatingWebhookConfiguration %s is not the release's (label %s=%q)", WebhookConfiguration, InstanceLabel, mwc.Labels[InstanceLabel])
	}
	namespace, err := s.m.Namespace()
	if err != nil {
		s.fatalf("%v", err)
	}
	if err := s.c.apply(ctx, "the applications' namespace, labelled for injection", namespace); err != nil {
		s.fatalf("%v", err)
	}
	podYAML, err := s.m.Probe(InjectCheck())
	if err != nil {
		s.fatalf("%v", err)
	}
	var want corev1.Pod
	if err := yaml.Unmarshal([]byte(podYAML), &want); err != nil {
		s.fatalf("decoding the check pod: %v", err)
	}
	var mutated *corev1.Pod
	at, err := Poll(ctx, "the webhook injecting a dry-run pod", webhookServing, apiPoll, func(ctx context.Context) (bool, string) {
		if err := s.webhookHasCABundle(ctx); err != nil {
			return false, err.Error()
		}
		p, err := s.c.kube.CoreV1().Pods(cfg.AppNamespace).Create(ctx, want.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, fmt.Sprintf("creating (dry run): %v", err)
		}
		if !Injected(p) {
			return false, "the pod came back without the sidecar"
		}
		mutated = p
		return true, ""
	})
	if err != nil {
		s.fatalf("%v", err)
	}
	s.measure("helm install returned → webhook injecting", at.Sub(installed), 0)
	if problems := InjectionProblems(mutated); len(problems) > 0 {
		s.errorf("the webhook's sidecar: %s", strings.Join(problems, "; "))
	}
	s.note("the webhook (Service %s/%s, %d ready endpoint(s)) injected %s: init containers %v, annotation %s=%s",
		cfg.ReleaseNamespace, WebhookService, s.readyEndpoints(ctx, WebhookService), want.Name, containerNames(mutated.Spec.InitContainers),
		v1alpha1.InjectedAnnotation, mutated.Annotations[v1alpha1.InjectedAnnotation])
}

func (s *stepRun) webhookHasCABundle(ctx context.Context) error {
	mwc, err := s.c.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, WebhookConfiguration, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, h := range mwc.Webhooks {
		if len(h.ClientConfig.CABundle) == 0 {
			return fmt.Errorf("webhook %s has no caBundle yet (the operator writes it)", h.Name)
		}
	}
	return nil
}

func (s *stepRun) readyEndpoints(ctx context.Context, service string) int {
	list, err := s.c.kube.DiscoveryV1().EndpointSlices(s.cfg.ReleaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		return -1
	}
	n := 0
	for _, sl := range list.Items {
		for _, e := range sl.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				n++
			}
		}
	}
	return n
}

func containerNames(cs []corev1.Container) []string {
	names := make([]string, 0, len(cs))
	for _, c := range cs {
		names = append(names, c.Name)
	}
	return names
}
