//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// Bounds of the uninstall story.
const (
	helmUninstallTimeout = "3m"
	webhookGone          = 30 * time.Second
	podAdmittedReady     = 2 * time.Minute
)

// stepUninstall uninstalls the release: the webhook configuration is gone
// when helm returns (so that the apiserver no longer calls a webhook whose
// operator is gone: with failurePolicy Fail that would block every opted
// in pod), and a pod labelled for injection created afterwards is
// admitted, without the sidecar, and becomes Ready.
func stepUninstall(s *stepRun) {
	ctx, cfg := s.ctx, s.cfg
	start := time.Now()
	_, err := s.c.helm(ctx, helmCommandLimit, "uninstall", ReleaseName, "-n", cfg.ReleaseNamespace, "--wait", "--timeout", helmUninstallTimeout)
	if err != nil {
		s.fatalf("helm uninstall: %v", err)
	}
	s.uninstalled = true
	uninstalled := time.Now()
	s.measure("helm uninstall --wait", uninstalled.Sub(start), 0)
	checks := 0
	gone, err := Poll(ctx, "no MutatingWebhookConfiguration of the release", webhookGone, fastPoll, func(ctx context.Context) (bool, string) {
		checks++
		_, err := s.c.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, WebhookConfiguration, metav1.GetOptions{})
		if err == nil {
			return false, WebhookConfiguration + " is still there"
		}
		if !apierrors.IsNotFound(err) {
			return false, err.Error()
		}
		list, err := s.c.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{LabelSelector: labels.Set{InstanceLabel: ReleaseName}.String()})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("%d configuration(s) labelled %s=%s", len(list.Items), InstanceLabel, ReleaseName)
	})
	if err != nil {
		s.fatalf("%v", err)
	}
	if checks > 1 {
		s.errorf("the webhook configuration was still there when helm uninstall returned; gone %s later", gone.Sub(uninstalled).Round(time.Millisecond))
	}

	podYAML, err := s.m.Probe(InjectCheck())
	if err != nil {
		s.fatalf("%v", err)
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal([]byte(podYAML), &pod); err != nil {
		s.fatalf("decoding the check pod: %v", err)
	}
	s.suspects = []string{PodInjectCheck}
	say("$ kubectl create -f - # pod %s, labelled for injection", pod.Name)
	created, err := s.c.kube.CoreV1().Pods(cfg.AppNamespace).Create(ctx, &pod, metav1.CreateOptions{})
	if err != nil {
		s.fatalf("a pod labelled for injection was refused after the uninstall: %v", err)
	}
	if Injected(created) {
		s.errorf("pod %s was injected after the uninstall", created.Name)
	}
	ready, err := s.c.waitPodsReady(ctx, cfg.AppNamespace, []string{PodInjectCheck}, podAdmittedReady)
	if err != nil {
		s.fatalf("%v", err)
	}
	s.measure("create after uninstall → Ready, without the sidecar", ready.Sub(gone), 0)
}
