package system_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/controllers/brokercreds"
	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/sidecar/brokercred"
	"github.com/weighstation/weighstation/sidecar/xdsclient"
)

// startTrustingBroker starts the embedded broker at addr as the chart runs
// it: with -trust-dir, the trust ConfigMap that the operator wrote.
func startTrustingBroker(t *testing.T, addr string) {
	t.Helper()
	var cm corev1.ConfigMap
	eventually(t, "the operator wrote the broker trust ConfigMap", func() error {
		return k8sClient.Get(background(), types.NamespacedName{Namespace: operatorNamespace, Name: brokercreds.TrustConfigMapName}, &cm)
	})
	natstest.StartTrustingBroker(t, cm.Data, addr)
}

// tokenFileFor writes token where a sidecar reads it.
func tokenFileFor(t *testing.T, token string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(f, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// issue asks the operator at xdsAddr for a credential with token, for the
// pod with uid, once.
func issue(t *testing.T, xdsAddr, token, uid string) (*xdsv1.BrokerCredential, error) {
	t.Helper()
	conn, err := xdsclient.Dial(xdsAddr, insecure.NewCredentials())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(background(), "authorization", "Bearer "+token), 10*time.Second)
	defer cancel()
	return xdsv1.NewBrokerCredentialsClient(conn).Issue(ctx, &xdsv1.IssueBrokerCredentialRequest{PodUid: uid})
}

func isAuthorizationViolation(err error) bool {
	return err != nil && strings.Contains(strings.ToLower(err.Error()), "authorization violation")
}

// sidecarConn is a connection with a sidecar's credential, and what the
// broker told it.
type sidecarConn struct {
	*nats.Conn
	errs   chan error
	closed chan struct{}
}

func connectSidecar(t *testing.T, brokerURL string, h *brokercred.Holder) *sidecarConn {
	t.Helper()
	c := &sidecarConn{errs: make(chan error, 16), closed: make(chan struct{})}
	nc, err := nats.Connect(brokerURL, append(credOptions(h), nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case c.errs <- err:
			default:
			}
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(c.closed) }))...)
	if err != nil {
		t.Fatalf("a sidecar with its issued credential: %v", err)
	}
	t.Cleanup(nc.Close)
	c.Conn = nc
	return c
}

// waitError waits for an error from the broker that mentions want.
func (c *sidecarConn) waitError(t *testing.T, what, want string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case err := <-c.errs:
			if strings.Contains(strings.ToLower(err.Error()), strings.ToLower(want)) {
				return
			}
		case <-deadline:
			t.Fatalf("%s: the broker said nothing of %q within 20s", what, want)
		}
	}
}

// TestBrokerCredentials: a sidecar connects to the broker with the
// credential the operator issued it, a user of its namespace's account
// bounded by its pod's policy, with its own inboxes and an expiry; a
// client with none is refused; only a pod the webhook injected gets one,
// and only with a token for the sidecar's audience, for its own UID; and
// once the pod is deleted, or leaves the mesh (its label removed), the
// broker closes its connection and refuses its credential, while a pod
// that is terminating keeps its own.
func TestBrokerCredentials(t *testing.T) {
	ns := newNamespace(t)
	xdsAddr, brokerAddr := natstest.FreeAddr(t), natstest.FreeAddr(t)
	brokerURL := "nats://" + brokerAddr
	const lifetime = 10 * time.Minute
	op := startOperator(t, xdsAddr, withBrokerURL(brokerURL), withCredentialLifetime(lifetime))
	startTrustingBroker(t, brokerAddr)

	injected, injectedToken := createInjectedPod(t, ns, "injected")
	draining, drainingToken := createInjectedPod(t, ns, "draining")
	relabelled, relabelledToken := createInjectedPod(t, ns, "relabelled")
	checked, checkedToken := createInjectedPod(t, ns, "checked")
	notInjected, notInjectedToken := createPod(t, ns, "not-injected", audience)
	_, wrongAudience := createPod(t, ns, "wrong-audience", "https://kubernetes.default.svc")
	eventually(t, "the operator computed every pod", func() error {
		if !op.pub.Synced() {
			return errors.New("not synced")
		}
		return nil
	})

	// The credential as the operator sends it: a user of the namespace's
	// account, its inbox prefix the only inboxes it may subscribe under,
	// expiring after the operator's lifetime.
	asked := time.Now()
	var cred *xdsv1.BrokerCredential
	eventually(t, "the operator issued a credential", func() error {
		var err error
		cred, err = issue(t, xdsAddr, checkedToken, string(checked.UID))
		return err
	})
	claims, err := jwt.DecodeUserClaims(cred.GetUserJwt())
	if err != nil {
		t.Fatal(err)
	}
	var secret corev1.Secret
	if err := k8sClient.Get(background(), types.NamespacedName{Namespace: operatorNamespace, Name: brokercreds.KeysSecretName}, &secret); err != nil {
		t.Fatal(err)
	}
	keys, _, err := brokercreds.ParseKeys(secret.Data)
	if err != nil {
		t.Fatal(err)
	}
	account, err := keys.AccountKey(ns)
	if err != nil {
		t.Fatal(err)
	}
	if pub, _ := account.PublicKey(); claims.Issuer != pub {
		t.Errorf("the credential is signed by %s, want namespace %s's account %s", claims.Issuer, ns, pub)
	}
	if cred.GetInboxPrefix() != brokercreds.InboxPrefix(claims.Subject) || !slices.Contains(claims.Sub.Allow, cred.GetInboxPrefix()+".>") {
		t.Errorf("inbox prefix %q, subscribe permissions %q: want the user key's inbox prefix, allowed", cred.GetInboxPrefix(), claims.Sub.Allow)
	}
	if expires := time.Unix(cred.GetExpiresUnix(), 0); claims.Expires != cred.GetExpiresUnix() ||
		expires.Before(asked.Add(lifetime).Add(-time.Second)) || expires.After(time.Now().Add(lifetime)) {
		t.Errorf("expires %s (JWT exp %d), want %s after it was asked for (%s)", expires, claims.Expires, lifetime, asked)
	}

	holder := fetchCredential(t, xdsAddr, injectedToken, injected)
	drainingHolder := fetchCredential(t, xdsAddr, drainingToken, draining)
	drainingConn := connectSidecar(t, brokerURL, drainingHolder)
	relabelledHolder := fetchCredential(t, xdsAddr, relabelledToken, relabelled)
	relabelledConn := connectSidecar(t, brokerURL, relabelledHolder)
	injectedConn := connectSidecar(t, brokerURL, holder)
	if err := roundTrip(injectedConn.Conn, holder.InboxPrefix()+".x"); err != nil {
		t.Fatalf("a message through the broker with the issued credential: %v", err)
	}
	// The pod has no Subscription: its credential may subscribe to its
	// inboxes alone.
	if _, err := injectedConn.SubscribeSync(">"); err != nil {
		t.Fatal(err)
	}
	injectedConn.waitError(t, "a subscription to every subject", `permissions violation for subscription to ">"`)

	if _, err := nats.Connect(brokerURL); !isAuthorizationViolation(err) {
		t.Errorf("a client without a credential: %v, want an authorization violation", err)
	}
	// What an application container could try: it has no token for the
	// sidecar's audience (the webhook refuses a pod that would give it
	// one; TestInjectionKeepsTheSidecarTokenFromOtherContainers), so it
	// presents another; or it is in a pod the webhook did not inject; or
	// it holds a pod's token and asks for another pod's credential.
	for _, tc := range []struct {
		name       string
		token, uid string
		want       codes.Code
	}{
		{"a token for another audience", wrongAudience, string(injected.UID), codes.Unauthenticated},
		{"a pod the webhook did not inject", notInjectedToken, string(notInjected.UID), codes.PermissionDenied},
		{"another pod's UID", notInjectedToken, string(injected.UID), codes.PermissionDenied},
		{"no token", "", string(injected.UID), codes.Unauthenticated},
	} {
		if _, err := issue(t, xdsAddr, tc.token, tc.uid); status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}

	// A pod whose label is removed leaves the operator's pod cache and
	// the mesh, though it still runs: its credential is revoked.
	unlabel := ctrlclient.MergeFrom(relabelled.DeepCopy())
	delete(relabelled.Labels, v1alpha1.InjectLabel)
	if err := k8sClient.Patch(background(), relabelled, unlabel); err != nil {
		t.Fatal(err)
	}
	// A pod being deleted keeps its credential while its sidecar drains:
	// with a grace period, and no kubelet in envtest to end it, the pod
	// stays, terminating.
	if err := k8sClient.Delete(background(), draining); err != nil {
		t.Fatal(err)
	}
	// Grace period 0: the pod object goes at once, as it does once the
	// kubelet has stopped its containers.
	deleted := time.Now()
	if err := k8sClient.Delete(background(), injected, ctrlclient.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*sidecarConn{"deleted": injectedConn, "relabelled": relabelledConn} {
		select {
		case <-c.closed:
			t.Logf("the broker closed the %s pod's connection %s after the delete", name, time.Since(deleted).Round(time.Millisecond))
		case <-time.After(20 * time.Second):
			t.Fatalf("the %s pod's broker connection was not closed within 20s", name)
		}
		c.waitError(t, "the reason the broker closed the "+name+" pod's connection", "revoked")
	}
	for name, h := range map[string]*brokercred.Holder{"deleted": holder, "relabelled": relabelledHolder} {
		if _, err := nats.Connect(brokerURL, credOptions(h)...); !isAuthorizationViolation(err) {
			t.Errorf("the %s pod's credential: %v, want an authorization violation", name, err)
		}
	}
	// The revocations that came after the terminating pod's deletion are
	// the sentinel: it was not revoked with them.
	if err := roundTrip(drainingConn.Conn, drainingHolder.InboxPrefix()+".still"); err != nil {
		t.Errorf("the terminating pod's sidecar lost its broker connection: %v", err)
	}
	again, err := nats.Connect(brokerURL, credOptions(drainingHolder)...)
	if err != nil {
		t.Errorf("the terminating pod's credential was refused: %v", err)
	} else {
		again.Close()
	}
}

// roundTrip sends a message to itself through nc's broker.
func roundTrip(nc *nats.Conn, subject string) error {
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	if err := nc.Publish(subject, []byte("1")); err != nil {
		return err
	}
	_, err = sub.NextMsg(5 * time.Second)
	return err
}

// createInjectedPod creates a scheduled pod as the webhook leaves it
// (label and annotation) and returns it with a token for the sidecar's
// audience.
func createInjectedPod(t *testing.T, ns, name string) (*corev1.Pod, string) {
	t.Helper()
	p, token := createPod(t, ns, name, audience)
	patch := ctrlclient.MergeFrom(p.DeepCopy())
	p.Annotations = map[string]string{v1alpha1.InjectedAnnotation: "v0.1.0"}
	if err := k8sClient.Patch(background(), p, patch); err != nil {
		t.Fatal(err)
	}
	return p, token
}

// fetchCredential runs the sidecar's own path: brokercred asks the
// operator over an xDS connection, with the pod's token.
func fetchCredential(t *testing.T, xdsAddr, token string, p *corev1.Pod) *brokercred.Holder {
	t.Helper()
	holder := brokercred.New()
	conn, err := xdsclient.Dial(xdsAddr, insecure.NewCredentials())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(background(), 20*time.Second)
	defer cancel()
	if err := holder.Fetch(ctx, conn, tokenFileFor(t, token), string(p.UID), testr.New(t)); err != nil {
		t.Fatalf("pod %s's sidecar did not get its credential: %v", p.Name, err)
	}
	return holder
}

// credOptions present a sidecar's issued credential with nats.go, as the
// sidecar's own connection presents it (upstream.Credentials).
func credOptions(h *brokercred.Holder) []nats.Option {
	return []nats.Option{func(o *nats.Options) error {
		o.UserJWT, o.SignatureCB = h.UserJWT, h.Sign
		return nil
	}}
}
