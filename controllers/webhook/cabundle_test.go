package webhook

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr/testr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/controllers/pki"
	"github.com/weighstation/weighstation/internal/envtestsuite"
)

// TestCABundleFollowsTheCA: when the CA bundle changes (a rotation), the
// signal alone brings the configuration's caBundle along.
func TestCABundleFollowsTheCA(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	bundles := make([][]byte, 2)
	for i := range bundles {
		a, err := pki.New(k8sClient, k8sClient, pki.Options{Namespace: envtestsuite.NewNamespace(t, k8sClient, "ca-"), DNSNames: []string{"x"}, Log: testr.New(t)})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		bundles[i] = a.Bundle()
	}
	// A configuration the apiserver never calls: it selects no object.
	cfg := webhookConfiguration(t, "cabundle-test", "https://127.0.0.1:1/none", "kube-system")
	for i := range cfg.Webhooks {
		cfg.Webhooks[i].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		cfg.Webhooks[i].ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"never": "matches"}}
	}
	if err := k8sClient.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // the name is fixed: the next run (-count) creates it again
		if err := k8sClient.Delete(context.Background(), cfg); err != nil {
			t.Errorf("deleting the webhook configuration: %v", err)
		}
	})
	var current atomic.Pointer[[]byte]
	current.Store(&bundles[0])
	changed := make(chan struct{}, 1)
	c := &CABundle{Reader: k8sClient, Writer: k8sClient, Name: cfg.Name, Bundle: func() []byte { return *current.Load() }, Changed: changed, Interval: eventuallyTimeout * 10, Log: testr.New(t)}
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	for i, b := range bundles {
		current.Store(&b)
		changed <- struct{}{}
		envtestsuite.Eventually(t, eventuallyTimeout, poll, "the caBundle following bundle "+string(rune('A'+i)), func() error {
			var got admissionregistrationv1.MutatingWebhookConfiguration
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(cfg), &got); err != nil {
				return err
			}
			if !bytes.Equal(got.Webhooks[0].ClientConfig.CABundle, b) {
				return errors.New("the stored caBundle is another")
			}
			return nil
		})
	}
}
