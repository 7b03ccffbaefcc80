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
	"github.com/weighstation/weighstation/hack/benchpropagation/swarmproto"
)

// The objects of the bench. One Subscription selects every pod; the Topic
// gives the pods a shared resource besides it, as a real namespace has.
const (
	operatorNamespace = "weighstation-system"
	podNamespace      = "bench"
	subscriptionName  = "orders"
	topicName         = "orders"
	podLabel          = "app"
	podLabelValue     = "bench"
	xdsService        = "weighstation-xds"
	audience          = "weighstation.io/xds"
	tokenSeconds      = 3600
)

// cluster is a real kube-apiserver and etcd (envtest) and an admin client.
type cluster struct {
	env        *envtest.Environment
	client     ctrlclient.Client
	kubeconfig string
	dir        string
}

func startCluster(crdDir string) (*cluster, error) {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, errors.New("KUBEBUILDER_ASSETS is not set: run `make bench-propagation`, which builds etcd, kube-apiserver and kubectl (hack/setup-envtest.sh) and points it at bin/k8s")
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
	if c.dir, err = os.MkdirTemp("", "weighstation-bench-propagation-"); err != nil {
		return fail(err)
	}
	c.kubeconfig = filepath.Join(c.dir, "kubeconfig")
	if err := os.WriteFile(c.kubeconfig, env.KubeConfig, 0o600); err != nil {
		return fail(err)
	}
	cfg.QPS = -1 // the bench's own calls are not the subject; no client-side limit
	if c.client, err = ctrlclient.New(cfg, ctrlclient.Options{Scheme: scheme}); err != nil {
		return fail(fmt.Errorf("creating the client: %w", err))
	}
	return c, nil
}

func (c *cluster) stop() {
	if err := c.env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-propagation: stopping envtest:", err)
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}

// populate creates the namespaces, the Topic, the Subscription and n
// ServiceAccounts and Pods (scheduled by hand: envtest has no scheduler,
// and no ServiceAccount controller), and requests each pod a token bound
// to it for the xDS audience, as the kubelet's projected volume would.
func (c *cluster) populate(ctx context.Context, n int) ([]swarmproto.Pod, error) {
	for _, ns := range []string{operatorNamespace, podNamespace} {
		if err := c.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	objects := []ctrlclient.Object{
		&v1alpha1.Topic{
			ObjectMeta: metav1.ObjectMeta{Namespace: podNamespace, Name: topicName},
			Spec:       v1alpha1.TopicSpec{Subject: "orders.>", Limits: v1alpha1.TopicLimits{MaxMessageBytes: 4096}},
		},
		&v1alpha1.Subscription{
			ObjectMeta: metav1.ObjectMeta{Namespace: podNamespace, Name: subscriptionName},
			Spec: v1alpha1.SubscriptionSpec{
				Subject:    "orders.*",
				Essential:  ptr.To(false),
				Selector:   metav1.LabelSelector{MatchLabels: map[string]string{podLabel: podLabelValue}},
				KillSwitch: &v1alpha1.KillSwitch{Engaged: false},
			},
		},
	}
	for _, obj := range objects {
		if err := c.client.Create(ctx, obj); err != nil {
			return nil, fmt.Errorf("creating %s: %w", obj.GetName(), err)
		}
	}
	tokens := filepath.Join(c.dir, "tokens")
	if err := os.MkdirAll(tokens, 0o700); err != nil {
		return nil, err
	}
	pods := make([]swarmproto.Pod, n)
	errs := make([]error, n)
	// A few workers: the apiserver shares the two cores with everything
	// else, and creating pods is setup, not what is measured.
	const workers = 8
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				pods[i], errs[i] = c.createPod(ctx, i, tokens)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return pods, nil
}

func (c *cluster) createPod(ctx context.Context, i int, tokens string) (swarmproto.Pod, error) {
	name := fmt.Sprintf("sidecar-%04d", i)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: podNamespace, Name: name}}
	if err := c.client.Create(ctx, sa); err != nil {
		return swarmproto.Pod{}, fmt.Errorf("creating service account %s: %w", name, err)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: podNamespace, Name: name, Labels: map[string]string{
			v1alpha1.InjectLabel: v1alpha1.InjectEnabled,
			podLabel:             podLabelValue,
		}},
		Spec: corev1.PodSpec{
			NodeName:           "node-1",
			ServiceAccountName: name,
			Containers:         []corev1.Container{{Name: "app", Image: "app"}},
		},
	}
	if err := c.client.Create(ctx, p); err != nil {
		return swarmproto.Pod{}, fmt.Errorf("creating pod %s: %w", name, err)
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         []string{audience},
		ExpirationSeconds: ptr.To[int64](tokenSeconds),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: name, UID: p.UID},
	}}
	if err := c.client.SubResource("token").Create(ctx, sa, tr); err != nil {
		return swarmproto.Pod{}, fmt.Errorf("requesting a token for %s: %w", name, err)
	}
	file := filepath.Join(tokens, name)
	if err := os.WriteFile(file, []byte(tr.Status.Token), 0o600); err != nil {
		return swarmproto.Pod{}, err
	}
	return swarmproto.Pod{Name: name, UID: string(p.UID), TokenFile: file}, nil
}

// waitBundle waits for the operator to publish its CA bundle into the
// pods' namespace, and writes it where the swarm's sidecars read it (a
// pod mounts the ConfigMap's key as a file).
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

// setKillSwitch flips the Subscription's kill switch with a merge PATCH,
// as `kubectl patch --type=merge` does.
func (c *cluster) setKillSwitch(ctx context.Context, engaged bool) error {
	sub := &v1alpha1.Subscription{ObjectMeta: metav1.ObjectMeta{Namespace: podNamespace, Name: subscriptionName}}
	body := fmt.Appendf(nil, `{"spec":{"killSwitch":{"engaged":%t}}}`, engaged)
	return c.client.Patch(ctx, sub, ctrlclient.RawPatch(types.MergePatchType, body))
}
