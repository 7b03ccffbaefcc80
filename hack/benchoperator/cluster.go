package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/pki"
	"github.com/weighstation/weighstation/hack/benchoperator/opproto"
)

const (
	operatorNamespace = "weighstation-system"
	podNamespace      = "bench"
	xdsService        = "weighstation-xds"
	audience          = "weighstation.io/xds"
	tokenSeconds      = 3 * 3600
	groupLabel        = "group"
)

// cluster is a real kube-apiserver and etcd (envtest) and an admin client.
type cluster struct {
	env        *envtest.Environment
	client     ctrlclient.WithWatch
	kubeconfig string
	dir        string
	tokens     string
}

func startCluster(crdDir string) (*cluster, error) {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, errors.New("KUBEBUILDER_ASSETS is not set: run `make bench-operator`, which builds etcd, kube-apiserver and kubectl (hack/setup-envtest.sh) and points it at bin/k8s")
	}
	env := &envtest.Environment{CRDDirectoryPaths: []string{crdDir}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	c := &cluster{env: env}
	fail := func(err error) (*cluster, error) {
		c.stop()
		return nil, err
	}
	if c.dir, err = os.MkdirTemp("", "weighstation-bench-operator-"); err != nil {
		return fail(err)
	}
	c.kubeconfig = filepath.Join(c.dir, "kubeconfig")
	if err := os.WriteFile(c.kubeconfig, env.KubeConfig, 0o600); err != nil {
		return fail(err)
	}
	c.tokens = filepath.Join(c.dir, "tokens")
	if err := os.MkdirAll(c.tokens, 0o700); err != nil {
		return fail(err)
	}
	cfg.QPS = -1 // the bench's own calls are not the subject
	if c.client, err = ctrlclient.NewWithWatch(cfg, ctrlclient.Options{Scheme: scheme}); err != nil {
		return fail(fmt.Errorf("creating the client: %w", err))
	}
	for _, ns := range []string{operatorNamespace, podNamespace} {
		if err := c.client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return fail(fmt.Errorf("creating namespace %s: %w", ns, err))
		}
	}
	return c, nil
}

func (c *cluster) stop() {
	if err := c.env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-operator: stopping envtest:", err)
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
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

func (c *cluster) createServiceAccount(ctx context.Context, name string) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: podNamespace, Name: name}}
	if err := c.client.Create(ctx, sa); err != nil {
		return fmt.Errorf("creating service account %s: %w", name, err)
	}
	return nil
}

// token requests a token bound to the pod for the xDS audience, as the
// kubelet's projected volume would, and writes it to a file.
func (c *cluster) token(ctx context.Context, p *corev1.Pod, index int) (opproto.Pod, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: podNamespace, Name: p.Spec.ServiceAccountName}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         []string{audience},
		ExpirationSeconds: ptr.To[int64](tokenSeconds),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID},
	}}
	if err := c.client.SubResource("token").Create(ctx, sa, tr); err != nil {
		return opproto.Pod{}, fmt.Errorf("requesting a token for %s: %w", p.Name, err)
	}
	file := filepath.Join(c.tokens, p.Name)
	if err := os.WriteFile(file, []byte(tr.Status.Token), 0o600); err != nil {
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

// waitBundle waits for the operator to publish its CA bundle into the
// pods' namespace, and writes it where the simulated sidecars read it.
func (c *cluster) waitBundle(ctx context.Context, timeout time.Duration, alive func() error) (string, error) {
	deadline := time.Now().Add(timeout)
	key := types.NamespacedName{Namespace: podNamespace, Name: pki.DefaultBundleConfigMapName}
	for {
		var cm corev1.ConfigMap
		err := c.client.Get(ctx, key, &cm)
		if err == nil && cm.Data[pki.BundleKey] != "" {
			file := filepath.Join(c.dir, pki.BundleKey)
			return file, os.WriteFile(file, []byte(cm.Data[pki.BundleKey]), 0o600)
		}
		if err := alive(); err != nil {
			return "", err
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("the operator did not publish the CA bundle %s within %s (last: %v)", key, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
