package pki_test

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/controllers/pki"
	"github.com/weighstation/weighstation/internal/envtestsuite"
)

// One real apiserver and etcd for the package (envtest). The client reads
// straight from the API server, as the manager's APIReader does.
var (
	cfg       *rest.Config
	k8sClient client.Client
	scheme    = runtime.NewScheme()
)

const (
	// poll is how often tests re-check something that happens in the
	// background.
	poll = 20 * time.Millisecond
	// eventuallyTimeout bounds every wait.
	eventuallyTimeout = 20 * time.Second
)

func TestMain(m *testing.M) {
	envtestsuite.Main(m, scheme, func(env *envtestsuite.Env) {
		cfg, k8sClient = env.Config, env.Client
	})
}

// newNamespace creates a namespace of its own for one test, so tests never
// see each other's Secrets and ConfigMaps.
func newNamespace(t *testing.T) string {
	t.Helper()
	return envtestsuite.NewNamespace(t, k8sClient, "test-")
}

// eventually polls check until it returns nil, failing the test with its
// last error after eventuallyTimeout.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	envtestsuite.Eventually(t, eventuallyTimeout, poll, what, check)
}

// clock is a settable clock for the Authority's decisions. It starts at
// the real time, so that certificates are valid for TLS stacks that read
// the real clock, until a test moves it.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Now()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

const day = 24 * time.Hour

// xdsService is the name the tests give the operator's xDS Service.
const xdsService = "weighstation-xds"

// testOptions is a 90-day CA rotated at 60 days, and a 9-day leaf renewed at
// 6 days. A new CA starts to sign an hour after it joins the bundle.
func testOptions(t *testing.T, ns string, c *clock) pki.Options {
	return pki.Options{
		Namespace:    ns,
		DNSNames:     pki.ServiceDNSNames(xdsService, ns),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		CALifetime:   90 * day,
		CARotateAt:   2.0 / 3,
		LeafLifetime: 9 * day,
		LeafRenewAt:  2.0 / 3,
		SigningDelay: time.Hour,
		Now:          c.Now,
		Log:          testr.New(t),
	}
}

// newAuthority returns an Authority that reads and writes through rw
// (k8sClient when nil).
func newAuthority(t *testing.T, opts pki.Options, rw client.Client) *pki.Authority {
	t.Helper()
	if rw == nil {
		rw = k8sClient
	}
	a, err := pki.New(rw, rw, opts)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
