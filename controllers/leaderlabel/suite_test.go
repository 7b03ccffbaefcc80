package leaderlabel_test

import (
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/internal/envtestsuite"
)

// One real apiserver (envtest) for the package: the labeler patches real
// Pods. No CRDs and no reconcilers are needed.
var (
	k8sClient  client.Client
	kubeconfig string
	scheme     = runtime.NewScheme()
)

// poll is how often tests re-check the Pod's labels.
const poll = 50 * time.Millisecond

func TestMain(m *testing.M) {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	os.Exit(envtestsuite.Run(m, scheme, nil, func(env *envtestsuite.Env) int {
		k8sClient, kubeconfig = env.Client, env.Kubeconfig
		return m.Run()
	}))
}

func newNamespace(t *testing.T) string {
	t.Helper()
	return envtestsuite.NewNamespace(t, k8sClient, "test-")
}
