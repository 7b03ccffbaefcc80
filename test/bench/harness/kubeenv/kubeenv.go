// Package kubeenv is the real apiserver of the operator's benchmarks
// (test/bench/propagation, test/bench/operator) and of `make demo`
// (demo): envtest's kube-apiserver and etcd with the CRDs (or none,
// for the Helm chart to install), an admin client, and what a kubelet
// would do for a sidecar pod (a ServiceAccount, a scheduled Pod, a
// projected token, the mounted CA bundle). It is for benchmarks and the
// demo only.
package kubeenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
)

// Cluster is a running apiserver with an admin client.
type Cluster struct {
	env    *envtest.Environment
	Client ctrlclient.WithWatch
	// Kubeconfig is an admin kubeconfig file, Dir a scratch directory that
	// Stop removes.
	Kubeconfig, Dir string
	name            string
}

// Start starts the apiserver with the CRDs of crdDir (none when empty:
// the Helm chart installs them) and creates namespaces. name names the
// bench in messages.
func Start(name, crdDir string, namespaces ...string) (*Cluster, error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, fmt.Errorf("KUBEBUILDER_ASSETS is not set: run `make %s`, which builds etcd, kube-apiserver and kubectl (hack/setup-envtest.sh) and points it at bin/k8s", name)
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	env := &envtest.Environment{}
	if crdDir != "" {
		env.CRDDirectoryPaths, env.ErrorIfCRDPathMissing = []string{crdDir}, true
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	c := &Cluster{env: env, name: name}
	fail := func(err error) (*Cluster, error) {
		c.Stop()
		return nil, err
	}
	if c.Dir, err = os.MkdirTemp("", "weighstation-"+name+"-"); err != nil {
		return fail(err)
	}
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, env.KubeConfig, 0o600); err != nil {
		return fail(err)
	}
	cfg.QPS = -1 // the bench's own calls are not the subject: no client-side limit
	if c.Client, err = ctrlclient.NewWithWatch(cfg, ctrlclient.Options{Scheme: scheme}); err != nil {
		return fail(fmt.Errorf("creating the client: %w", err))
	}
	for _, ns := range namespaces {
		if err := c.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return fail(fmt.Errorf("creating namespace %s: %w", ns, err))
		}
	}
	return c, nil
}

// Stop stops the apiserver and removes the scratch directory.
func (c *Cluster) Stop() {
	if err := c.env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: stopping envtest: %v\n", c.name, err)
	}
	if c.Dir != "" {
		_ = os.RemoveAll(c.Dir)
	}
}

// CreateServiceAccount creates a pod's ServiceAccount: envtest has no
// ServiceAccount controller.
func (c *Cluster) CreateServiceAccount(ctx context.Context, namespace, name string) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := c.Client.Create(ctx, sa); err != nil {
		return fmt.Errorf("creating service account %s/%s: %w", namespace, name, err)
	}
	return nil
}

// PodToken requests a token bound to pod for audience, as the kubelet's
// projected volume would, and writes it to a file under dir.
func (c *Cluster) PodToken(ctx context.Context, pod *corev1.Pod, audience string, lifetime time.Duration, dir string) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Spec.ServiceAccountName}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         []string{audience},
		ExpirationSeconds: ptr.To(int64(lifetime / time.Second)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if err := c.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		return "", fmt.Errorf("requesting a token for %s: %w", pod.Name, err)
	}
	file := filepath.Join(dir, pod.Name)
	if err := os.WriteFile(file, []byte(tr.Status.Token), 0o600); err != nil {
		return "", err
	}
	return file, nil
}

// WaitBundle waits for the operator to publish its CA bundle into
// namespace, and writes it to a file, as a pod mounts the ConfigMap's key.
// alive reports the operator gone.
func (c *Cluster) WaitBundle(ctx context.Context, namespace string, timeout time.Duration, alive func() error) (string, error) {
	if err := c.WaitConfigMap(ctx, namespace, pki.DefaultBundleConfigMapName, c.Dir, timeout, alive); err != nil {
		return "", err
	}
	return filepath.Join(c.Dir, pki.BundleKey), nil
}

// WaitConfigMap waits for the ConfigMap namespace/name to exist with data,
// and writes each of its keys into a file of dir, as the kubelet mounts a
// ConfigMap. alive reports the process that writes it gone.
func (c *Cluster) WaitConfigMap(ctx context.Context, namespace, name, dir string, timeout time.Duration, alive func() error) error {
	deadline := time.Now().Add(timeout)
	key := types.NamespacedName{Namespace: namespace, Name: name}
	for {
		var cm corev1.ConfigMap
		err := c.Client.Get(ctx, key, &cm)
		if err == nil && len(cm.Data) > 0 {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			for k, v := range cm.Data {
				if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o600); err != nil {
					return err
				}
			}
			return nil
		}
		if err := alive(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("ConfigMap %s did not appear within %s", key, timeout), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
