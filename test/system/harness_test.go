package system_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/cmd/weighstation-sidecar/sidecarapp"
	"github.com/weighstation/weighstation/cmd/weighstation/operatorapp"
	"github.com/weighstation/weighstation/controllers/brokercreds"
	"github.com/weighstation/weighstation/controllers/injectionproof"
	"github.com/weighstation/weighstation/controllers/reports"
	"github.com/weighstation/weighstation/controllers/xds"
	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar"
	"github.com/weighstation/weighstation/sidecar/brokercred"
	"github.com/weighstation/weighstation/sidecar/report"
	"github.com/weighstation/weighstation/sidecar/upstream"
	"github.com/weighstation/weighstation/sidecar/xdsclient"
)

// operator is the operator's manager and xDS server in this process.
type operator struct {
	pub     *xds.Publisher
	reports *reports.Store
	cancel  context.CancelFunc
	done    chan error
}

// The report timings of these tests: sidecars report every second (the
// least they may), a pod is stale after two missed reports, and the
// window holds ten seconds, so that a test sees a burst in status and
// then sees it leave.
const (
	reportInterval = time.Second
	reportWindow   = 10 * time.Second
)

// operatorSettings are what a test may change of the operator it starts.
type operatorSettings struct {
	// reportWindow is the operator's -report-window (default
	// reportWindow).
	reportWindow time.Duration
	// brokerURL is the operator's -broker-url: where it pushes the
	// namespaces' accounts (empty: it issues no broker credentials).
	brokerURL string
	// credentialLifetime is -broker-credential-lifetime (0: default).
	credentialLifetime time.Duration
	// proofKey, when set, is the injection proof's key: the operator then
	// serves only pods with a proof.
	proofKey []byte
}

// withCredentialLifetime sets the operator's -broker-credential-lifetime.
func withCredentialLifetime(d time.Duration) func(*operatorSettings) {
	return func(s *operatorSettings) { s.credentialLifetime = d }
}

func (s operatorSettings) credentialLimits() brokercreds.Limits {
	l := brokercreds.DefaultLimits
	if s.credentialLifetime > 0 {
		l.Lifetime = s.credentialLifetime
	}
	return l
}

// withInjectionProof has the operator serve only the sidecars whose pods
// carry an injection proof made with key, as it does with its webhook.
func withInjectionProof(key []byte) func(*operatorSettings) {
	return func(s *operatorSettings) { s.proofKey = key }
}

// withBrokerURL sets the operator's -broker-url.
func withBrokerURL(url string) func(*operatorSettings) {
	return func(s *operatorSettings) { s.brokerURL = url }
}

// withReportWindow sets the operator's report window: a test that compares
// status with what it measured over a whole run needs a window that holds
// the run.
func withReportWindow(d time.Duration) func(*operatorSettings) {
	return func(s *operatorSettings) { s.reportWindow = d }
}

// startOperator runs the operator as the command assembles it
// (operatorapp.New), as its ServiceAccount with the generated RBAC alone,
// leader election, probes and metrics endpoints off, and xDS in plain text
// on xdsAddr.
func startOperator(t *testing.T, xdsAddr string, opts ...func(*operatorSettings)) *operator {
	t.Helper()
	settings := operatorSettings{reportWindow: reportWindow}
	for _, o := range opts {
		o(&settings)
	}
	appOpts := operatorapp.NewOptions()
	appOpts.MetricsAddr, appOpts.ProbeAddr, appOpts.LeaderElect = "0", "0", false
	appOpts.Namespace, appOpts.PodName = operatorNamespace, ""
	appOpts.XDSListen, appOpts.XDSAudience, appOpts.XDSWithoutTLS = xdsAddr, audience, true
	// Every sidecar of these tests reaches the operator from 127.0.0.1:
	// one peer, whose TokenReview budget would be the whole suite's.
	appOpts.ReviewLimits.PeerRate, appOpts.ReviewLimits.PeerBurst = appOpts.ReviewLimits.Rate, appOpts.ReviewLimits.Burst
	appOpts.BrokerURL, appOpts.CredentialLimits = settings.brokerURL, settings.credentialLimits()
	appOpts.ReportWindow, appOpts.ReportInterval, appOpts.ReportWriteInterval = settings.reportWindow, reportInterval, 100*time.Millisecond
	if settings.proofKey != nil {
		appOpts.InjectionProofKeys = injectionproof.StaticKey(settings.proofKey)
	}
	// A restarted operator is a new one in this process: its controllers
	// register again, and its metrics go to a registry of its own.
	appOpts.SkipControllerNameValidation, appOpts.MetricsRegistry = true, prometheus.NewRegistry()
	if err := appOpts.Validate(); err != nil {
		t.Fatal(err)
	}
	app, err := operatorapp.New(operatorConfig, appOpts, ctrl.Log.WithName("operator"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	op := &operator{pub: app.Publisher(), reports: app.Reports(), cancel: cancel, done: make(chan error, 1)}
	go func() { op.done <- app.Start(ctx) }()
	t.Cleanup(op.stop)
	return op
}

func (o *operator) stop() {
	if o.cancel == nil {
		return
	}
	o.cancel()
	o.cancel = nil
	select {
	case err := <-o.done:
		if err != nil {
			panic(fmt.Sprintf("operator: %v", err))
		}
	case <-time.After(30 * time.Second):
		panic("the operator did not stop within 30s")
	}
}

// pod is one application pod: its Pod object, its sidecar and xDS client.
type pod struct {
	name, uid string
	side      *sidecar.Server
	client    *xdsclient.Client
	reporter  *report.Reporter
	// stopReports stops the pod's reports alone, as a sidecar whose
	// reports no longer arrive.
	stopReports func()
	// refuse, when set, is asked before each configuration is applied and
	// refuses it with its error: a sidecar that cannot apply what it got.
	refuse atomic.Pointer[func(meshconfig.PodConfig) error]
	// issued is the sidecar's broker credential (podSettings.issued).
	issued *brokercred.Holder
}

// startPod creates a ServiceAccount and a scheduled Pod (there is no
// scheduler in envtest, so spec.nodeName is set), requests a token bound to
// the pod from the apiserver, and starts the pod's sidecar with it; opts
// change the sidecar's options (its flags) before it starts.
func startPod(t *testing.T, ns, name string, labels map[string]string, brokerURL, xdsAddr string, opts ...func(*sidecar.Options)) *pod {
	t.Helper()
	return startPodWith(t, podSettings{}, ns, name, labels, brokerURL, xdsAddr, opts...)
}

// podSettings are what startPodWith does beyond startPod.
type podSettings struct {
	// issued: the sidecar presents the broker credential the operator
	// issues it, renews it and moves its broker connection to each new
	// one (the sidecar command's default with -operator); else it
	// presents none (a broker without authentication).
	issued bool
}

// startPodWith is startPod with settings. The sidecar is assembled as the
// sidecar command assembles it (sidecarapp.New), with insecure transport
// to the operator (which serves these tests in plain text), no endpoints,
// and short backoffs.
func startPodWith(t *testing.T, settings podSettings, ns, name string, labels map[string]string, brokerURL, xdsAddr string, opts ...func(*sidecar.Options)) *pod {
	t.Helper()
	p, token := createSidecarPod(t, ns, name, labels)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	appOpts := sidecarapp.NewOptions()
	appOpts.Sidecar.Listen = "127.0.0.1:0"
	for _, o := range opts {
		o(&appOpts.Sidecar)
	}
	// The broker may not be there yet: the sidecar serves and holds
	// publishes until it is, as in a pod.
	appOpts.BrokerURL, appOpts.MetricsListen, appOpts.HealthListen = brokerURL, "", ""
	if !settings.issued {
		appOpts.BrokerCredentials = &upstream.Credentials{}
	}
	appOpts.XDS.Address, appOpts.XDS.Credentials = xdsAddr, insecure.NewCredentials()
	appOpts.XDS.Namespace, appOpts.XDS.Pod, appOpts.XDS.PodUID, appOpts.XDS.TokenFile = ns, name, string(p.UID), tokenFile
	appOpts.XDS.InitialBackoff, appOpts.XDS.MaxBackoff = 20*time.Millisecond, 500*time.Millisecond
	appOpts.ReportInterval = reportInterval
	discard := logr.Discard()
	appOpts.Logger = &discard
	pd := &pod{name: name, uid: string(p.UID)}
	appOpts.WrapApply = func(apply func(meshconfig.PodConfig) error) func(meshconfig.PodConfig) error {
		return func(cfg meshconfig.PodConfig) error {
			if refuse := pd.refuse.Load(); refuse != nil {
				if err := (*refuse)(cfg); err != nil {
					return err
				}
			}
			return apply(cfg)
		}
	}
	side, err := sidecarapp.New(background(), *appOpts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(side.Close)
	pd.side, pd.client, pd.reporter, pd.issued = side.Server, side.XDS, side.Reporter, side.Credential
	pd.stopReports = side.StopReports
	return pd
}

// app connects a stock nats.go client to the pod's sidecar.
func (p *pod) app(t *testing.T, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return natstest.Connect(t, "nats://"+p.side.Addr().String(), append([]nats.Option{nats.NoReconnect()}, opts...)...)
}

// waitConfigured waits until the pod's sidecar holds what the operator
// computed for it and that satisfies check.
func waitConfigured(t *testing.T, op *operator, ns string, p *pod, what string, check func(meshconfig.PodConfig) error) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s: %s", p.name, what), func() error {
		want, ok := op.pub.Get(types.NamespacedName{Namespace: ns, Name: p.name})
		if !ok {
			return fmt.Errorf("the operator has no configuration for %s", p.name)
		}
		if err := check(want); err != nil {
			return fmt.Errorf("the operator's configuration: %w", err)
		}
		if got := p.client.Version(); got != want.Version {
			return fmt.Errorf("the sidecar holds %q, the operator computed %q", got, want.Version)
		}
		return nil
	})
}

// kubectl runs the real kubectl against the test apiserver.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// clientObject is what k8sClient.Create takes.
type clientObject = ctrlclient.Object
