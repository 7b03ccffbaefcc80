package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/cmd/weighstation/operatorapp"
	"github.com/weighstation/weighstation/internal/envtestsuite"
	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/internal/proctest"
)

// TestOperatorCommand runs the real `weighstation operator` process against a
// real apiserver, as its ServiceAccount with the generated RBAC alone: it
// must elect itself leader, answer its probes, serve metrics, log in JSON,
// reconcile a Topic, and stop cleanly on SIGTERM.
func TestOperatorCommand(t *testing.T) {
	c, kubeconfig := startAPIServer(t, "default")
	ctx := context.Background()
	// The operator's own Pod, which the leader labels (-pod-name).
	if err := c.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "operator-0"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "operator", Image: "weighstation"}}},
	}); err != nil {
		t.Fatal(err)
	}
	bin := buildBinary(t)
	metricsAddr, probeAddr, xdsAddr, brokerAddr := natstest.FreeAddr(t), natstest.FreeAddr(t), natstest.FreeAddr(t), natstest.FreeAddr(t)
	logs := &proctest.LockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the operator's logs:\n%s", logs)
		}
	})
	cmd := exec.Command(bin, "operator",
		"-metrics-bind-address", metricsAddr, "-health-probe-bind-address", probeAddr,
		"-leader-elect", "-leader-election-namespace", "default", "-namespace", "default", "-xds-listen", xdsAddr, "-ca-bundle-resync", "200ms", "-pod-name", "operator-0",
		"-broker-url", "nats://"+brokerAddr)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	}()

	waitFor(t, "the probes answer", func() error {
		for _, path := range []string{"/healthz", "/readyz"} {
			if err := get200("http://"+probeAddr+path, ""); err != nil {
				return err
			}
		}
		return nil
	})

	topic := &v1alpha1.Topic{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "orders"}, Spec: v1alpha1.TopicSpec{Subject: "orders.>"}}
	if err := c.Create(ctx, topic); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the operator reconciles a Topic", func() error {
		var got v1alpha1.Topic
		if err := c.Get(ctx, client.ObjectKeyFromObject(topic), &got); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionValid) {
			return fmt.Errorf("not Valid: %+v", got.Status.Conditions)
		}
		return nil
	})
	var lease coordinationv1.Lease
	if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: operatorapp.LeaderElectionID}, &lease); err != nil || lease.Spec.HolderIdentity == nil {
		t.Fatalf("no leader election lease held: %v %+v", err, lease.Spec)
	}
	waitFor(t, "metrics are served", func() error {
		return get200("http://"+metricsAddr+"/metrics", `controller_runtime_reconcile_total{controller="topic"`)
	})
	// The leader labels its own Pod, which the xDS Service selects.
	waitFor(t, "the leader labels its pod", func() error {
		var pod corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "operator-0"}, &pod); err != nil {
			return err
		}
		if pod.Labels["weighstation.io/xds-leader"] != "true" {
			return fmt.Errorf("labels %v", pod.Labels)
		}
		return nil
	})
	// Ready means serving a certificate from the operator's own CA, kept in
	// a Secret of its namespace.
	var ca corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "weighstation-ca"}, &ca); err != nil {
		t.Fatalf("the operator's CA Secret: %v", err)
	}
	waitFor(t, "the xDS server serves TLS", func() error {
		conn, err := tls.Dial("tcp", xdsAddr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only the handshake is checked
		if err != nil {
			return err
		}
		return conn.Close()
	})
	configuresASidecarProcess(t, c, bin, xdsAddr, brokerAddr)
	waitFor(t, "the operator's xDS metrics count the sidecar's stream and its ACK", func() error {
		if err := get200("http://"+metricsAddr+"/metrics", "weighstation_operator_xds_streams 1"); err != nil {
			return err
		}
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if !regexp.MustCompile(`(?m)^weighstation_operator_xds_acks_total [1-9]`).Match(body) {
			return errors.New("no ACK counted")
		}
		return nil
	})
	if !strings.Contains(logs.String(), `"logger":"operator","msg":"starting"`) {
		t.Fatalf("no structured (JSON) start line in the logs:\n%s", logs.String())
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the operator exited with %v after SIGTERM:\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the operator did not stop within 30s of SIGTERM")
	}
	noRBACRefusals(t, logs.String())
}

// startAPIServer starts a real apiserver for one test and returns an admin
// client and a kubeconfig file that acts as the operator's ServiceAccount,
// with the generated RBAC alone (its Roles in operatorNamespace).
func startAPIServer(t *testing.T, operatorNamespace string) (client.Client, string) {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run `make test`")
	}
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	const account = "weighstation-operator"
	if _, err := envtestsuite.AsOperator(context.Background(), cfg, operatorNamespace, account); err != nil {
		t.Fatal(err)
	}
	asOperator, err := envtestsuite.ImpersonatingKubeconfig(env.KubeConfig, envtestsuite.ServiceAccountUser(operatorNamespace, account))
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, asOperator, 0o600); err != nil {
		t.Fatal(err)
	}
	return c, kubeconfig
}

// noRBACRefusals fails the test if an operator's logs show a request its
// RBAC refused: some refusals (an Event's, for one) are only logged.
func noRBACRefusals(t *testing.T, logs string) {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "forbidden") {
			t.Errorf("the operator was refused a request by its RBAC:\n%s", line)
		}
	}
}

// configuresASidecarProcess runs `weighstation sidecar -operator` as an
// injected pod's sidecar would: its pod's token from the apiserver, the CA
// bundle the operator published into the namespace, TLS to the xDS server,
// and the broker credential the operator issues it. The sidecar starts
// before its broker exists and is ready once the operator's configuration
// is in force; then `weighstation broker -trust-dir`, from the ConfigMap
// the operator wrote, admits it.
func configuresASidecarProcess(t *testing.T, c client.Client, bin, xdsAddr, brokerAddr string) {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "app"}}
	if err := c.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "app-0", Labels: map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled},
			Annotations: map[string]string{v1alpha1.InjectedAnnotation: "v0.1.0"}},
		Spec: corev1.PodSpec{NodeName: "node-1", ServiceAccountName: "app", Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	expiry := int64(3600)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{operatorapp.DefaultXDSAudience}, ExpirationSeconds: &expiry,
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tokenFile, caFile := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(tokenFile, []byte(tr.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the operator publishes its CA bundle into the pod's namespace", func() error {
		var cm corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "weighstation-ca-bundle"}, &cm); err != nil {
			return err
		}
		return os.WriteFile(caFile, []byte(cm.Data["ca.crt"]), 0o600)
	})
	healthAddr := natstest.FreeAddr(t)
	sidecarAddr := natstest.FreeAddr(t)
	sidecarLogs := process(t, "sidecar", "-listen", sidecarAddr, "-broker", "nats://"+brokerAddr,
		"-metrics-listen", "", "-health-listen", healthAddr,
		"-operator", xdsAddr, "-operator-server-name", "weighstation-xds.default.svc", "-ca-file", caFile,
		"-identity-token-file", tokenFile, "-pod-name", pod.Name, "-pod-namespace", "default", "-pod-uid", string(pod.UID))
	waitFor(t, "the sidecar is ready with the operator's configuration", func() error {
		return get200("http://"+healthAddr+"/readyz?verbose", "[+]config")
	})
	waitForLog(t, sidecarLogs, `"msg":"configuration applied"`, "the sidecar logs its configuration")
	trustDir := t.TempDir()
	waitFor(t, "the operator writes the broker trust ConfigMap", func() error {
		var cm corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "weighstation-broker-trust"}, &cm); err != nil {
			return err
		}
		for name, content := range cm.Data {
			if err := os.WriteFile(filepath.Join(trustDir, name), []byte(content), 0o600); err != nil {
				return err
			}
		}
		return nil
	})
	process(t, "broker", "-listen", brokerAddr, "-trust-dir", trustDir, "-account-dir", t.TempDir())
	waitFor(t, "the sidecar reaches the broker with the credential the operator issued it", func() error {
		return get200("http://"+healthAddr+"/readyz?verbose", "[+]broker ok")
	})
	// An application on the sidecar reaches the mesh through it; without
	// the sidecar's credential, the broker admits nobody.
	app, err := nats.Connect("nats://" + sidecarAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	if _, err := app.Request("nobody.answers", nil, 5*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("a request through the sidecar: %v, want the broker's no-responders answer", err)
	}
	if _, err := nats.Connect("nats://" + brokerAddr); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		t.Errorf("a client without a credential reached the broker: %v", err)
	}
}

// waitForLog waits for a process's log to contain want. A line written
// before the process answered a probe still reaches the test's buffer
// through a pipe, after it.
func waitForLog(t *testing.T, logs *proctest.LockedBuffer, want, what string) {
	t.Helper()
	waitFor(t, what, func() error {
		if !strings.Contains(logs.String(), want) {
			return fmt.Errorf("no %q in the log yet:\n%s", want, logs)
		}
		return nil
	})
}

func get200(url, mustContain string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if !strings.Contains(string(body), mustContain) {
		return fmt.Errorf("GET %s: no %q yet", url, mustContain)
	}
	return nil
}

func waitFor(t *testing.T, what string, check func() error) {
	t.Helper()
	waitForWithin(t, 60*time.Second, what, check)
}

// waitForWithin polls check every 100 ms until it returns nil, and fails
// the test with its last error after timeout.
func waitForWithin(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	envtestsuite.Eventually(t, timeout, 100*time.Millisecond, what, check)
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// buildBinary builds weighstation once for the package's tests.
func buildBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "weighstation-bin")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "weighstation")
		if out, err := exec.Command("go", "build", "-o", builtBin, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// process runs the binary with args until the test ends, then checks that
// it stops cleanly on SIGTERM.
func process(t *testing.T, args ...string) *proctest.LockedBuffer {
	t.Helper()
	logs := &proctest.LockedBuffer{}
	cmd := exec.Command(buildBinary(t), args...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("weighstation %s exited with %v after SIGTERM:\n%s", args[0], err, logs.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("weighstation %s did not stop within 30s of SIGTERM", args[0])
		}
	})
	return logs
}

// TestBrokerAndSidecarCommands runs `weighstation broker` and `weighstation
// sidecar` as processes: the sidecar starts first, ready and serving while
// the broker is away; a stock client talks through it, the sidecar's
// configuration file is enforced, and a client without the broker's token
// is refused by the broker.
func TestBrokerAndSidecarCommands(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	configFile := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(configFile, []byte(`
version: from-file
default: {subject: ">", maxMessageBytes: 1048576, mayPublish: true}
topics:
- {name: small, subject: "small.>", maxMessageBytes: 10, mayPublish: true}
subscriptions:
- {name: greetings, subject: greetings, essential: true, killSwitch: {engaged: false}, limits: {maxPendingMessages: 100, maxPendingBytes: 1048576, overflow: DropNewest}}
access: {mode: enforce}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	brokerAddr, sidecarAddr, metricsAddr, healthAddr := natstest.FreeAddr(t), natstest.FreeAddr(t), natstest.FreeAddr(t), natstest.FreeAddr(t)
	sidecarLogs := process(t, "sidecar", "-listen", sidecarAddr, "-broker", "nats://"+brokerAddr, "-token-file", tokenFile, "-config", configFile,
		"-metrics-listen", metricsAddr, "-health-listen", healthAddr)
	waitFor(t, "the sidecar is ready without its broker", func() error {
		for _, path := range []string{"/livez", "/readyz"} {
			if err := get200("http://"+healthAddr+path, "ok"); err != nil {
				return err
			}
		}
		return get200("http://"+healthAddr+"/readyz?verbose", "[+]config ok\n[-]broker disconnected (not required)\n")
	})
	waitForLog(t, sidecarLogs, "the broker is not reachable yet", "the sidecar logs that the broker is away")

	var app *nats.Conn
	errs := make(chan error, 10)
	waitFor(t, "the sidecar listens", func() error {
		var err error
		app, err = nats.Connect("nats://"+sidecarAddr, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
		return err
	})
	defer app.Close()
	got := make(chan string, 1)
	if _, err := app.Subscribe("greetings", func(m *nats.Msg) { got <- string(m.Data) }); err != nil {
		t.Fatal(err)
	}
	if err := app.Flush(); err != nil {
		t.Fatal(err)
	}
	// Published before the broker exists: the sidecar holds it.
	if err := app.Publish("greetings", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	process(t, "broker", "-listen", brokerAddr, "-token-file", tokenFile)
	waitFor(t, "the broker listens", func() error {
		nc, err := nats.Connect("nats://"+brokerAddr, nats.Token("s3cret"))
		if err == nil {
			nc.Close()
		}
		return err
	})
	if _, err := nats.Connect("nats://" + brokerAddr); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		t.Fatalf("a client without the token reached the broker: %v", err)
	}
	select {
	case m := <-got:
		if m != "hello" {
			t.Fatalf("got %q", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the message did not come back through sidecar and broker")
	}
	if err := app.Publish("small.x", []byte("eleven bytes")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "exceeds maxMessageBytes 10 of Topic small") {
			t.Fatalf("refusal %q", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the configuration file's limit was not enforced")
	}
	waitFor(t, "the sidecar's metrics count the refusal", func() error {
		return get200("http://"+metricsAddr+"/metrics", `weighstation_sidecar_publish_total{outcome="refused_size",topic="small"} 1`)
	})
	if err := get200("http://"+healthAddr+"/readyz?verbose", "[+]config ok\n[+]broker ok\n"); err != nil {
		t.Fatal(err)
	}
	waitForLog(t, sidecarLogs, `"logger":"sidecar.broker","msg":"connected to the broker"`, "the sidecar logs the broker's arrival")
}

// TestSidecarUsage: -h prints the logging flags apart from the sidecar's
// own.
func TestSidecarUsage(t *testing.T) {
	out, err := exec.Command(buildBinary(t), "sidecar", "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("sidecar -h: %v\n%s", err, out)
	}
	own, logging, found := strings.Cut(string(out), "\nLogging:\n")
	if !found || !strings.Contains(own, "-health-listen") || strings.Contains(own, "-zap-") || !strings.Contains(logging, "-zap-log-level") {
		t.Fatalf("sidecar -h does not group the logging flags:\n%s", out)
	}
}

// TestOperatorCommandLineErrors: without a cluster, a namespace,
// consistent leader election timings or a usable webhook certificate, the
// operator stops at once and names the flag to set.
func TestOperatorCommandLineErrors(t *testing.T) {
	emptyDir := t.TempDir()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no namespace", nil, "-namespace is required outside a cluster (default: $POD_NAMESPACE): the operator keeps its CA Secret there, and its leader election Lease unless -leader-election-namespace names another"},
		{"no cluster", []string{"-namespace", "weighstation-system"}, "outside a cluster, set -kubeconfig or $KUBECONFIG"},
		{"a missing kubeconfig", []string{"-namespace", "weighstation-system", "-kubeconfig", filepath.Join(t.TempDir(), "none")}, "finding the Kubernetes API"},
		{"a renew deadline past the lease", []string{"-namespace", "ns", "-leader-elect-lease-duration", "2s", "-leader-elect-renew-deadline", "2s"},
			"-leader-elect-renew-deadline (2s) must be shorter than -leader-elect-lease-duration (2s)"},
		{"a retry period too long to renew", []string{"-namespace", "ns", "-leader-elect-retry-period", "9s"},
			"-leader-elect-renew-deadline (10s) must be longer than 1.2 times -leader-elect-retry-period (9s)"},
		{"a zero duration", []string{"-namespace", "ns", "-leader-elect-retry-period", "0s"}, "must be positive"},
		{"a webhook without the sidecar's image", []string{"-namespace", "ns", "-webhook-configuration", "weighstation-sidecar-injector"},
			"-sidecar-image is required with -webhook-configuration"},
		{"a sidecar memory limit under its budget", []string{"-namespace", "ns", "-webhook-configuration", "w", "-sidecar-image", "img", "-sidecar-broker", "nats://b:4222",
			"-sidecar-memory-request", "64Mi", "-sidecar-memory-limit", "80Mi"}, "-sidecar-memory-limit: 80Mi is below 112Mi"},
		{"a sidecar that would run as the distroless nonroot user", []string{"-namespace", "ns", "-webhook-configuration", "w", "-sidecar-image", "img", "-sidecar-broker", "nats://b:4222",
			"-sidecar-run-as-user", "65532"}, "-sidecar-run-as-user must not be 65532"},
		{"no TokenReviews at all", []string{"-namespace", "ns", "-xds-tokenreview-rate", "0"}, "-xds-tokenreview-rate (0) must be positive"},
		{"two streams per xDS connection", []string{"-namespace", "ns", "-xds-max-concurrent-streams", "2"}, "-xds-max-concurrent-streams must be at least 3"},
		{"no report burst", []string{"-namespace", "ns", "-report-pod-burst", "0"}, "-report-pod-burst (0) must be at least 1"},
		{"a negative report memory cap", []string{"-namespace", "ns", "-report-max-bytes", "-1"}, "-report-max-bytes must be 0 (a quarter of GOMEMLIMIT) or positive; got -1"},
		{"no Topic in any namespace", []string{"-namespace", "ns", "-max-topics-per-namespace", "0"}, "-max-topics-per-namespace must be positive, or -1 for no limit; got 0"},
		{"a webhook certificate without the webhook", []string{"-namespace", "ns", "-webhook-cert-dir", "/etc/webhook-tls"},
			"-webhook-cert-dir is set but -webhook-configuration is empty"},
		// Said before any cluster is looked for (there is none here).
		{"a webhook certificate directory without the files", []string{"-namespace", "ns", "-webhook-configuration", "w", "-sidecar-image", "img", "-sidecar-broker", "nats://b:4222",
			"-webhook-cert-dir", emptyDir}, "-webhook-cert-dir " + emptyDir + ": reading the webhook's serving certificate"},
	}
	bin := buildBinary(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := os.Stat(operatorapp.InClusterNamespaceFile); err == nil && tc.args == nil {
				t.Skipf("in a pod, the operator takes its namespace from %s", operatorapp.InClusterNamespaceFile)
			}
			cmd := exec.Command(bin, append([]string{"operator"}, tc.args...)...)
			// Nothing that could find a cluster or a namespace.
			cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("exited with %v, want status 1:\n%s", err, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Fatalf("output does not say %q:\n%s", tc.want, out)
			}
		})
	}
}
