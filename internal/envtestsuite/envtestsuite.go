// Package envtestsuite starts, once per test package, the real
// kube-apiserver and etcd that the operator's suites run against (envtest;
// `make test` builds them and sets KUBEBUILDER_ASSETS), and holds the
// helpers every such suite shares. It is for tests only.
package envtestsuite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weighstation/weighstation/internal/poll"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Env is a running apiserver.
type Env struct {
	Config *rest.Config
	// Client talks to the apiserver directly (no cache).
	Client client.Client
	// Kubeconfig is a file for the real kubectl.
	Kubeconfig string
}

// Run starts the apiserver with the CRDs in crdDirs (none for nil),
// installs a logger (errors only, unless WEIGHSTATION_TEST_LOG is set),
// calls run with it and stops it. It returns the exit code for TestMain.
func Run(m *testing.M, scheme *runtime.Scheme, crdDirs []string, run func(*Env) int) int {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run `make test`, which builds etcd, kube-apiserver and kubectl (hack/setup-envtest.sh) and points it at bin/k8s")
		return 1
	}
	level := zapcore.ErrorLevel
	if os.Getenv("WEIGHSTATION_TEST_LOG") != "" {
		level = zapcore.DebugLevel
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(level)))
	env := &envtest.Environment{CRDDirectoryPaths: crdDirs, ErrorIfCRDPathMissing: len(crdDirs) > 0}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting envtest: %v\n", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
		}
	}()
	dir, err := os.MkdirTemp("", "weighstation-kubeconfig")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "creating client: %v\n", err)
		return 1
	}
	return run(&Env{Config: cfg, Client: c, Kubeconfig: kubeconfig})
}

// NewNamespace creates a namespace of its own for one test, so tests never
// see each other's objects (envtest never finishes deleting one, so none
// is deleted).
func NewNamespace(t *testing.T, c client.Client, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

// Eventually polls check every interval until it returns nil, and fails the
// test with its last error after timeout.
func Eventually(t *testing.T, timeout, interval time.Duration, what string, check func() error) {
	t.Helper()
	if err := poll.Until(timeout, interval, check); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
