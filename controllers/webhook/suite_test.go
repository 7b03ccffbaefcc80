package webhook

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
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	return envtestsuite.Run(m, scheme, nil, func(env *envtestsuite.Env) int {
		k8sClient = env.Client
		return m.Run()
	})
}
