package webhook

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/internal/envtestsuite"
)

// One real apiserver and etcd for the package (envtest): the apiserver
// calls the webhook over TLS, as a cluster's does.
var (
	k8sClient client.Client
	scheme    = runtime.NewScheme()
)

const (
	poll              = 50 * time.Millisecond
	eventuallyTimeout = 30 * time.Second
)

func TestMain(m *testing.M) {
	envtestsuite.Main(m, scheme, func(env *envtestsuite.Env) {
		k8sClient = env.Client
	})
}
