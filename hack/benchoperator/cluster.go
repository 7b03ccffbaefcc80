package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/hack/benchharness/kubeenv"
	"github.com/weighstation/weighstation/hack/benchoperator/opproto"
)

const (
	operatorNamespace = "weighstation-system"
	podNamespace      = "bench"
	xdsService        = "weighstation-xds"
	audience          = "weighstation.io/xds"
	tokenLifetime     = 3 * time.Hour
	groupLabel        = "group"
)

// cluster is a real kube-apiserver and etcd (envtest) and an admin client.
type cluster struct {
	*kubeenv.Cluster
	tokens string
}

func startCluster(crdDir string) (*cluster, error) {
	kc, err := kubeenv.Start("bench-operator", crdDir, operatorNamespace, podNamespace)
	if err != nil {
		return nil, err
	}
	c := &cluster{Cluster: kc, tokens: filepath.Join(kc.Dir, "tokens")}
	if err := os.MkdirAll(c.tokens, 0o700); err != nil {
		kc.Stop()
		return nil, err
	}
	return c, nil
}

// newPod is a sidecar pod of group g, scheduled by hand (envtest has no
// scheduler), with its own ServiceAccount.
func newPod(name string, group int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: podNamespace, Name: name, Labels: map[string]string{
			v1alpha1.InjectLabel: v1alpha1.InjectEnabled,
			"app":                "bench",
			groupLabel:           groupName(group),
		}},
		Spec: corev1.PodSpec{
			NodeName:           "node-1",
			ServiceAccountName: name,
			Containers:         []corev1.Container{{Name: "app", Image: "app"}},
		},
	}
}

// token requests a token bound to the pod for the xDS audience, as the
// kubelet's projected volume would.
func (c *cluster) token(ctx context.Context, p *corev1.Pod, index int) (opproto.Pod, error) {
	file, err := c.PodToken(ctx, p, audience, tokenLifetime, c.tokens)
	if err != nil {
		return opproto.Pod{}, err
	}
	return opproto.Pod{Index: index, Name: p.Name, UID: string(p.UID), TokenFile: file}, nil
}

// createAll creates objects with at most inflight calls at once and
// returns when the last create returned.
func createAll[T any](ctx context.Context, items []T, inflight int, create func(context.Context, int, T) error) (time.Time, error) {
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
