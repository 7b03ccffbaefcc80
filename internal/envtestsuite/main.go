package envtestsuite

import (
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// Main is the TestMain of a package whose tests need Kubernetes' own types
// only: it adds them to scheme, starts the apiserver with no CRDs (Run),
// hands it to setup, runs the package's tests and exits with their code.
func Main(m *testing.M, scheme *runtime.Scheme, setup func(*Env)) {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	os.Exit(Run(m, scheme, nil, func(env *Env) int {
		setup(env)
		return m.Run()
	}))
}
