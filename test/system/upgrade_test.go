package system_test

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/pki"
	"github.com/weighstation/weighstation/internal/envtestsuite"
	"github.com/weighstation/weighstation/internal/natstest"
)

// upgradeXDSService is the xDS Service the serving certificate names, as
// the chart's operator names its own (weighstation-xds in its namespace);
// the sidecar reaches it on loopback and checks that name
// (-operator-server-name).
const upgradeXDSService = "weighstation-xds"

// TestPreviousReleaseSidecarIsServedDuringUpgrade: during a rolling
// upgrade, pods still run the sidecar of the release before (configuration
// schema 1, previousReleaseCommit), built from the git history and run as
// its own process with that release's flags. Today's operator must keep
// serving it on every path it uses:
//
//  1. its TLS connection, pod token and broker credential: it becomes
//     ready, and the Topic's and the Subscription's status count its pod
//     as having applied their current versions;
//  2. a stock nats.go application publishes and subscribes through it;
//  3. its reports fill the Subscription's and the Topic's status;
//  4. a Topic's new size limit reaches it (status: the new version
//     applied) and it enforces it: an application's message over it is
//     refused with an error, the connection kept;
//  5. a kill switch reaches it (status: applied, engaged in all pods) and
//     it reports the Subscription killed;
//  6. on SIGTERM it drains and exits, its last report acknowledged.
//
// Each step needs the one before; the first that fails ends the test.
func TestPreviousReleaseSidecarIsServedDuringUpgrade(t *testing.T) {
	// The build comes first: without the history, or with a build that
	// broke, nothing else is worth starting.
	bin := previousReleaseSidecar(t)
	ctx := background()
	ns := newNamespace(t)
	xdsAddr, brokerAddr := natstest.FreeAddr(t), natstest.FreeAddr(t)
	brokerURL := "nats://" + brokerAddr
	// The broker trusts the operator's accounts, as the chart runs it: the
	// old sidecar connects with the credential the operator issues it,
	// which it asks for over the same connection as its xDS stream. The
	// report window holds the whole test, so that the counts compared
	// below do not slide out of it.
	startOperator(t, xdsAddr, withBrokerURL(brokerURL), withReportWindow(5*time.Minute))
	startTrustingBroker(t, brokerAddr)

	const podName = "prev-0"
	selectsThePod := metav1.LabelSelector{MatchLabels: map[string]string{"app": "prev"}}
	// The Topic names its publishers, so that its status counts the pods
	// that applied it (a Topic for every pod reports no pod counts).
	topic := &v1alpha1.Topic{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"},
		Spec: v1alpha1.TopicSpec{
			Subject: "orders.>", Limits: v1alpha1.TopicLimits{MaxMessageBytes: 4096},
			Publishers: &selectsThePod,
		},
	}
	sub := &v1alpha1.Subscription{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "billing"},
		Spec:       v1alpha1.SubscriptionSpec{Subject: "orders.*", Selector: selectsThePod},
	}
	for _, obj := range []clientObject{topic, sub} {
		if err := k8sClient.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s: %v", obj.GetName(), err)
		}
	}

	p, token := createSidecarPod(t, ns, podName, map[string]string{"app": "prev"})

	// The operator's xDS server in this process serves plaintext; the
	// released sidecar speaks only TLS, checked against the CA bundle
	// mounted in its pod. The operator's own certificate authority
	// (controllers/pki, as main.go sets it up) issues the serving
	// certificate, and a TLS front on loopback passes the stream to the
	// operator.
	authority, err := pki.New(k8sClient, k8sClient, pki.Options{
		Namespace: operatorNamespace, SecretName: "upgrade-ca-" + ns,
		DNSNames: pki.ServiceDNSNames(upgradeXDSService, operatorNamespace),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := authority.Ensure(ctx); err != nil {
		t.Fatalf("the operator's CA: %v", err)
	}
	t.Cleanup(func() {
		ca := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "upgrade-ca-" + ns}}
		_ = k8sClient.Delete(background(), ca)
	})
	dir := t.TempDir()
	caFile, tokenFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token")
	for file, data := range map[string][]byte{caFile: authority.Bundle(), tokenFile: []byte(token)} {
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	front := startTLSFront(t, xdsAddr, authority.TLSConfig())

	side := startPreviousSidecar(t, bin, previousSidecarFlags{
		listen: natstest.FreeAddr(t), health: natstest.FreeAddr(t), brokerURL: brokerURL,
		operator: front, operatorServerName: upgradeXDSService + "." + operatorNamespace + ".svc",
		caFile: caFile, tokenFile: tokenFile, namespace: ns, pod: podName, uid: string(p.UID),
	})
	appURL := "nats://" + side.flags.listen

	// What the steps share: the applications, what they received, and the
	// versions the status showed.
	var (
		pub, consumer *nats.Conn
		pubErrs       = make(chan error, 16)
		received      = newSubjectCounts()
		versions      = map[string]string{} // by object name, the last applied version
		published     int                   // messages the publisher sent under the limit
	)
	const messages = 50
	// The applications outlive the step that connects them.
	top := t

	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"it is configured by the operator and counted as applying the current versions", func(t *testing.T) {
			// Ready once the operator's configuration is in force (and
			// the broker credential that its inboxes need came with it).
			envtestsuite.Eventually(t, 60*time.Second, 50*time.Millisecond, "the previous release's sidecar is ready", func() error {
				if err := side.alive(); err != nil {
					return err
				}
				return ready(side.flags.health)
			})
			for _, obj := range []client.Object{topic, sub} {
				versions[obj.GetName()] = waitApplied(t, side, obj, "", "")
			}
		}},
		{"an application publishes and subscribes through it", func(t *testing.T) {
			consumer = natstest.Connect(top, appURL, nats.NoReconnect())
			if _, err := consumer.Subscribe("orders.*", func(m *nats.Msg) { received.add(m.Subject) }); err != nil {
				t.Fatal(err)
			}
			if err := consumer.Flush(); err != nil {
				t.Fatal(err)
			}
			pub = natstest.Connect(top, appURL, nats.NoReconnect(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				select {
				case pubErrs <- err:
				default:
				}
			}))
			// The broker learns of the sidecar's interest asynchronously:
			// a sentinel that arrives says it has.
			eventually(t, "a sentinel arrives", func() error {
				if err := side.alive(); err != nil {
					return err
				}
				if err := errors.Join(pub.Publish("orders.sentinel", nil), pub.Flush()); err != nil {
					return err
				}
				published++
				if received.get("orders.sentinel") == 0 {
					return errors.New("no sentinel received")
				}
				return nil
			})
			for i := range messages {
				if err := pub.Publish("orders.new", fmt.Appendf(nil, "order %d", i)); err != nil {
					t.Fatal(err)
				}
				published++
			}
			if err := pub.Flush(); err != nil {
				t.Fatal(err)
			}
			eventually(t, "every order arrives", func() error {
				if got := received.get("orders.new"); got != messages {
					return fmt.Errorf("received %d of %d", got, messages)
				}
				return nil
			})
		}},
		{"its reports fill the Subscription's and the Topic's status", func(t *testing.T) {
			delivered := int64(received.total())
			eventually(t, "the Subscription shows what the pod delivered and measured", func() error {
				var got v1alpha1.Subscription
				if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(sub), &got); err != nil {
					return err
				}
				// Everything delivered was stamped by the same sidecar
				// when it was published: each has a latency.
				agg := got.Status.Aggregate
				if agg == nil || agg.Pods != 1 || agg.Delivered != delivered || agg.Count != delivered || agg.P99.Duration <= 0 {
					return fmt.Errorf("aggregate %+v, want 1 pod, %d delivered and measured", agg, delivered)
				}
				if len(got.Status.Pods) != 1 {
					return fmt.Errorf("pods %+v, want %s alone", got.Status.Pods, podName)
				}
				if ps := got.Status.Pods[0]; ps.Name != podName || ps.Delivered != delivered || ps.Latency == nil || ps.Latency.Count != delivered ||
					ps.Dwell == nil || ps.LastReportTime == nil || ps.Stale {
					return fmt.Errorf("pod %+v", ps)
				}
				return conditionIs(got.Status.Conditions, v1alpha1.ConditionDegraded, metav1.ConditionFalse, "1 pod(s) reporting")
			})
			eventually(t, "the Topic counts the publishes", func() error {
				var got v1alpha1.Topic
				if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(topic), &got); err != nil {
					return err
				}
				// Sentinels sent before the broker knew of the consumer
				// were forwarded too, and went nowhere.
				if st := got.Status.Publish; st == nil || st.Pods != 1 || st.Forwarded != int64(published) || st.Attempts != int64(published) || len(st.Refused) != 0 {
					return fmt.Errorf("publish %+v, want %d attempted and forwarded by 1 pod, none refused", st, published)
				}
				return nil
			})
		}},
		{"a Topic's new size limit reaches it and is enforced", func(t *testing.T) {
			kubectl(t, "-n", ns, "patch", "topic", topic.Name, "--type=merge", "-p", `{"spec":{"limits":{"maxMessageBytes":100}}}`)
			versions[topic.Name] = waitApplied(t, side, topic, versions[topic.Name], "")
			if err := pub.Publish("orders.big", make([]byte, 200)); err != nil {
				t.Fatalf("publish: %v", err)
			}
			want := "message of 200 bytes exceeds maxMessageBytes 100"
			deadline := time.After(20 * time.Second)
			for refused := false; !refused; {
				select {
				case err := <-pubErrs:
					refused = strings.Contains(err.Error(), want)
				case <-deadline:
					t.Fatalf("the application was not told %q within 20s", want)
				}
			}
			// The refusal kept the connection: a message under the limit,
			// published after it, arrives; the one over it never left.
			if err := errors.Join(pub.Publish("orders.small", []byte("ok")), pub.Flush()); err != nil {
				t.Fatalf("a publish under the limit after the refusal: %v", err)
			}
			eventually(t, "the message under the limit arrives", func() error {
				if received.get("orders.small") != 1 {
					return errors.New("not yet")
				}
				return nil
			})
			if !pub.IsConnected() {
				t.Fatalf("the publisher's connection is %v after the refusal", pub.Status())
			}
			if n := received.get("orders.big"); n != 0 {
				t.Fatalf("the message over the limit was delivered %d time(s)", n)
			}
			eventually(t, "the Topic counts the refusal", func() error {
				var got v1alpha1.Topic
				if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(topic), &got); err != nil {
					return err
				}
				if st := got.Status.Publish; st == nil || len(st.Refused) != 1 || st.Refused[0].Reason != "size" || st.Refused[0].Count != 1 {
					return fmt.Errorf("publish %+v, want 1 refused for size", st)
				}
				return nil
			})
		}},
		{"a kill switch reaches it and it reports the Subscription killed", func(t *testing.T) {
			kubectl(t, "-n", ns, "patch", "subscription", sub.Name, "--type=merge", "-p", `{"spec":{"killSwitch":{"engaged":true,"reason":"upgrade drill"}}}`)
			versions[sub.Name] = waitApplied(t, side, sub, versions[sub.Name], "the kill switch is engaged in all 1")
			// What the sidecar itself says, in its reports: delivery to
			// its pod is stopped by hand.
			eventually(t, "the Subscription is reported killed", func() error {
				var got v1alpha1.Subscription
				if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(sub), &got); err != nil {
					return err
				}
				if got.Status.Killed != "Manual" {
					return fmt.Errorf("killed %q, want Manual", got.Status.Killed)
				}
				if len(got.Status.Pods) != 1 || got.Status.Pods[0].Killed == nil || got.Status.Pods[0].Killed.Reason != v1alpha1.KillManual {
					return fmt.Errorf("pods %+v, want %s killed by hand", got.Status.Pods, podName)
				}
				return nil
			})
		}},
		{"on SIGTERM it drains and exits, its last report acknowledged", func(t *testing.T) {
			if err := side.stop(30 * time.Second); err != nil {
				t.Fatalf("the previous release's sidecar after SIGTERM: %v", err)
			}
			// Its own words, at that commit (internal/sidecarcmd): the
			// operator answered the report sent after the drain.
			if want := "last report acknowledged by the operator"; !side.logsContain(want) {
				t.Fatalf("the sidecar's output does not say %q", want)
			}
		}},
	}
	for _, step := range steps {
		if !t.Run(step.name, step.run) {
			return
		}
	}
}

// createSidecarPod creates a pod for a sidecar (startPod's, and the
// previous release's in TestPreviousReleaseSidecarIsServedDuringUpgrade):
// its ServiceAccount, the pod scheduled (there is no scheduler in
// envtest) with labels and as the webhook leaves it (the sidecar label and
// the injected annotation), and a token for the xDS audience bound to it,
// which it returns. The labels are there from the pod's creation, as in a
// cluster: a pod relabelled into a Topic's publishers just after its
// sidecar asked for its broker credential may get one without the
// Topic's subjects, which the sidecar does not ask again for (seen in 1
// run of 6 with the previous release as the operator too).
func createSidecarPod(t *testing.T, ns, name string, labels map[string]string) (*corev1.Pod, string) {
	t.Helper()
	ctx := background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := k8sClient.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	all := map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled}
	maps.Copy(all, labels)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: all, Annotations: map[string]string{v1alpha1.InjectedAnnotation: "v1.0.0"}},
		Spec: corev1.PodSpec{
			NodeName:           "node-1",
			ServiceAccountName: name,
			Containers:         []corev1.Container{{Name: "app", Image: "app"}},
		},
	}
	if err := k8sClient.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         []string{audience},
		ExpirationSeconds: ptr.To[int64](3600),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: name, UID: p.UID},
	}}
	if err := k8sClient.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatalf("requesting a token for %s: %v", name, err)
	}
	return p, tr.Status.Token
}

// waitApplied waits until obj's status says that its one counted pod, the
// previous release's sidecar's, applied the version the operator serves
// for obj's current generation (the Ready condition is computed from that
// generation: it names the version served for it), and returns that
// version. A version other than before is required: the change reached
// the pod, not only the status. msg, when set, must be in Ready's message
// too.
func waitApplied(t *testing.T, side *previousSidecar, obj client.Object, before, msg string) string {
	t.Helper()
	var version string
	eventually(t, fmt.Sprintf("%s's status counts the pod as applying its current version", obj.GetName()), func() error {
		if err := side.alive(); err != nil {
			return err
		}
		if err := k8sClient.Get(background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		var conds []metav1.Condition
		var cfg *v1alpha1.ConfigStatus
		switch o := obj.(type) {
		case *v1alpha1.Topic:
			conds, cfg = o.Status.Conditions, o.Status.Config
		case *v1alpha1.Subscription:
			conds, cfg = o.Status.Conditions, o.Status.Config
		default:
			return fmt.Errorf("no status config in a %T", obj)
		}
		if cfg == nil || cfg.Version == "" || cfg.Version == before || cfg.AppliedPods != 1 || cfg.TotalPods != 1 || len(cfg.Rejected) != 0 {
			return fmt.Errorf("config %+v, want a version other than %q applied by 1 of 1 pod", cfg, before)
		}
		ready := meta.FindStatusCondition(conds, v1alpha1.ConditionReady)
		if ready == nil || ready.ObservedGeneration != obj.GetGeneration() {
			return fmt.Errorf("Ready %+v, want it for generation %d", ready, obj.GetGeneration())
		}
		if err := conditionIs(conds, v1alpha1.ConditionReady, metav1.ConditionTrue, "1 of 1 pod(s) applied version "+cfg.Version); err != nil {
			return err
		}
		if err := conditionIs(conds, v1alpha1.ConditionReady, metav1.ConditionTrue, msg); err != nil {
			return err
		}
		version = cfg.Version
		return conditionIs(conds, v1alpha1.ConditionConfigRejected, metav1.ConditionFalse, "")
	})
	return version
}

// ready asks a sidecar's /readyz, which answers 200 once a configuration
// is in force.
func ready(health string) error {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + health + "/readyz?verbose")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s\n%s", resp.Status, body)
	}
	return nil
}

// startTLSFront serves TLS with cfg on a loopback port until the test
// ends, and passes each connection's bytes to backend, plaintext: the
// operator's xDS server in this process. It returns its address. HTTP/2
// is negotiated (ALPN h2), as gRPC clients require; the backend, a gRPC
// server, speaks it over plaintext from the connection's first byte.
func startTLSFront(t *testing.T, backend string, cfg *tls.Config) string {
	t.Helper()
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := tls.NewListener(raw, cfg)
	var (
		mu    sync.Mutex
		conns = map[net.Conn]bool{}
		wg    sync.WaitGroup
	)
	track := func(cs ...net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if conns == nil { // closed
			return false
		}
		for _, c := range cs {
			conns[c] = true
		}
		return true
	}
	wg.Go(func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer in.Close()
				// The operator may be restarting: the sidecar retries.
				out, err := net.DialTimeout("tcp", backend, 5*time.Second)
				if err != nil {
					return
				}
				defer out.Close()
				if !track(in, out) {
					return
				}
				done := make(chan struct{})
				go func() { _, _ = io.Copy(out, in); _ = out.Close(); close(done) }()
				_, _ = io.Copy(in, out)
				_ = in.Close()
				<-done
			})
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		conns = nil
		mu.Unlock()
		wg.Wait()
	})
	return raw.Addr().String()
}

// subjectCounts counts the messages an application received, by subject.
type subjectCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func newSubjectCounts() *subjectCounts { return &subjectCounts{n: map[string]int{}} }

func (c *subjectCounts) add(subject string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[subject]++
}

func (c *subjectCounts) get(subject string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[subject]
}

func (c *subjectCounts) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var total int
	for _, n := range c.n {
		total += n
	}
	return total
}
