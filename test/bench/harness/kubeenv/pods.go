package kubeenv

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/pki"
)

// What the operator benchmarks run the operator with: its namespace, the
// Service its serving certificate names (the operator's -xds-service
// default), and the audience of the sidecars' tokens (its -xds-audience
// default).
const (
	OperatorNamespace = "weighstation-system"
	XDSService        = "weighstation-xds"
	XDSAudience       = "weighstation.io/xds"
)

// XDSServerName is the name the operator's serving certificate carries,
// which a sidecar checks: the Service's cluster-local DNS name.
func XDSServerName() string { return pki.ServiceDNSNames(XDSService, OperatorNamespace)[2] }

// SidecarPod is a pod with the weighstation sidecar, labeled with labels
// (and app: bench), scheduled by hand (envtest has no scheduler), with a
// ServiceAccount of its own name (CreateServiceAccount).
func SidecarPod(namespace, name string, labels map[string]string) *corev1.Pod {
	l := map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled, "app": "bench"}
	maps.Copy(l, labels)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: l},
		Spec: corev1.PodSpec{
			NodeName:           "node-1",
			ServiceAccountName: name,
			Containers:         []corev1.Container{{Name: "app", Image: "app"}},
		},
	}
}

// CreateAll calls create for every item with at most inflight calls at
// once, and returns when the last call returned.
func CreateAll[T any](ctx context.Context, items []T, inflight int, create func(context.Context, int, T) error) (time.Time, error) {
	next := make(chan int)
	errs := make([]error, len(items))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var last time.Time
	for range inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				errs[i] = create(ctx, i, items[i])
				mu.Lock()
				last = time.Now()
				mu.Unlock()
			}
		}()
	}
	for i := range items {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	return last, errors.Join(errs...)
}
