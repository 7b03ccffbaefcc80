package leaderlabel_test

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
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
	envtestsuite.Main(m, scheme, func(env *envtestsuite.Env) {
		k8sClient, kubeconfig = env.Client, env.Kubeconfig
	})
}
