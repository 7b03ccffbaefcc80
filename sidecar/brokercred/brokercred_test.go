package brokercred

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/meshconfig"
)

// issuer is an operator that issues credentials with a lifetime and the
// subscriptions it is told to allow, and records the requests.
type issuer struct {
	xdsv1.UnimplementedBrokerCredentialsServer
	t        *testing.T
	account  nkeys.KeyPair
	user     nkeys.KeyPair
	lifetime time.Duration

	mu        sync.Mutex
	subscribe []string
	renewals  []bool // each request's renewal flag
}

func (s *issuer) Issue(_ context.Context, req *xdsv1.IssueBrokerCredentialRequest) (*xdsv1.BrokerCredential, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.renewals = append(s.renewals, req.GetRenewal())
	pub, _ := s.user.PublicKey()
	claims := jwt.NewUserClaims(pub)
	claims.Expires = time.Now().Add(s.lifetime).Unix()
	claims.Pub.Allow.Add(">")
	claims.Sub.Allow.Add(append([]string{"_INBOX.pod.>"}, s.subscribe...)...)
	claims.Limits.Payload = 1 << 20
	token, err := claims.Encode(s.account)
	if err != nil {
		s.t.Error(err)
		return nil, err
	}
	seed, _ := s.user.Seed()
	return &xdsv1.BrokerCredential{UserJwt: token, UserSeed: seed, InboxPrefix: "_INBOX.pod", ExpiresUnix: claims.Expires}, nil
}

func (s *issuer) requests() []bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]bool(nil), s.renewals...)
}

func (s *issuer) allow(subjects ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subscribe = subjects
}

// serve runs s on an in-memory connection and returns a client
// connection to it and a token file.
func serve(t *testing.T, s *issuer) (*grpc.ClientConn, string) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	xdsv1.RegisterBrokerCredentialsServer(srv, s)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("a-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	return conn, token
}

func newIssuer(t *testing.T, lifetime time.Duration) *issuer {
	t.Helper()
	account, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	return &issuer{t: t, account: account, user: user, lifetime: lifetime}
}

// maintain runs h.Maintain until the test ends, counting the switches.
func maintain(t *testing.T, h *Holder, s *issuer) chan struct{} {
	t.Helper()
	conn, token := serve(t, s)
	switched := make(chan struct{}, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = h.Maintain(ctx, conn, token, "uid", func() { switched <- struct{}{} }, testr.New(t))
	}()
	t.Cleanup(func() { cancel(); <-done })
	return switched
}

func waitSwitch(t *testing.T, switched <-chan struct{}, within time.Duration, what string) {
	t.Helper()
	select {
	case <-switched:
	case <-time.After(within):
		t.Fatalf("%s: no renewal within %s", what, within)
	}
}

// The credential is renewed at two thirds of its lifetime, as a renewal,
// and the connection is switched after each; the first request is not a
// renewal (a new sidecar process, whose predecessor's credentials the
// operator revokes).
func TestMaintainRenewsBeforeExpiry(t *testing.T) {
	s := newIssuer(t, 3*time.Second)
	h := New()
	switched := maintain(t, h, s)
	// The JWT's times are whole seconds: two thirds of 3 s is 2 s, less
	// up to a second of truncation.
	waitSwitch(t, switched, 5*time.Second, "the first renewal")
	waitSwitch(t, switched, 5*time.Second, "the second renewal")
	got := s.requests()
	if len(got) < 3 || got[0] || !got[1] || !got[2] {
		t.Fatalf("requests' renewal flags %v, want false then true", got)
	}
	if h.Renewals() < 2 || h.InboxPrefix() != "_INBOX.pod" {
		t.Fatalf("renewals %d, inbox prefix %q", h.Renewals(), h.InboxPrefix())
	}
}

// A configuration that needs a subscription the credential does not allow
// waits for a renewal that allows it; one that needs nothing more applies
// at once; a broker's refusal asks for a renewal, at most one per
// MinRenewInterval.
func TestWideningAndRefusalRenew(t *testing.T) {
	s := newIssuer(t, time.Hour)
	h := New()
	switched := maintain(t, h, s)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := h.UserJWT(); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no credential within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	narrow := meshconfig.PodConfig{Access: meshconfig.Access{Mode: meshconfig.AccessEnforce}, Default: meshconfig.TopicPolicy{MaxMessageBytes: 1024}}
	if !h.Covers(narrow) {
		t.Fatal("a configuration without Subscriptions is not covered by the first credential")
	}
	wide := narrow
	wide.Subscriptions = []meshconfig.SubscriptionPolicy{{Name: "orders", Subject: "orders.>"}}
	if h.Covers(wide) {
		t.Fatal("a credential without orders.> covers a Subscription to it")
	}
	s.allow("orders.>")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !h.WaitCovers(ctx, wide, 10*time.Second) {
		t.Fatal("the widening configuration was not covered after a renewal")
	}
	waitSwitch(t, switched, time.Second, "the widening renewal's switch")
	before := len(s.requests())
	h.Renew("the broker refused the credential")
	h.Renew("again, merged")
	waitSwitch(t, switched, 5*time.Second, "the refusal's renewal")
	// Both asks were answered by that one renewal: none is left to renew
	// again (Maintain takes what waits before it switches).
	if n := len(h.renewNow); n != 0 {
		t.Fatalf("%d renewal asks still pending after the renewal that answered them", n)
	}
	if got := len(s.requests()) - before; got != 1 {
		t.Fatalf("%d credential requests for two asks made together, want 1", got)
	}
}
