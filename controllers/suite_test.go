package controllers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers"
	"github.com/weighstation/weighstation/controllers/desired"
	"github.com/weighstation/weighstation/controllers/xds"
	"github.com/weighstation/weighstation/internal/envtestsuite"
	"github.com/weighstation/weighstation/meshconfig"
)

// One real apiserver and etcd for the package (envtest), with the operator's
// reconcilers running against it.
var (
	k8sClient client.Client
	store     *desired.Store
	// podSets counts, per namespace, the pod parts the reconciler set.
	podSets    *countingSink
	kubeconfig string // a kubeconfig file for the real kubectl
	// operatorConfig acts as the operator's ServiceAccount, which has the
	// chart's RBAC (generated from config/rbac, rendered by helm template)
	// and nothing else.
	operatorConfig *rest.Config
	scheme         = runtime.NewScheme()
)

// operatorNamespace is the operator's own namespace, where its Roles are.
const operatorNamespace = "weighstation-system"

// poll is how often tests re-check what the reconcilers do.
const poll = 50 * time.Millisecond

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	return envtestsuite.Run(m, scheme, []string{filepath.Join("..", "config", "crd", "bases")}, func(env *envtestsuite.Env) int {
		k8sClient, kubeconfig = env.Client, env.Kubeconfig
		// The reconcilers run with the generated RBAC alone, as the
		// operator's ServiceAccount; the tests' own client is admin. The
		// RBAC is the chart's, as `helm install` creates and binds it, so
		// that this suite tests the chart's RBAC too (the system suite and
		// main's tests use config/rbac's).
		var err error
		operatorConfig, err = envtestsuite.AsOperatorFromChart(context.Background(), env.Config, operatorNamespace, "weighstation-operator")
		if err != nil {
			fmt.Fprintf(os.Stderr, "the operator's ServiceAccount: %v\n", err)
			return 1
		}
		mgr, err := ctrl.NewManager(operatorConfig, ctrl.Options{
			Scheme:  scheme,
			Metrics: metricsserver.Options{BindAddress: "0"},
			Cache:   controllers.CacheOptions(),
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "creating manager: %v\n", err)
			return 1
		}
		store = desired.NewStore()
		podSets = &countingSink{Sink: store, pods: map[string]int{}}
		if err := controllers.SetupReconcilers(mgr, controllers.Setup{
			Sink: podSets, Defaults: meshconfig.DefaultPolicy, Tracker: xds.NewTracker(),
			// Small, for the test of the cap; no other test comes near it.
			MaxTopicsPerNamespace: suiteMaxTopics,
			// Writes at once: no deferred write requeues an object, so a
			// test sees only the reconciles its own change caused.
			PropagationWriteInterval: time.Nanosecond,
			NotInjected:              []string{neverInjectedNamespace},
		}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- mgr.Start(ctx) }()
		code := m.Run()
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintf(os.Stderr, "manager: %v\n", err)
			return 1
		}
		return code
	})
}

// newNamespace creates a namespace of its own for one test, so tests never
// see each other's resources.
func newNamespace(t *testing.T) string {
	t.Helper()
	return envtestsuite.NewNamespace(t, k8sClient, "test-")
}

// suiteMaxTopics is the operator's -max-topics-per-namespace in these tests.
const suiteMaxTopics = 8

// countingSink counts, per namespace, the SetPod calls that reach Sink:
// how many pods a change made the reconciler configure.
type countingSink struct {
	desired.Sink
	mu   sync.Mutex
	pods map[string]int
}

func (c *countingSink) SetPod(part desired.PodPart, uid types.UID) bool {
	c.mu.Lock()
	c.pods[part.Namespace]++
	c.mu.Unlock()
	return c.Sink.SetPod(part, uid)
}

func (c *countingSink) podsSet(namespace string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pods[namespace]
}
