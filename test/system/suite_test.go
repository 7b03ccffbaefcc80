// Package system_test runs weighstation as one system against a real
// kube-apiserver and etcd (envtest): the operator's manager and xDS server,
// sidecars that prove their pod identity with tokens the apiserver issued,
// the embedded NATS broker, and stock nats.go applications. A kubectl edit
// must change what the sidecars enforce.
package system_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/internal/envtestsuite"
)

var (
	// operatorConfig acts as the operator's ServiceAccount, which has the
	// generated RBAC (config/rbac) and nothing else: the operator runs
	// with it, the tests' own client (k8sClient) is admin.
	operatorConfig *rest.Config
	k8sClient      client.Client
	kubeconfig     string
	scheme         = runtime.NewScheme()
)

// operatorNamespace is the operator's own namespace, where its Roles are.
const operatorNamespace = "weighstation-system"

// audience is the audience of the sidecars' tokens in these tests.
const audience = "weighstation.io/xds"

func TestMain(m *testing.M) { os.Exit(runSuite(m)) }

func runSuite(m *testing.M) int {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	return envtestsuite.Run(m, scheme, []string{filepath.Join("..", "..", "config", "crd", "bases")}, func(env *envtestsuite.Env) int {
		k8sClient, kubeconfig = env.Client, env.Kubeconfig
		var err error
		operatorConfig, err = envtestsuite.AsOperator(context.Background(), env.Config, operatorNamespace, "weighstation-operator")
		if err != nil {
			fmt.Fprintf(os.Stderr, "the operator's ServiceAccount: %v\n", err)
			return 1
		}
		return m.Run()
	})
}

// eventually retries cond until it holds, for at most 20 s.
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	envtestsuite.Eventually(t, 20*time.Second, 20*time.Millisecond, what, cond)
}

func background() context.Context { return context.Background() }
