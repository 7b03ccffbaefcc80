package system_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/brokercreds"
	ctrlimports "github.com/weighstation/weighstation/controllers/imports"
	"github.com/weighstation/weighstation/controllers/injectionproof"
	"github.com/weighstation/weighstation/controllers/webhook"
	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar/brokercred"
)

// The attacks of a hostile tenant on what a namespace may reach, run
// against the real apiserver, the operator under its RBAC and the broker
// as the chart runs it. Each credential here is what a sidecar holds: an
// attacker who copied it out of a sidecar's memory (or a namespace editor
// who minted the pod's token) uses it directly against the broker.

// labelPod adds labels to a pod.
func labelPod(t *testing.T, p *corev1.Pod, labels map[string]string) {
	t.Helper()
	patch := ctrlclient.MergeFrom(p.DeepCopy())
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	for k, v := range labels {
		p.Labels[k] = v
	}
	if err := k8sClient.Patch(background(), p, patch); err != nil {
		t.Fatal(err)
	}
}

// podConfigured waits until the operator computed p's configuration and
// check holds of it.
func podConfigured(t *testing.T, op *operator, p *corev1.Pod, what string, check func(meshconfig.PodConfig) error) {
	t.Helper()
	eventually(t, p.Name+": "+what, func() error {
		cfg, ok := op.pub.Get(types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
		if !ok {
			return errors.New("not computed yet")
		}
		return check(cfg)
	})
}

func hasSubscription(subject string) func(meshconfig.PodConfig) error {
	return func(cfg meshconfig.PodConfig) error {
		for _, s := range cfg.Subscriptions {
			if s.Subject == subject {
				return nil
			}
		}
		return fmt.Errorf("no subscription to %q in %+v", subject, cfg.Subscriptions)
	}
}

// violations connects with h's credential and collects the broker's
// asynchronous errors (permissions violations name the subject).
func violations(t *testing.T, url string, h *brokercred.Holder) (*nats.Conn, <-chan error) {
	t.Helper()
	errs := make(chan error, 16)
	nc, err := nats.Connect(url, append(credOptions(h), nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))...)
	if err != nil {
		t.Fatalf("connecting with the issued credential: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

// expectViolation waits for the broker's permissions violation naming
// subject.
func expectViolation(t *testing.T, errs <-chan error, what, subject string) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case err := <-errs:
			msg := strings.ToLower(err.Error())
			if strings.Contains(msg, "permissions violation") && strings.Contains(err.Error(), subject) {
				return
			}
		case <-timeout:
			t.Errorf("%s: no permissions violation naming %q from the broker within 5s", what, subject)
			return
		}
	}
}

// TestALeakedCredentialCanDoNoMoreThanItsPod: at the broker, the pod's
// credential subscribes to its Subscriptions and its own inboxes only, and
// publishes nowhere its Topics forbid it.
func TestALeakedCredentialCanDoNoMoreThanItsPod(t *testing.T) {
	ns := newNamespace(t)
	xdsAddr, brokerAddr := natstest.FreeAddr(t), natstest.FreeAddr(t)
	url := "nats://" + brokerAddr
	op := startOperator(t, xdsAddr, withBrokerURL(url))
	startTrustingBroker(t, brokerAddr)
	for _, obj := range []ctrlclient.Object{
		&v1alpha1.Subscription{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"}, Spec: v1alpha1.SubscriptionSpec{
			Subject: "orders.*", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "billing"}}}},
		&v1alpha1.Topic{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "payroll"}, Spec: v1alpha1.TopicSpec{
			Subject: "payroll.>", Publishers: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "hr"}}}},
	} {
		if err := k8sClient.Create(background(), obj); err != nil {
			t.Fatal(err)
		}
	}
	billing, billingToken := createInjectedPod(t, ns, "billing")
	labelPod(t, billing, map[string]string{"app": "billing"})
	other, otherToken := createInjectedPod(t, ns, "other")
	podConfigured(t, op, billing, "its Subscription", hasSubscription("orders.*"))
	podConfigured(t, op, other, "computed", func(meshconfig.PodConfig) error { return nil })

	leaked := fetchCredential(t, xdsAddr, billingToken, billing)
	otherCred := fetchCredential(t, xdsAddr, otherToken, other)
	if !strings.HasPrefix(leaked.InboxPrefix(), "_INBOX.") || leaked.InboxPrefix() == otherCred.InboxPrefix() {
		t.Fatalf("inbox prefixes %q and %q: want one _INBOX space per pod", leaked.InboxPrefix(), otherCred.InboxPrefix())
	}
	nc, errs := violations(t, url, leaked)

	for _, tc := range []struct{ what, subject string }{
		{"every subject", ">"},
		{"every inbox", "_INBOX.>"},
		{"another pod's inboxes", otherCred.InboxPrefix() + ".>"},
		{"a subject no Subscription of the pod covers", "payroll.salaries"},
	} {
		if _, err := nc.SubscribeSync(tc.subject); err != nil {
			t.Fatal(err)
		}
		expectViolation(t, errs, "subscribing to "+tc.what, tc.subject)
	}
	for _, tc := range []struct{ what, subject string }{
		{"a Topic whose publishers exclude the pod", "payroll.salaries"},
		{"the JetStream API", "$JS.API.INFO"},
		{"the reserved $WEIGHSTATION space", "$WEIGHSTATION.stamp"},
	} {
		if err := nc.Publish(tc.subject, []byte("forged")); err != nil {
			t.Fatal(err)
		}
		expectViolation(t, errs, "publishing to "+tc.what, tc.subject)
	}
	// What the pod may do, it still may: its Subscription's subject and its
	// own inbox space, round trips through the broker.
	for _, subject := range []string{"orders.created", leaked.InboxPrefix() + ".reply"} {
		if err := roundTrip(nc, subject); err != nil {
			t.Errorf("the pod's own %q: %v", subject, err)
		}
	}
}

// TestNamespacesAreIsolatedUnlessTheyExportAndImport: a Subscription ">"
// in namespace A receives nothing that namespace B publishes, until B's
// Topic exports to A and A's Subscription imports from B; an import
// without its export is Valid=False and imports nothing.
func TestNamespacesAreIsolatedUnlessTheyExportAndImport(t *testing.T) {
	nsA, nsB := newNamespace(t), newNamespace(t)
	xdsAddr, brokerAddr := natstest.FreeAddr(t), natstest.FreeAddr(t)
	url := "nats://" + brokerAddr
	op := startOperator(t, xdsAddr, withBrokerURL(url))
	startTrustingBroker(t, brokerAddr)
	everything := &v1alpha1.Subscription{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "everything"}, Spec: v1alpha1.SubscriptionSpec{
		Subject: ">", Selector: metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled}}}}
	if err := k8sClient.Create(background(), everything); err != nil {
		t.Fatal(err)
	}
	reader, readerToken := createInjectedPod(t, nsA, "reader")
	writer, writerToken := createInjectedPod(t, nsB, "writer")
	podConfigured(t, op, reader, "its Subscription to everything", hasSubscription(">"))
	podConfigured(t, op, writer, "computed", func(meshconfig.PodConfig) error { return nil })
	readerConn, _ := violations(t, url, fetchCredential(t, xdsAddr, readerToken, reader))
	writerCred := fetchCredential(t, xdsAddr, writerToken, writer)
	writerConn, _ := violations(t, url, writerCred)

	seen, err := readerConn.SubscribeSync(">")
	if err != nil {
		t.Fatal(err)
	}
	// nextOrders returns the subjects of the orders messages the reader
	// received before its own sentinel, published after writer's own
	// sentinel came back to writer: what B published before it has been
	// routed by then.
	round := 0
	nextOrders := func() []string {
		t.Helper()
		round++
		if err := roundTrip(writerConn, fmt.Sprintf("%s.sentinel%d", writerCred.InboxPrefix(), round)); err != nil {
			t.Fatal(err)
		}
		sentinel := fmt.Sprintf("a.sentinel%d", round)
		if err := readerConn.Publish(sentinel, nil); err != nil {
			t.Fatal(err)
		}
		var orders []string
		for {
			m, err := seen.NextMsg(5 * time.Second)
			if err != nil {
				t.Fatalf("the reader's own sentinel %s: %v", sentinel, err)
			}
			if m.Subject == sentinel {
				return orders
			}
			if strings.HasPrefix(m.Subject, "orders.") {
				orders = append(orders, m.Subject)
			}
		}
	}

	if err := writerConn.Publish("orders.1", []byte("B's")); err != nil {
		t.Fatal(err)
	}
	if got := nextOrders(); len(got) != 0 {
		t.Fatalf("namespace A's Subscription > received B's %v without an export and an import", got)
	}

	// An import that B does not export is refused, by name.
	imports := &v1alpha1.Subscription{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "orders-from-b"}, Spec: v1alpha1.SubscriptionSpec{
		Subject: "orders.>", Import: &v1alpha1.NamespaceRef{Namespace: nsB},
		Selector: metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled}}}}
	if err := k8sClient.Create(background(), imports); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the import without an export is Valid=False", func() error {
		var got v1alpha1.Subscription
		if err := k8sClient.Get(background(), ctrlclient.ObjectKeyFromObject(imports), &got); err != nil {
			return err
		}
		c := conditionIs(got.Status.Conditions, v1alpha1.ConditionValid, metav1.ConditionFalse, "spec.import.namespace "+nsB+" exports no Topic")
		if c == nil && got.Status.Conditions[0].Reason != ctrlimports.ReasonNotExported {
			// Valid is the first condition the reconciler sets.
			return fmt.Errorf("reason %s", got.Status.Conditions[0].Reason)
		}
		return c
	})
	if err := writerConn.Publish("orders.2", []byte("B's")); err != nil {
		t.Fatal(err)
	}
	if got := nextOrders(); len(got) != 0 {
		t.Fatalf("an import without its export received %v", got)
	}

	// B exports its orders to A: A's import now receives them.
	export := &v1alpha1.Topic{ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: "orders"}, Spec: v1alpha1.TopicSpec{
		Subject: "orders.>", Export: &v1alpha1.Export{Namespaces: []string{nsA}}}}
	if err := k8sClient.Create(background(), export); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the import with its export is Valid=True", func() error {
		var got v1alpha1.Subscription
		if err := k8sClient.Get(background(), ctrlclient.ObjectKeyFromObject(imports), &got); err != nil {
			return err
		}
		return conditionIs(got.Status.Conditions, v1alpha1.ConditionValid, metav1.ConditionTrue, "")
	})
	eventually(t, "B's orders reach A through the export and the import", func() error {
		if err := writerConn.Publish("orders.3", []byte("B's")); err != nil {
			return err
		}
		if got := nextOrders(); len(got) == 0 {
			return errors.New("none arrived")
		}
		return nil
	})
}

// TestAuditModeIsTheNamespacesChoice: a pod cannot turn its own ACLs off
// with an annotation; its namespace's label can.
func TestAuditModeIsTheNamespacesChoice(t *testing.T) {
	ns := newNamespace(t)
	xdsAddr := natstest.FreeAddr(t)
	op := startOperator(t, xdsAddr)
	p, _ := createInjectedPod(t, ns, "sneaky")
	patch := ctrlclient.MergeFrom(p.DeepCopy())
	p.Annotations[v1alpha1.AccessModeLabel] = meshconfig.AccessAudit
	if err := k8sClient.Patch(background(), p, patch); err != nil {
		t.Fatal(err)
	}
	mode := func(want string) func(meshconfig.PodConfig) error {
		return func(cfg meshconfig.PodConfig) error {
			if cfg.Access.Mode != want {
				return fmt.Errorf("access mode %q, want %q", cfg.Access.Mode, want)
			}
			return nil
		}
	}
	// The annotation changed the pod: it was computed again, enforced.
	podConfigured(t, op, p, "enforced despite its own audit annotation", func(cfg meshconfig.PodConfig) error {
		if cfg.Access.Mode != meshconfig.AccessEnforce {
			return fmt.Errorf("the pod's own annotation set access mode %q", cfg.Access.Mode)
		}
		return nil
	})
	var namespace corev1.Namespace
	if err := k8sClient.Get(background(), types.NamespacedName{Name: ns}, &namespace); err != nil {
		t.Fatal(err)
	}
	nsPatch := ctrlclient.MergeFrom(namespace.DeepCopy())
	if namespace.Labels == nil {
		namespace.Labels = map[string]string{}
	}
	namespace.Labels[v1alpha1.AccessModeLabel] = meshconfig.AccessAudit
	if err := k8sClient.Patch(background(), &namespace, nsPatch); err != nil {
		t.Fatal(err)
	}
	podConfigured(t, op, p, "in audit mode by its namespace's label", mode(meshconfig.AccessAudit))
}

// TestAnExpiredCredentialStopsWorking: the broker closes a connection
// whose credential expired, and refuses the credential after.
func TestAnExpiredCredentialStopsWorking(t *testing.T) {
	ns := newNamespace(t)
	xdsAddr, brokerAddr := natstest.FreeAddr(t), natstest.FreeAddr(t)
	url := "nats://" + brokerAddr
	op := startOperator(t, xdsAddr, withBrokerURL(url), withCredentialLifetime(brokercreds.MinLifetime))
	startTrustingBroker(t, brokerAddr)
	p, token := createInjectedPod(t, ns, "short-lived")
	podConfigured(t, op, p, "computed", func(meshconfig.PodConfig) error { return nil })
	cred := fetchCredential(t, xdsAddr, token, p)
	reason := make(chan error, 1)
	closed := make(chan struct{})
	nc, err := nats.Connect(url, append(credOptions(cred), nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case reason <- err:
			default:
			}
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }))...)
	if err != nil {
		t.Fatalf("the fresh credential: %v", err)
	}
	defer nc.Close()
	select {
	case <-closed:
	case <-time.After(brokercreds.MinLifetime + 10*time.Second):
		t.Fatalf("the broker kept the connection past the credential's expiry (%s)", brokercreds.MinLifetime)
	}
	select {
	case err := <-reason:
		if !strings.Contains(strings.ToLower(err.Error()), "expired") {
			t.Errorf("the broker closed the connection for %v, want the credential's expiry", err)
		}
	default:
		t.Error("the broker gave no reason for closing the connection")
	}
	// nats-server compares the expiry in whole seconds: within the second
	// it expired in, a connection is admitted and closed at once.
	eventually(t, "the expired credential is refused", func() error {
		nc, err := nats.Connect(url, credOptions(cred)...)
		if err == nil {
			nc.Close()
			return errors.New("admitted")
		}
		if !isAuthorizationViolation(err) {
			return fmt.Errorf("%v, want an authorization violation", err)
		}
		return nil
	})
}

// TestOnlyInjectedSidecarsGetACredential: a pod that was not opted in when
// it was created, but carries the injector's annotation, a token for the
// sidecar's audience in its application container, and the opt-in label
// added later, gets no credential (nor configuration: the same
// authentication fronts both); a pod the injector made does.
func TestOnlyInjectedSidecarsGetACredential(t *testing.T) {
	ns := newNamespace(t)
	xdsAddr, brokerAddr := natstest.FreeAddr(t), natstest.FreeAddr(t)
	url := "nats://" + brokerAddr
	key := []byte("0123456789abcdef0123456789abcdef")
	op := startOperator(t, xdsAddr, withBrokerURL(url), withInjectionProof(key))
	startTrustingBroker(t, brokerAddr)

	// The attack: created without the label (so the webhook never saw it),
	// with the annotation, then labelled.
	forged, forgedToken := createPod(t, ns, "forged", audience)
	patch := ctrlclient.MergeFrom(forged.DeepCopy())
	delete(forged.Labels, v1alpha1.InjectLabel)
	forged.Annotations = map[string]string{v1alpha1.InjectedAnnotation: "v1.0.0"}
	if err := k8sClient.Patch(background(), forged, patch); err != nil {
		t.Fatal(err)
	}
	labelPod(t, forged, map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled})
	podConfigured(t, op, forged, "computed (its configuration is refused at the stream)", func(meshconfig.PodConfig) error { return nil })
	if _, err := issue(t, xdsAddr, forgedToken, string(forged.UID)); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "injector") {
		t.Errorf("the label-after-create pod's credential request: %v, want PermissionDenied naming the injector", err)
	}

	// A pod as the webhook injects it, with its proof.
	made := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "made", Labels: map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled}},
		Spec:       corev1.PodSpec{NodeName: "node-1", ServiceAccountName: "made", Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if _, err := webhook.Inject(made, webhook.Config{
		Image: "weighstation:test", ImagePullPolicy: corev1.PullIfNotPresent, Operator: xdsAddr, Broker: url,
		Audience: audience, TokenExpirationSeconds: 3600, Version: "v1.0.0", Resources: webhook.DefaultResources(),
		HealthPort: webhook.DefaultHealthPort, MetricsPort: webhook.DefaultMetricsPort, RunAsUser: webhook.DefaultRunAsUser,
	}); err != nil {
		t.Fatal(err)
	}
	proof, err := injectionproof.Sign(made, audience, key)
	if err != nil {
		t.Fatal(err)
	}
	made.Annotations[injectionproof.Annotation] = proof
	if err := k8sClient.Create(background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "made"}}); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Create(background(), made); err != nil {
		t.Fatal(err)
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{audience}, ExpirationSeconds: ptr.To[int64](3600),
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "made", UID: made.UID},
	}}
	if err := k8sClient.SubResource("token").Create(background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "made"}}, tr); err != nil {
		t.Fatal(err)
	}
	podConfigured(t, op, made, "computed", func(meshconfig.PodConfig) error { return nil })
	eventually(t, "the injected pod gets its credential", func() error {
		_, err := issue(t, xdsAddr, tr.Status.Token, string(made.UID))
		return err
	})
}

// TestSidecarsRenewTheirCredentialsAndKeepDelivering: with credentials
// that expire every few seconds, two sidecars renew theirs before expiry
// and move their broker connections to the new ones; a stock client's
// subscription and request/reply through them carry on across the
// renewals. A renewal overlaps the two connections (upstream.Client.Renew,
// docs/operator.md, Lifetime): no tick is lost; one that arrived on both
// during an overlap is delivered twice, within what the consumer's sidecar
// counts as possible duplicates. (A renewal was a reconnection, which lost
// what the broker routed between the two.)
func TestSidecarsRenewTheirCredentialsAndKeepDelivering(t *testing.T) {
	ns := newNamespace(t)
	xdsAddr, brokerAddr := natstest.FreeAddr(t), natstest.FreeAddr(t)
	url := "nats://" + brokerAddr
	lifetime := 6 * time.Second
	op := startOperator(t, xdsAddr, withBrokerURL(url), withCredentialLifetime(lifetime))
	startTrustingBroker(t, brokerAddr)
	sub := &v1alpha1.Subscription{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ticks"}, Spec: v1alpha1.SubscriptionSpec{
		Subject: "ticks.>", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "consumer"}}}}
	if err := k8sClient.Create(background(), sub); err != nil {
		t.Fatal(err)
	}
	consumer := startPodWith(t, podSettings{issued: true}, ns, "consumer", map[string]string{"app": "consumer"}, url, xdsAddr)
	producer := startPodWith(t, podSettings{issued: true}, ns, "producer", nil, url, xdsAddr)
	waitConfigured(t, op, ns, consumer, "its Subscription", hasSubscription("ticks.>"))
	waitConfigured(t, op, ns, producer, "computed", func(meshconfig.PodConfig) error { return nil })

	in := consumer.app(t)
	ticks, err := in.SubscribeSync("ticks.>")
	if err != nil {
		t.Fatal(err)
	}
	// A responder on the consumer, for requests from the producer through
	// both sidecars' translated inboxes.
	if _, err := in.Subscribe("ticks.ask", func(m *nats.Msg) { _ = m.Respond([]byte("answer")) }); err != nil {
		t.Fatal(err)
	}
	if err := in.Flush(); err != nil {
		t.Fatal(err)
	}
	out := producer.app(t)
	deadline := time.Now().Add(2*lifetime + 3*time.Second) // two renewals each, at two thirds
	var sent, received, answered int
	// Each tick by its subject: a renewal's overlap may deliver one twice
	// (counted by the sidecar as a possible duplicate), none is lost.
	ticked := map[string]bool{}
	// The path through both sidecars first: the consumer's sidecar may
	// not have its upstream interest yet when its application's SUB is
	// flushed.
	eventually(t, "a probe through both sidecars", func() error {
		if err := out.Publish("ticks.probe", nil); err != nil {
			return err
		}
		_, err := ticks.NextMsg(time.Second)
		return err
	})
	took := func(m *nats.Msg) {
		if strings.HasPrefix(m.Subject, "ticks.") && m.Subject != "ticks.ask" && m.Subject != "ticks.sentinel" && m.Subject != "ticks.probe" {
			received++
			ticked[m.Subject] = true
		}
	}
	// A steady trickle, paced by a ticker: not a measurement.
	pace := time.NewTicker(50 * time.Millisecond)
	defer pace.Stop()
	for ; time.Now().Before(deadline); <-pace.C {
		sent++
		if err := out.Publish(fmt.Sprintf("ticks.%d", sent), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := out.Request("ticks.ask", nil, time.Second); err == nil {
			answered++
		}
		for {
			m, err := ticks.NextMsg(0)
			if err != nil {
				break
			}
			took(m) // the requests match ticks.> too
		}
	}
	for _, p := range []*pod{consumer, producer} {
		if n := p.issued.Renewals(); n < 2 {
			t.Errorf("%s renewed its credential %d times in %s, want at least 2 (lifetime %s)", p.name, n, 2*lifetime, lifetime)
		}
	}
	// After the renewals, both directions still work: a sentinel arrives.
	eventually(t, "a sentinel through both sidecars after the renewals", func() error {
		if err := out.Publish("ticks.sentinel", nil); err != nil {
			return err
		}
		for {
			m, err := ticks.NextMsg(time.Second)
			if err != nil {
				return err
			}
			if m.Subject == "ticks.sentinel" {
				return nil
			}
			took(m)
		}
	})
	if _, err := out.Request("ticks.ask", nil, 5*time.Second); err != nil {
		t.Errorf("a request through the renewed credentials' inboxes: %v", err)
	}
	duplicates := func(p *pod) float64 {
		reg := prometheus.NewRegistry()
		reg.MustRegister(p.side.Collector())
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == "weighstation_sidecar_broker_renewal_duplicates_total" {
				return f.GetMetric()[0].GetCounter().GetValue()
			}
		}
		t.Fatal("the sidecar exports no weighstation_sidecar_broker_renewal_duplicates_total")
		return 0
	}
	t.Logf("over %s: %d published, %d received (%d distinct), %d of %d requests answered; renewals: consumer %d, producer %d; possible duplicates counted: consumer %.0f, producer %.0f",
		2*lifetime, sent, received, len(ticked), answered, sent, consumer.issued.Renewals(), producer.issued.Renewals(), duplicates(consumer), duplicates(producer))
	if len(ticked) != sent {
		var missing []string
		for i := 1; i <= sent && len(missing) < 10; i++ {
			if s := fmt.Sprintf("ticks.%d", i); !ticked[s] {
				missing = append(missing, s)
			}
		}
		t.Errorf("the renewals lost messages: %d of %d arrived; missing (the first 10) %v", len(ticked), sent, missing)
	}
	if extra := received - len(ticked); float64(extra) > duplicates(consumer) {
		t.Errorf("%d ticks arrived twice, but the consumer's sidecar counted %.0f possible duplicates", extra, duplicates(consumer))
	}
	if answered < sent*3/4 {
		t.Errorf("the renewals lost more than a quarter of the requests: %d of %d answered", answered, sent)
	}
}

// TestRequestsCrossNamespacesOnlyThroughAServiceExport: a requester in A
// reaches a responder in B only once B's Subscription exports to A and
// A's Topic imports from B; before, A's Topic is Valid=False and its
// request has no responder. The replies travel through both sidecars'
// translated inboxes and the broker's service-import reply space.
func TestRequestsCrossNamespacesOnlyThroughAServiceExport(t *testing.T) {
	nsA, nsB := newNamespace(t), newNamespace(t)
	xdsAddr, brokerAddr := natstest.FreeAddr(t), natstest.FreeAddr(t)
	url := "nats://" + brokerAddr
	op := startOperator(t, xdsAddr, withBrokerURL(url))
	startTrustingBroker(t, brokerAddr)
	charges := &v1alpha1.Subscription{ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: "charges"}, Spec: v1alpha1.SubscriptionSpec{
		Subject: "billing.charge", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "billing"}}}}
	imports := &v1alpha1.Topic{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "billing"}, Spec: v1alpha1.TopicSpec{
		Subject: "billing.>", Import: &v1alpha1.NamespaceRef{Namespace: nsB}}}
	for _, obj := range []ctrlclient.Object{charges, imports} {
		if err := k8sClient.Create(background(), obj); err != nil {
			t.Fatal(err)
		}
	}
	responder := startPodWith(t, podSettings{issued: true}, nsB, "billing", map[string]string{"app": "billing"}, url, xdsAddr)
	requester := startPodWith(t, podSettings{issued: true}, nsA, "shop", nil, url, xdsAddr)
	waitConfigured(t, op, nsB, responder, "its Subscription", hasSubscription("billing.charge"))
	waitConfigured(t, op, nsA, requester, "computed", func(meshconfig.PodConfig) error { return nil })
	for _, p := range []*pod{responder, requester} {
		eventually(t, p.name+"'s sidecar holds its credential and reaches the broker with it", func() error {
			if _, err := p.issued.UserJWT(); err != nil {
				return err
			}
			if !p.side.BrokerConnected() {
				return errors.New("not connected")
			}
			return nil
		})
	}
	eventually(t, "the import without an export is Valid=False", func() error {
		var got v1alpha1.Topic
		if err := k8sClient.Get(background(), ctrlclient.ObjectKeyFromObject(imports), &got); err != nil {
			return err
		}
		return conditionIs(got.Status.Conditions, v1alpha1.ConditionValid, metav1.ConditionFalse, "spec.import.namespace "+nsB+" exports no Subscription")
	})
	answers := responder.app(t)
	if _, err := answers.Subscribe("billing.charge", func(m *nats.Msg) { _ = m.Respond([]byte("charged")) }); err != nil {
		t.Fatal(err)
	}
	if err := answers.Flush(); err != nil {
		t.Fatal(err)
	}
	asks := requester.app(t)
	if _, err := asks.Request("billing.charge", []byte("9.99"), 2*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("a request to another namespace without an export: %v, want no responders", err)
	}

	patch := ctrlclient.MergeFrom(charges.DeepCopy())
	charges.Spec.Export = &v1alpha1.Export{Namespaces: []string{nsA}}
	if err := k8sClient.Patch(background(), charges, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the import with its export is Valid=True", func() error {
		var got v1alpha1.Topic
		if err := k8sClient.Get(background(), ctrlclient.ObjectKeyFromObject(imports), &got); err != nil {
			return err
		}
		return conditionIs(got.Status.Conditions, v1alpha1.ConditionValid, metav1.ConditionTrue, "")
	})
	eventually(t, "A's request is answered by B's responder", func() error {
		m, err := asks.Request("billing.charge", []byte("9.99"), 2*time.Second)
		if err != nil {
			return err
		}
		if string(m.Data) != "charged" {
			return fmt.Errorf("answer %q", m.Data)
		}
		return nil
	})
}
