package brokercreds

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	neturl "net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/weighstation/weighstation/broker"
	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/meshconfig"
)

// waitTimeout bounds every wait of these tests.
const waitTimeout = 10 * time.Second

func mustKeys(t *testing.T) Keys {
	t.Helper()
	k, err := GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// startBroker starts a broker that trusts keys, as the chart runs it: the
// trust directory written from the trust ConfigMap's data, and no
// namespace account until one is pushed or looked up.
func startBroker(t *testing.T, keys Keys) string {
	t.Helper()
	trust, err := keys.Trust()
	if err != nil {
		t.Fatal(err)
	}
	files, err := trust.ConfigMapData(nil)
	if err != nil {
		t.Fatal(err)
	}
	return natstest.StartTrustingBroker(t, files, "127.0.0.1:0").ClientURL()
}

func connectWith(url string, c Credential, opts ...nats.Option) (*nats.Conn, error) {
	kp, err := nkeys.FromSeed(c.Seed)
	if err != nil {
		return nil, err
	}
	return nats.Connect(url, append(opts, nats.UserJWT(func() (string, error) { return c.JWT, nil }, kp.Sign))...)
}

func isAuthorizationViolation(err error) bool {
	return err != nil && strings.Contains(strings.ToLower(err.Error()), "authorization violation")
}

// source is an AccountSource that answers lookups from a fixed set of
// account JWTs, counts them, and pushes nothing.
type source struct {
	mu      sync.Mutex
	jwts    map[string]string
	lookups atomic.Int64
}

func (s *source) Lookup(publicKey string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	token, ok := s.jwts[publicKey]
	if ok {
		s.lookups.Add(1)
	}
	return token, ok
}

func (s *source) pushAll(context.Context) {}

// dialPusher connects the operator's pusher to url, serving src, and
// waits until the broker has its lookup subscription.
func dialPusher(t *testing.T, url string, keys Keys, src AccountSource) *Pusher {
	t.Helper()
	p, err := DialPusher(url, keys, src, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	natstest.WaitFor(t, "the pusher connected", p.nc.IsConnected)
	if err := p.nc.FlushTimeout(waitTimeout); err != nil {
		t.Fatal(err)
	}
	return p
}

// push signs namespace's account with revoked and pushes it.
func push(t *testing.T, p *Pusher, keys Keys, namespace string, revoked map[string]time.Time) {
	t.Helper()
	pub, token, err := keys.AccountJWT(namespace, revoked, DefaultAccountSettings, Sharing{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := p.Push(ctx, pub, token); err != nil {
		t.Fatalf("pushing the account of %s: %v", namespace, err)
	}
}

// provision is how a broker learns the namespaces' accounts: it is pushed
// them, or it asks the operator at a user's first connection.
type provision struct {
	name  string
	start func(t *testing.T, keys Keys, namespaces ...string) (url string, lookups func() int64)
}

var provisions = []provision{
	{"pushed", func(t *testing.T, keys Keys, namespaces ...string) (string, func() int64) {
		url := startBroker(t, keys)
		p := dialPusher(t, url, keys, &source{})
		for _, ns := range namespaces {
			push(t, p, keys, ns, nil)
		}
		return url, func() int64 { return 0 }
	}},
	{"looked up", func(t *testing.T, keys Keys, namespaces ...string) (string, func() int64) {
		url := startBroker(t, keys)
		src := &source{jwts: map[string]string{}}
		for _, ns := range namespaces {
			pub, token, err := keys.AccountJWT(ns, nil, DefaultAccountSettings, Sharing{})
			if err != nil {
				t.Fatal(err)
			}
			src.jwts[pub] = token
		}
		dialPusher(t, url, keys, src)
		return url, src.lookups.Load
	}},
}

// peer is one credential's connection to the broker, with what the broker
// told it.
type peer struct {
	cred   Credential
	nc     *nats.Conn
	errs   chan error
	closed chan struct{}
}

func dial(t *testing.T, url string, cred Credential, opts ...nats.Option) *peer {
	t.Helper()
	p := &peer{cred: cred, errs: make(chan error, 64), closed: make(chan struct{})}
	nc, err := connectWith(url, cred, append([]nats.Option{nats.NoReconnect(),
		nats.CustomInboxPrefix(cred.InboxPrefix),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case p.errs <- err:
			default:
			}
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(p.closed) }),
	}, opts...)...)
	if err != nil {
		t.Fatalf("connecting with the credential of %s: %v", cred.PublicKey, err)
	}
	t.Cleanup(nc.Close)
	p.nc = nc
	return p
}

// waitError waits for the broker's asynchronous error containing every
// one of want (case aside), passing over others.
func (p *peer) waitError(t *testing.T, what string, want ...string) error {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case err := <-p.errs:
			text := strings.ToLower(err.Error())
			if !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(text, strings.ToLower(w)) }) {
				return err
			}
		case <-deadline:
			t.Fatalf("%s: no error mentioning %q within %s", what, want, waitTimeout)
			return nil
		}
	}
}

func (p *peer) waitClosed(t *testing.T, what string) {
	t.Helper()
	select {
	case <-p.closed:
	case <-time.After(waitTimeout):
		t.Fatalf("%s: the broker did not close the connection within %s", what, waitTimeout)
	}
}

// violation is what nats-server says of a refused publish or subscription.
func violation(op, subject string) []string {
	return []string{"permissions violation for " + op + " to " + fmt.Sprintf("%q", subject)}
}

// firstMessage returns the first message on ch.
func firstMessage(t *testing.T, what string, ch <-chan *nats.Msg) *nats.Msg {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(waitTimeout):
		t.Fatalf("%s: nothing within %s", what, waitTimeout)
		return nil
	}
}

// chanSubscribe subscribes to every subject into one channel: nats.go
// delivers to channel subscriptions from its read loop, in the broker's
// order, so a sentinel that comes first proves that nothing came before.
func chanSubscribe(t *testing.T, nc *nats.Conn, subjects ...string) chan *nats.Msg {
	t.Helper()
	ch := make(chan *nats.Msg, 64)
	for _, s := range subjects {
		sub, err := nc.ChanSubscribe(s, ch)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := nc.FlushTimeout(waitTimeout); err != nil {
		t.Fatal(err)
	}
	return ch
}

// publish publishes and waits until the broker processed it.
func publish(t *testing.T, nc *nats.Conn, subject, reply string, data []byte) {
	t.Helper()
	if err := nc.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Data: data}); err != nil {
		t.Fatal(err)
	}
	if err := nc.FlushTimeout(waitTimeout); err != nil {
		t.Fatalf("publishing to %s: %v", subject, err)
	}
}

// shopPolicy is the policy of namespace "shop" as pod sees it: every pod
// may publish orders; only "payments" may publish payments. Subscriptions
// are the pod's own.
func shopPolicy(pod string, subscriptions ...string) meshconfig.PodConfig {
	cfg := meshconfig.PodConfig{
		Namespace: "shop", Pod: pod,
		Topics: []meshconfig.TopicPolicy{
			{Name: "orders", Subject: "orders.>", MaxMessageBytes: 1024, MayPublish: true},
			{Name: "payments", Subject: "payments.>", MaxMessageBytes: 1024, MayPublish: pod == "payments"},
		},
		Default: meshconfig.TopicPolicy{Subject: ">", MaxMessageBytes: 256, MayPublish: true},
		Access:  meshconfig.Access{Mode: meshconfig.AccessEnforce},
	}
	for _, s := range subscriptions {
		cfg.Subscriptions = append(cfg.Subscriptions, meshconfig.SubscriptionPolicy{Name: s, Subject: s})
	}
	return cfg
}

// issueFor issues the credential of the pod of cfg, with the bound its
// configuration makes, valid for an hour.
func issueFor(t *testing.T, keys Keys, cfg meshconfig.PodConfig) Credential {
	t.Helper()
	uid := "uid-" + cfg.Namespace + "-" + cfg.Pod
	user, err := keys.UserKey(uid)
	if err != nil {
		t.Fatal(err)
	}
	bound := meshconfig.BrokerBoundOf(cfg, InboxPrefix(publicKey(user)), nil)
	c, err := keys.Issue(cfg.Namespace, cfg.Pod, uid, bound, time.Now(), time.Hour, DefaultAccountSettings.UserMaxSubscriptions)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A credential copied out of a sidecar and used directly against the
// broker can do no more than its pod: the broker refuses what its bound
// does not allow, and the namespace's account hides every other
// namespace. Each attack runs against a broker that was pushed the
// accounts and one that learns them from the operator's lookup answer.
func TestALeakedCredentialAtTheBroker(t *testing.T) {
	for _, prov := range provisions {
		t.Run(prov.name, func(t *testing.T) {
			keys := mustKeys(t)
			url, lookups := prov.start(t, keys, "shop", "other")

			// The leaked credential: orders-0 subscribes to orders and
			// may not publish payments.
			leaked := dial(t, url, issueFor(t, keys, shopPolicy("orders-0", "orders.>")))
			// Its namespace's payments pod, which subscribes to all that
			// the attacks aim at.
			payments := dial(t, url, issueFor(t, keys, shopPolicy("payments", "orders.>", "payments.>", "$JS.API.>")))
			// A pod of another namespace with the same Subscription.
			spy := dial(t, url, issueFor(t, keys, meshconfig.PodConfig{
				Namespace: "other", Pod: "spy",
				Default:       meshconfig.TopicPolicy{Subject: ">", MaxMessageBytes: 1024, MayPublish: true},
				Subscriptions: []meshconfig.SubscriptionPolicy{{Name: "orders", Subject: "orders.>"}},
				Access:        meshconfig.Access{Mode: meshconfig.AccessEnforce},
			}))
			if prov.name == "looked up" && lookups() < 2 {
				t.Errorf("the broker looked up %d accounts, want both namespaces'", lookups())
			}

			t.Run("subscribe", func(t *testing.T) {
				sentinel := leaked.cred.InboxPrefix + ".sentinel"
				for _, tc := range []struct {
					name, pattern, published string
				}{
					{"every subject", ">", "payments.charged"},
					{"every inbox", "_INBOX.>", payments.cred.InboxPrefix + ".reply"},
					{"every inbox, one token", "_INBOX.*", "_INBOX.x"},
					{"another pod's inboxes", payments.cred.InboxPrefix + ".>", payments.cred.InboxPrefix + ".reply"},
					{"a subject no Subscription of its pod names", "payments.>", "payments.charged"},
					{"JetStream's API", "$JS.API.>", "$JS.API.STREAM.INFO.orders"},
				} {
					t.Run(tc.name, func(t *testing.T) {
						got := chanSubscribe(t, leaked.nc, tc.pattern, sentinel)
						leaked.waitError(t, "subscribing to "+tc.pattern, violation("subscription", tc.pattern)...)
						publish(t, payments.nc, tc.published, "", []byte("secret"))
						publish(t, payments.nc, sentinel, "", []byte("sentinel"))
						if m := firstMessage(t, "the sentinel", got); m.Subject != sentinel {
							t.Fatalf("the leaked credential received %s on %s", m.Data, m.Subject)
						}
					})
				}
			})

			t.Run("another namespace", func(t *testing.T) {
				// Both namespaces subscribe to orders.>; shop's order
				// reaches shop's subscriber, and other's never.
				spyGot := chanSubscribe(t, spy.nc, "orders.>", spy.cred.InboxPrefix+".sentinel")
				paymentsGot := chanSubscribe(t, payments.nc, "orders.>")
				publish(t, leaked.nc, "orders.created", "", []byte("shop's order"))
				if m := firstMessage(t, "shop's own subscriber", paymentsGot); m.Subject != "orders.created" {
					t.Fatalf("shop's subscriber got %s", m.Subject)
				}
				publish(t, spy.nc, spy.cred.InboxPrefix+".sentinel", "", []byte("sentinel"))
				if m := firstMessage(t, "the sentinel", spyGot); m.Subject != spy.cred.InboxPrefix+".sentinel" {
					t.Fatalf("namespace other received %q on %s, published in shop", m.Data, m.Subject)
				}
			})

			t.Run("publish", func(t *testing.T) {
				for _, tc := range []struct{ name, subject string }{
					{"a Topic whose publishers exclude its pod", "payments.charged"},
					{"JetStream's API", "$JS.API.STREAM.DELETE.orders"},
				} {
					t.Run(tc.name, func(t *testing.T) {
						got := chanSubscribe(t, payments.nc, tc.subject, "orders.sentinel")
						publish(t, leaked.nc, tc.subject, "", []byte("forged"))
						leaked.waitError(t, "publishing to "+tc.subject, violation("publish", tc.subject)...)
						publish(t, leaked.nc, "orders.sentinel", "", []byte("sentinel"))
						if m := firstMessage(t, "the sentinel", got); m.Subject != "orders.sentinel" {
							t.Fatalf("the leaked credential published %q to %s", m.Data, m.Subject)
						}
					})
				}
			})

			t.Run("payload", func(t *testing.T) {
				// The bound's payload is the largest Topic's size and the
				// room for the sidecar's headers. nats.go learns it from
				// the broker and refuses more itself; the broker closes a
				// connection that publishes more, which a raw client shows.
				cred := issueFor(t, keys, shopPolicy("orders-1"))
				limit := int(shopPolicy("orders-1").Topics[0].MaxMessageBytes) + meshconfig.ReservedHeaderRoom
				client := dial(t, url, cred)
				natstest.WaitFor(t, "nats.go learned the bound's payload", func() bool { return client.nc.MaxPayload() == int64(limit) })
				if err := client.nc.Publish("orders.big", make([]byte, limit+1)); !errors.Is(err, nats.ErrMaxPayload) {
					t.Errorf("nats.go published %d bytes over a bound of %d: %v", limit+1, limit, err)
				}
				got := chanSubscribe(t, payments.nc, "orders.big")
				raw := dialRaw(t, url, cred)
				raw.publish(t, "orders.big", limit)
				if line := raw.line(t); line != "PONG" {
					t.Fatalf("a message of the bound's size: the broker answered %q", line)
				}
				if m := firstMessage(t, "a message of the bound's size", got); len(m.Data) != limit {
					t.Fatalf("got %d bytes, want %d", len(m.Data), limit)
				}
				raw.publish(t, "orders.big", limit+1)
				if line := raw.line(t); !strings.Contains(strings.ToLower(line), "maximum payload violation") {
					t.Fatalf("a message over the bound: the broker answered %q, want a maximum payload violation", line)
				}
				raw.waitEOF(t, "a message over the bound")
			})

			t.Run("replies", func(t *testing.T) {
				// The responder may publish nothing of its own: a Topic
				// ">" excludes it. It answers requests on svc.echo.
				responder := dial(t, url, issueFor(t, keys, meshconfig.PodConfig{
					Namespace: "shop", Pod: "responder",
					Topics:        []meshconfig.TopicPolicy{{Name: "all", Subject: ">", MaxMessageBytes: 1024}},
					Default:       meshconfig.TopicPolicy{Subject: ">", MaxMessageBytes: 1024, MayPublish: true},
					Subscriptions: []meshconfig.SubscriptionPolicy{{Name: "echo", Subject: "svc.echo"}},
					Access:        meshconfig.Access{Mode: meshconfig.AccessEnforce},
				}))
				requests, err := responder.nc.SubscribeSync("svc.echo")
				if err != nil {
					t.Fatal(err)
				}
				if err := responder.nc.FlushTimeout(waitTimeout); err != nil {
					t.Fatal(err)
				}
				r1, r2 := payments.cred.InboxPrefix+".r1", payments.cred.InboxPrefix+".r2"
				replies := chanSubscribe(t, payments.nc, r1, r2)

				unsolicited := payments.cred.InboxPrefix + ".unsolicited"
				publish(t, responder.nc, unsolicited, "", []byte("forged"))
				responder.waitError(t, "a reply to no request", violation("publish", unsolicited)...)

				publish(t, payments.nc, "svc.echo", r1, []byte("1"))
				m, err := requests.NextMsg(waitTimeout)
				if err != nil {
					t.Fatal(err)
				}
				publish(t, responder.nc, m.Reply, "", []byte("reply 1"))
				publish(t, responder.nc, m.Reply, "", []byte("reply 1 again"))
				responder.waitError(t, "a second reply to one request", violation("publish", r1)...)
				publish(t, payments.nc, "svc.echo", r2, []byte("2"))
				if m, err = requests.NextMsg(waitTimeout); err != nil {
					t.Fatal(err)
				}
				publish(t, responder.nc, m.Reply, "", []byte("reply 2"))
				for _, want := range []string{"reply 1", "reply 2"} {
					if m := firstMessage(t, want, replies); string(m.Data) != want {
						t.Fatalf("the requester got %q, want %q", m.Data, want)
					}
				}
			})
		})
	}
}

// A credential past its expiry is closed by the broker and refused;
// another pod's carries on.
func TestAnExpiredCredentialIsClosedAndRefused(t *testing.T) {
	keys := mustKeys(t)
	url, _ := provisions[0].start(t, keys, "shop")
	cfg := shopPolicy("short")
	user, err := keys.UserKey("uid-short")
	if err != nil {
		t.Fatal(err)
	}
	bound := meshconfig.BrokerBoundOf(cfg, InboxPrefix(publicKey(user)), nil)
	issued := time.Now()
	short, err := keys.Issue("shop", "short", "uid-short", bound, issued, 2*time.Second, DefaultAccountSettings.UserMaxSubscriptions)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := jwt.DecodeUserClaims(short.JWT)
	if err != nil {
		t.Fatal(err)
	}
	if claims.Expires != short.Expires.Unix() || !short.Expires.After(issued) || short.Expires.After(issued.Add(2*time.Second)) {
		t.Fatalf("issued at %s for 2s: expires %s, JWT exp %d", issued, short.Expires, claims.Expires)
	}
	p := dial(t, url, short)
	long := dial(t, url, issueFor(t, keys, shopPolicy("long")))
	p.waitClosed(t, "an expired credential")
	p.waitError(t, "the reason the broker gave", "expired")
	// nats-server times the close in whole seconds from its clock's
	// second: up to one early.
	if time.Now().Before(short.Expires.Add(-time.Second)) {
		t.Errorf("closed at %s, more than a second before the credential's expiry %s", time.Now(), short.Expires)
	}
	// nats-server accepts a JWT until the second after its expiry (and
	// closes it at once): retry until it refuses, for at most 5 s.
	deadline := time.Now().Add(5 * time.Second)
	for {
		nc, err := connectWith(url, short)
		if isAuthorizationViolation(err) {
			break
		}
		if nc != nil {
			nc.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("an expired credential 5s past its expiry: %v, want an authorization violation", err)
		}
	}
	got := chanSubscribe(t, long.nc, long.cred.InboxPrefix+".still")
	publish(t, long.nc, long.cred.InboxPrefix+".still", "", []byte("x"))
	firstMessage(t, "the credential that did not expire", got)
}

// rawConn speaks the NATS protocol itself, as a hostile client with a
// leaked credential may: it sends what nats.go would refuse to.
type rawConn struct {
	conn      net.Conn
	r         *bufio.Reader
	connected bool // past the INFO that opens the connection
}

// dialRaw connects with cred: it signs the broker's nonce with the seed
// and waits for the PONG that follows a successful CONNECT.
func dialRaw(t *testing.T, url string, cred Credential) *rawConn {
	t.Helper()
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(waitTimeout))
	c := &rawConn{conn: conn, r: bufio.NewReader(conn)}
	var info struct {
		Nonce string `json:"nonce"`
	}
	line := c.line(t)
	c.connected = true
	if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "INFO ")), &info); err != nil {
		t.Fatalf("the broker's INFO %q: %v", line, err)
	}
	kp, err := nkeys.FromSeed(cred.Seed)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := kp.Sign([]byte(info.Nonce))
	if err != nil {
		t.Fatal(err)
	}
	connect, _ := json.Marshal(map[string]any{"jwt": cred.JWT, "sig": base64.RawURLEncoding.EncodeToString(sig), "verbose": false, "pedantic": false, "protocol": 1, "headers": true})
	if _, err := fmt.Fprintf(conn, "CONNECT %s\r\nPING\r\n", connect); err != nil {
		t.Fatal(err)
	}
	if line := c.line(t); line != "PONG" {
		t.Fatalf("connecting: the broker answered %q", line)
	}
	return c
}

// line reads one protocol line, passing over the broker's PINGs and the
// INFO that follows CONNECT.
func (c *rawConn) line(t *testing.T) string {
	t.Helper()
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading from the broker: %v", err)
		}
		line = strings.TrimRight(line, "\r\n")
		if strings.HasPrefix(line, "INFO ") && c.connected {
			continue
		}
		if line != "PING" {
			return line
		}
		if _, err := c.conn.Write([]byte("PONG\r\n")); err != nil {
			t.Fatal(err)
		}
	}
}

// publish sends a message of size bytes to subject, and a PING.
func (c *rawConn) publish(t *testing.T, subject string, size int) {
	t.Helper()
	msg := fmt.Appendf(nil, "PUB %s %d\r\n", subject, size)
	msg = append(append(msg, make([]byte, size)...), "\r\nPING\r\n"...)
	if _, err := c.conn.Write(msg); err != nil {
		t.Fatal(err)
	}
}

// waitEOF waits for the broker to close the connection.
func (c *rawConn) waitEOF(t *testing.T, what string) {
	t.Helper()
	for {
		line, err := c.r.ReadString('\n')
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("%s: the broker did not close the connection: %v", what, err)
		}
		if line = strings.TrimSpace(line); line != "PING" && line != "" && !strings.HasPrefix(line, "INFO ") {
			t.Fatalf("%s: the broker sent %q before closing", what, line)
		}
	}
}

// listReader reads through a fake client, which implements no field
// selector other than equality: the Keeper's list of running pods is
// answered with every pod of the namespace (the tests' pods run).
type listReader struct{ client.Client }

func (r listReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	var o client.ListOptions
	o.ApplyOptions(opts)
	return r.Client.List(ctx, list, client.InNamespace(o.Namespace))
}

// startKeeper runs a Keeper with keys against a fake apiserver that holds
// pods, pushing to url, until the test ends.
func startKeeper(t *testing.T, keys Keys, url string, pods ...*corev1.Pod) (*Keeper, client.Client) {
	t.Helper()
	data, err := keys.SecretData()
	if err != nil {
		t.Fatal(err)
	}
	objs := []client.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "weighstation-system", Name: KeysSecretName}, Data: data}}
	for _, p := range pods {
		objs = append(objs, p)
	}
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(objs...).Build()
	k := &Keeper{
		Reader: listReader{c}, Writer: c, Namespace: "weighstation-system", BrokerURL: url,
		Limits: Limits{Lifetime: time.Hour, MaxEntries: 100}, PushInterval: time.Hour,
		Metrics: NewMetrics(nil), Log: testr.New(t),
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the Keeper: %v", err)
		}
	})
	return k, c
}

// keeperIssue asks k for the credential of shop/pod, as the Service does
// for a pod created after the Keeper started.
func keeperIssue(t *testing.T, k *Keeper, pod string, renewal bool) Credential {
	t.Helper()
	keys, ok := k.Keys()
	if !ok {
		natstest.WaitFor(t, "the Keeper read its keys", func() bool { _, ok = k.Keys(); return ok })
		keys, _ = k.Keys()
	}
	user, err := keys.UserKey("uid-" + pod)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, err := k.Issue(ctx, "shop", pod, "uid-"+pod, time.Now().Add(time.Hour), meshconfig.BrokerBoundOf(shopPolicy(pod), InboxPrefix(publicKey(user)), nil), renewal)
	if err != nil {
		t.Fatalf("issuing the credential of %s: %v", pod, err)
	}
	return c
}

func podObject(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID("uid-" + name)}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
}

// revokedIn reads the trust ConfigMap's revocation of shop/pod.
func revokedIn(t *testing.T, c client.Client, keys Keys, pod string) (time.Time, bool) {
	t.Helper()
	var cm corev1.ConfigMap
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "weighstation-system", Name: TrustConfigMapName}, &cm); err != nil {
		t.Fatal(err)
	}
	revoked, err := ParseRevocations(cm.Data[TrustRevocationsKey])
	if err != nil {
		t.Fatal(err)
	}
	user, _ := keys.UserKey("uid-" + pod)
	at, ok := revoked["shop"][publicKey(user)]
	return at, ok
}

// The Keeper revokes a pod's credential when the pod leaves its cache
// (deleted, or its label removed while it runs) and when its sidecar is
// replaced: the broker closes that connection and refuses the
// credential, while another pod's connection carries on.
func TestTheKeeperRevokes(t *testing.T) {
	for _, tc := range []struct {
		name string
		// running: the pod is still in the API (it left the mesh).
		running bool
		// replaced: a new sidecar asks instead of the pod leaving.
		replaced bool
	}{
		{name: "pod deleted"},
		{name: "label removed", running: true},
		{name: "sidecar replaced", replaced: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := mustKeys(t)
			url := startBroker(t, keys)
			var pods []*corev1.Pod
			if tc.running {
				pods = append(pods, podObject("doomed"))
			}
			k, c := startKeeper(t, keys, url, pods...)
			doomedCred := keeperIssue(t, k, "doomed", false)
			doomed := dial(t, url, doomedCred)
			bystander := dial(t, url, keeperIssue(t, k, "bystander", false))
			// A renewal revokes nothing.
			renewed := keeperIssue(t, k, "bystander", true)
			renewedConn := dial(t, url, renewed)

			before := time.Now()
			var replacement Credential
			if tc.replaced {
				replacement = keeperIssue(t, k, "doomed", false)
			} else {
				k.podLeft(&metav1.PartialObjectMetadata{ObjectMeta: podObject("doomed").ObjectMeta})
			}
			doomed.waitClosed(t, "the revoked pod's connection")
			doomed.waitError(t, "the reason the broker gave", "revoked")
			if _, err := connectWith(url, doomedCred); !isAuthorizationViolation(err) {
				t.Errorf("the revoked credential: %v, want an authorization violation", err)
			}
			at, ok := revokedIn(t, c, keys, "doomed")
			switch {
			case !ok:
				t.Error("the trust ConfigMap has no revocation of the pod")
			case tc.replaced || tc.running:
				// From now: the pod runs, and a credential issued to it
				// later (its new sidecar's) is valid.
				if at.Before(before.Truncate(time.Second)) || at.After(time.Now()) {
					t.Errorf("revoked at %s, want the time of the revocation (%s)", at, before)
				}
			default:
				if at.Before(before.Add(RevocationMargin).Truncate(time.Second)) {
					t.Errorf("revoked at %s, want RevocationMargin past the deletion (%s)", at, before.Add(RevocationMargin))
				}
			}
			for name, p := range map[string]*peer{"another pod": bystander, "a renewed credential": renewedConn} {
				subject := p.cred.InboxPrefix + ".still"
				got := chanSubscribe(t, p.nc, subject)
				publish(t, p.nc, subject, "", []byte("x"))
				firstMessage(t, name+" carries on", got)
			}
			switch {
			case tc.replaced:
				// The new sidecar's credential, dated after the
				// revocation's second, is valid.
				if replacement.PublicKey != doomedCred.PublicKey {
					t.Fatal("the replacement has another user key")
				}
				nc, err := connectWith(url, replacement)
				if err != nil {
					t.Fatalf("the replacing sidecar's credential: %v", err)
				}
				nc.Close()
			case !tc.running:
				// A credential issued for the deleted pod afterwards (a
				// request that raced the deletion) falls within
				// RevocationMargin.
				again := keeperIssue(t, k, "doomed", false)
				if _, err := connectWith(url, again); !isAuthorizationViolation(err) {
					t.Errorf("a credential reissued to a deleted pod: %v, want an authorization violation", err)
				}
			}
		})
	}
}

// The Keeper answers a broker's lookup of an account it signed, so that
// a broker that restarted (or never got the push) admits the namespace's
// sidecars.
func TestTheKeeperAnswersLookups(t *testing.T) {
	keys := mustKeys(t)
	pushedTo := startBroker(t, keys)
	k, _ := startKeeper(t, keys, pushedTo)
	cred := keeperIssue(t, k, "p", false) // signs and pushes shop's account
	pub, err := keys.AccountKey("shop")
	if err != nil {
		t.Fatal(err)
	}
	token, ok := k.Lookup(publicKey(pub))
	if !ok {
		t.Fatal("the Keeper does not know the account it pushed")
	}
	if claims, err := jwt.DecodeAccountClaims(token); err != nil || claims.Name != "shop" || claims.Issuer != publicKey(keys.Operator) {
		t.Fatalf("the looked-up account: %+v, %v", claims, err)
	}
	other, _ := keys.AccountKey("unseen")
	if _, ok := k.Lookup(publicKey(other)); ok {
		t.Error("the Keeper answered the lookup of a namespace it never saw")
	}
	// A second broker that was pushed nothing, the Keeper's the lookup
	// answers.
	fresh := startBroker(t, keys)
	dialPusher(t, fresh, keys, k)
	nc, err := connectWith(fresh, cred)
	if err != nil {
		t.Fatalf("a broker that never got the push: %v", err)
	}
	nc.Close()
	// A namespace nobody signed: the broker's lookup gets no answer and
	// it refuses the credential.
	stranger, err := keys.Issue("unseen", "p", "uid-stranger", meshconfig.BrokerBound{PublishAllow: []string{">"}, SubscribeAllow: []string{"x"}, MaxPayload: 1}, time.Now(), time.Hour, DefaultAccountSettings.UserMaxSubscriptions)
	if err != nil {
		t.Fatal(err)
	}
	// The refusal comes when the lookup gives up (broker.AccountFetchTimeout,
	// 2 s), which races nats-server's first PING to a client (2 to 2.4 s):
	// on a busy machine the PING comes first and nats.go ends the handshake
	// itself. Either way the credential is not admitted.
	_, err = connectWith(fresh, stranger, nats.Timeout(2*broker.AccountFetchTimeout))
	if !isAuthorizationViolation(err) && (err == nil || !strings.Contains(err.Error(), "expected 'PONG', got 'PING'")) {
		t.Errorf("a credential of an account nobody signed: %v, want an authorization violation", err)
	}
}

// isRefused is nats-server's decision for a credential of user issued at
// issuedAt, under a namespace's revocation list.
func isRefused(list map[string]time.Time, user string, issuedAt time.Time) bool {
	acc := jwt.NewAccountClaims("A")
	for u, at := range list {
		acc.RevokeAt(u, at)
	}
	return acc.IsClaimRevoked(&jwt.UserClaims{ClaimsData: jwt.ClaimsData{Subject: user, IssuedAt: issuedAt.Unix()}})
}

func TestRevocationsAreBoundedByRetentionAndCount(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	l := Limits{Lifetime: time.Hour, MaxEntries: 3}
	past := func(d time.Duration) time.Time { return now.Add(-d) }
	tests := []struct {
		name       string
		revoked    Revocations
		batch      []revocation
		want       Revocations
		wantFolded int
	}{{
		name:    "retention",
		revoked: Revocations{"a": {"expired": past(l.Retention() + time.Second), "edge": past(l.Retention()), jwt.All: past(l.Retention() + time.Second)}},
		batch:   []revocation{{"a", "new", now}},
		want:    Revocations{"a": {"edge": past(l.Retention()), "new": now}},
	}, {
		name:    "a namespace whose entries all expired goes",
		revoked: Revocations{"gone": {"x": past(2 * l.Retention())}},
		batch:   []revocation{{"a", "new", now}},
		want:    Revocations{"a": {"new": now}},
	}, {
		name:    "a later time wins, an earlier does not",
		revoked: Revocations{"a": {"k": past(time.Minute), "j": past(time.Minute)}},
		batch:   []revocation{{"a", "k", now}, {"a", "j", past(time.Hour)}},
		want:    Revocations{"a": {"k": now, "j": past(time.Minute)}},
	}, {
		// Four entries for three places: the oldest folds into its
		// namespace's jwt.All at its time, which takes every entry at
		// or before it along; the other namespace keeps its own.
		name:       "past MaxEntries the oldest fold",
		revoked:    Revocations{"a": {"old": past(30 * time.Minute), "older-tie": past(30 * time.Minute), "newer": past(time.Minute)}},
		batch:      []revocation{{"a", "new", now}},
		want:       Revocations{"a": {jwt.All: past(30 * time.Minute), "newer": past(time.Minute), "new": now}},
		wantFolded: 2,
	}, {
		// A jwt.All already there takes the later time.
		name:       "a later fold moves jwt.All on",
		revoked:    Revocations{"a": {jwt.All: past(time.Hour), "old": past(30 * time.Minute), "newer": past(time.Minute)}},
		batch:      []revocation{{"a", "new", now}},
		want:       Revocations{"a": {jwt.All: past(30 * time.Minute), "newer": past(time.Minute), "new": now}},
		wantFolded: 1,
	}, {
		// A deletion's entry reaches into the future; folded, its
		// jwt.All stops a second ago, so that the namespace's
		// sidecars can renew.
		name:       "a folded future entry stops at now",
		revoked:    Revocations{"a": {"deleted0": now.Add(RevocationMargin), "deleted1": now.Add(RevocationMargin)}},
		batch:      []revocation{{"a", "deleted2", now.Add(RevocationMargin)}, {"a", "deleted3", now.Add(RevocationMargin + time.Second)}},
		want:       Revocations{"a": {jwt.All: past(time.Second), "deleted2": now.Add(RevocationMargin), "deleted3": now.Add(RevocationMargin + time.Second)}},
		wantFolded: 2,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.revoked.Clone()
			got, folded, err := l.revoke(tt.revoked, tt.batch, now)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(tt.want) || folded != tt.wantFolded {
				t.Errorf("got %v (%d folded), want %v (%d folded)", got, folded, tt.want, tt.wantFolded)
			}
			if !tt.revoked.Equal(before) {
				t.Error("revoke changed the lists it was given")
			}
		})
	}
	if _, _, err := l.revoke(Revocations{}, nil, now); !errors.Is(err, errNothingToRevoke) {
		t.Errorf("an empty batch: %v", err)
	}
	for _, bad := range []Limits{{Lifetime: MinLifetime - time.Second, MaxEntries: 1}, {Lifetime: time.Hour, MaxEntries: 0}, {Lifetime: time.Hour, MaxEntries: MaxEntriesLimit + 1}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v was accepted", bad)
		}
	}
	if err := DefaultLimits.Validate(); err != nil {
		t.Error(err)
	}
}

// Folding never gives a revoked key back while a credential it refused
// may be valid: under random batches across namespaces, far more than
// MaxEntries, every revoked key's credentials issued at or before its
// revocation stay refused until Retention has passed (for a future-dated
// entry, folded, those issued up to a second before its revocation was
// made), and the lists never hold more than MaxEntries plus one jwt.All
// per namespace.
func TestFoldingNeverDropsAStillValidRevocation(t *testing.T) {
	namespaces := []string{"a", "b", "c"}
	type made struct {
		namespace, user string
		at, madeAt      time.Time
	}
	// Lists that fold at every step, and lists that retention alone
	// keeps short.
	for _, maxEntries := range []int{8, 1000} {
		l := Limits{Lifetime: 10 * time.Minute, MaxEntries: maxEntries}
		for seed := range uint64(10) {
			t.Run(fmt.Sprintf("max %d seed %d", maxEntries, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 1))
				now := time.Unix(2_000_000, 0)
				revoked := Revocations{}
				var all []made
				for step := range 300 {
					now = now.Add(time.Duration(rng.IntN(20)) * time.Second)
					var batch []revocation
					for range 1 + rng.IntN(3) {
						r := revocation{namespace: namespaces[rng.IntN(len(namespaces))], user: fmt.Sprintf("U%d", rng.IntN(40))}
						switch rng.IntN(3) {
						case 0: // a deletion: into the future
							r.at = now.Add(RevocationMargin)
						case 1: // a label removed, a sidecar replaced
							r.at = now
						default: // a replica whose clock is behind
							r.at = now.Add(-time.Duration(rng.IntN(30)) * time.Second)
						}
						batch = append(batch, r)
						all = append(all, made{r.namespace, r.user, r.at, now})
					}
					var err error
					if revoked, _, err = l.revoke(revoked, batch, now); err != nil {
						t.Fatal(err)
					}
					if n := revoked.Len(); n > l.MaxEntries+len(namespaces) {
						t.Fatalf("step %d: %d entries, more than MaxEntries %d and a jwt.All per namespace", step, n, l.MaxEntries)
					}
					for _, m := range all {
						latest := m.at
						if limit := m.madeAt.Add(-time.Second).Truncate(time.Second); latest.After(limit) {
							latest = limit
						}
						if now.Sub(latest) > l.Lifetime {
							continue // every credential it refused has expired
						}
						if !isRefused(revoked[m.namespace], m.user, latest) {
							t.Fatalf("step %d: %s/%s revoked at %s (made at %s) accepts a credential issued at %s; lists %v",
								step, m.namespace, m.user, m.at, m.madeAt, latest, revoked[m.namespace])
						}
					}
					for ns, list := range revoked {
						for user, at := range list {
							if now.Sub(at) > l.Retention() {
								t.Fatalf("step %d: %s/%s revoked at %s is kept past its retention (now %s)", step, ns, user, at, now)
							}
						}
					}
				}
			})
		}
	}
}

// The largest revocation lists the limits allow fit: all of them in the
// trust ConfigMap's 1 MiB, and one namespace's account JWT in one message
// to the brokers (which take it, pushed).
func TestTheLargestRevocationListFits(t *testing.T) {
	keys := mustKeys(t)
	now := time.Now()
	user := func(i int) string {
		kp, err := keys.UserKey(fmt.Sprintf("00000000-0000-0000-0000-%012d", i))
		if err != nil {
			t.Fatal(err)
		}
		return publicKey(kp)
	}
	across := Revocations{}
	one := map[string]time.Time{}
	for i := range MaxEntriesLimit {
		ns := fmt.Sprintf("namespace-with-a-long-name-%02d", i%50)
		if across[ns] == nil {
			across[ns] = map[string]time.Time{}
		}
		key, at := user(i), now.Add(time.Duration(i)*time.Second)
		across[ns][key] = at
		one[key] = at
	}
	trust, err := keys.Trust()
	if err != nil {
		t.Fatal(err)
	}
	data, err := trust.ConfigMapData(across)
	if err != nil {
		t.Fatal(err)
	}
	size := 0
	for k, v := range data {
		size += len(k) + len(v)
	}
	if size >= 1<<20 {
		t.Errorf("%d revocations over %d namespaces: the ConfigMap's data is %d bytes, over 1 MiB", MaxEntriesLimit, len(across), size)
	}
	pub, token, err := keys.AccountJWT("namespace-with-a-long-name-00", one, DefaultAccountSettings, Sharing{})
	if err != nil {
		t.Fatal(err)
	}
	if len(token) >= int(broker.DefaultOptions.MaxPayload) {
		t.Fatalf("%d revocations in one namespace: its account JWT is %d bytes, over the broker's max_payload %d", MaxEntriesLimit, len(token), broker.DefaultOptions.MaxPayload)
	}
	t.Logf("%d revocations: ConfigMap %d bytes; one namespace's account JWT %d bytes", MaxEntriesLimit, size, len(token))
	p := dialPusher(t, startBroker(t, keys), keys, &source{})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := p.Push(ctx, pub, token); err != nil {
		t.Fatalf("the broker refused the largest account JWT: %v", err)
	}
}

func TestKeysRoundTripThroughTheSecret(t *testing.T) {
	keys := mustKeys(t)
	data, err := keys.SecretData()
	if err != nil {
		t.Fatal(err)
	}
	// A Secret an earlier version wrote also holds the shared account's
	// seed, which is ignored.
	oldAccount, _ := nkeys.CreateAccount()
	oldSeed, _ := oldAccount.Seed()
	data["account.nk"] = oldSeed
	parsed, ok, err := ParseKeys(data)
	if err != nil || !ok {
		t.Fatalf("ParseKeys: %v, %v", ok, err)
	}
	for _, ns := range []string{"shop", "other"} {
		want, _ := keys.AccountKey(ns)
		got, _ := parsed.AccountKey(ns)
		if publicKey(want) != publicKey(got) {
			t.Errorf("the account of %s differs once read back from the Secret", ns)
		}
	}
	wantUser, _ := keys.UserKey("uid")
	gotUser, _ := parsed.UserKey("uid")
	if publicKey(wantUser) != publicKey(gotUser) || publicKey(parsed.Operator) != publicKey(keys.Operator) || publicKey(parsed.System) != publicKey(keys.System) {
		t.Error("the keys read back from the Secret differ from those written")
	}

	tests := []struct {
		name   string
		mutate func(map[string][]byte)
		want   string // "" for no keys and no error
	}{
		{"empty", func(d map[string][]byte) { clear(d) }, ""},
		{"only the old account", func(d map[string][]byte) { clear(d); d["account.nk"] = oldSeed }, ""},
		{"one missing", func(d map[string][]byte) { delete(d, SecretSystemAccountKey) }, "but not all"},
		{"an account seed where the operator's goes", func(d map[string][]byte) { d[SecretOperatorKey] = d[SecretSystemAccountKey] }, "not a seed of kind"},
		{"garbage seed", func(d map[string][]byte) { d[SecretSystemAccountKey] = []byte("SAnotaseed") }, SecretSystemAccountKey},
		{"short user key secret", func(d map[string][]byte) { d[SecretUserKeySecret] = []byte("short") }, "must be 32 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, _ := keys.SecretData()
			tt.mutate(d)
			_, ok, err := ParseKeys(d)
			if tt.want == "" {
				if err != nil || ok {
					t.Fatalf("got %v, %v; want no keys and no error", ok, err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalidSecret) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want ErrInvalidSecret mentioning %q", err, tt.want)
			}
		})
	}
}

// Account keys are one per namespace, the same at every derivation (a new
// leader signs the same accounts), and distinct across namespaces and
// operators; user keys likewise per pod.
func TestDerivedKeysAreStableAndDistinct(t *testing.T) {
	keys, otherOperator := mustKeys(t), mustKeys(t)
	derive := []struct {
		name   string
		derive func(Keys, string) (nkeys.KeyPair, error)
		prefix string
	}{{"account", Keys.AccountKey, "A"}, {"user", Keys.UserKey, "U"}}
	for _, d := range derive {
		t.Run(d.name, func(t *testing.T) {
			key := func(k Keys, s string) string {
				kp, err := d.derive(k, s)
				if err != nil {
					t.Fatal(err)
				}
				return publicKey(kp)
			}
			a := key(keys, "shop")
			if !strings.HasPrefix(a, d.prefix) {
				t.Errorf("%s key %s is not of kind %s", d.name, a, d.prefix)
			}
			if a != key(keys, "shop") {
				t.Error("two derivations differ")
			}
			if a == key(keys, "shop2") || a == key(otherOperator, "shop") {
				t.Error("two names, or two operators, derived the same key")
			}
			if _, err := d.derive(keys, ""); err == nil {
				t.Error("a key was derived for an empty name")
			}
		})
	}
	// A pod's user key and its namespace's account key never coincide,
	// nor do the account key of namespace X and the user key of a pod
	// with UID X.
	acc, _ := keys.AccountKey("x")
	usr, _ := keys.UserKey("x")
	accRaw, _ := acc.Seed()
	usrRaw, _ := usr.Seed()
	_, accBytes, _ := nkeys.DecodeSeed(accRaw)
	_, usrBytes, _ := nkeys.DecodeSeed(usrRaw)
	if slices.Equal(accBytes, usrBytes) {
		t.Error("namespace x's account and pod x's user share a seed")
	}
}

// Issue's credential is what the brokers and the sidecar read: a user of
// its namespace's account, with the bound's permissions, one reply per
// request received, the bound's payload, an expiry, and an inbox prefix
// that only its key yields.
func TestIssuedCredential(t *testing.T) {
	keys := mustKeys(t)
	cfg := shopPolicy("orders-0", "orders.>")
	user, _ := keys.UserKey("uid-1")
	bound := meshconfig.BrokerBoundOf(cfg, InboxPrefix(publicKey(user)), nil)
	now := time.Now()
	c, err := keys.Issue("shop", "orders-0", "uid-1", bound, now, 10*time.Minute, DefaultAccountSettings.UserMaxSubscriptions)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := jwt.DecodeUserClaims(c.JWT)
	if err != nil {
		t.Fatal(err)
	}
	account, _ := keys.AccountKey("shop")
	switch {
	case claims.Subject != c.PublicKey || c.PublicKey != publicKey(user):
		t.Errorf("subject %s, credential key %s, want the pod's %s", claims.Subject, c.PublicKey, publicKey(user))
	case claims.Issuer != publicKey(account):
		t.Errorf("issued by %s, want shop's account", claims.Issuer)
	case claims.Name != "shop/orders-0" || claims.BearerToken:
		t.Errorf("name %q, bearer %v", claims.Name, claims.BearerToken)
	case claims.Expires != now.Add(10*time.Minute).Unix() || !c.Expires.Equal(time.Unix(claims.Expires, 0)):
		t.Errorf("expires %d (%s), want %s", claims.Expires, c.Expires, now.Add(10*time.Minute))
	case !slices.Equal(claims.Pub.Allow, bound.PublishAllow) || !slices.Equal(claims.Pub.Deny, bound.PublishDeny) || !slices.Equal(claims.Sub.Allow, bound.SubscribeAllow):
		t.Errorf("permissions %+v, want the bound %+v", claims.Permissions, bound)
	case claims.Resp == nil || claims.Resp.MaxMsgs != 1 || claims.Resp.Expires != ResponseWindow:
		t.Errorf("response permission %+v, want one reply within %s", claims.Resp, ResponseWindow)
	case claims.Limits.Payload != bound.MaxPayload:
		t.Errorf("payload limit %d, want %d", claims.Limits.Payload, bound.MaxPayload)
	case c.InboxPrefix != InboxPrefix(c.PublicKey) || !slices.Contains(claims.Sub.Allow, c.InboxPrefix+".>"):
		t.Errorf("inbox prefix %q, subscribe allow %q", c.InboxPrefix, claims.Sub.Allow)
	}
	other, _ := keys.UserKey("uid-2")
	if InboxPrefix(publicKey(other)) == c.InboxPrefix {
		t.Error("two pods share an inbox prefix")
	}
	if toks := strings.Split(c.InboxPrefix, "."); len(toks) != 2 || toks[0] != "_INBOX" || strings.ContainsAny(toks[1], "*> ") {
		t.Errorf("inbox prefix %q is not _INBOX and one literal token", c.InboxPrefix)
	}
	if _, err := keys.Issue("shop", "p", "", bound, now, time.Minute, DefaultAccountSettings.UserMaxSubscriptions); err == nil {
		t.Error("a credential was issued for an empty UID")
	}
}

func TestTrustMatchesOnlyItsKeysAndRevocationsRoundTrip(t *testing.T) {
	keys := mustKeys(t)
	trust, err := keys.Trust()
	if err != nil {
		t.Fatal(err)
	}
	if !keys.Matches(trust) {
		t.Error("a trust does not match the keys it was signed with")
	}
	if mustKeys(t).Matches(trust) {
		t.Error("a trust matches another operator's keys")
	}
	revoked := Revocations{"shop": {"UABC": time.Unix(1000, 0), jwt.All: time.Unix(900, 0)}, "other": {"UDEF": time.Unix(2000, 0)}}
	data, err := trust.ConfigMapData(revoked)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseRevocations(data[TrustRevocationsKey])
	if err != nil || !back.Equal(revoked) {
		t.Errorf("the revocation lists read back: %v, %v; want %v", back, err, revoked)
	}
	if empty, err := ParseRevocations(""); err != nil || empty.Len() != 0 {
		t.Errorf("no lists: %v, %v", empty, err)
	}
	if _, err := ParseRevocations("{"); err == nil {
		t.Error("a list that does not parse was read")
	}
}
