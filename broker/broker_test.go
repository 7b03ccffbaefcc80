package broker_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/weighstation/weighstation/broker"
	"github.com/weighstation/weighstation/internal/natstest"
)

func start(t *testing.T, o broker.Options) string { return startServer(t, o).ClientURL() }

// startServer starts a broker and stops it when the test ends.
func startServer(t *testing.T, o broker.Options) *server.Server {
	t.Helper()
	s, err := broker.New(o)
	if err != nil {
		t.Fatal(err)
	}
	s.SetLoggerV2(nil, false, false, false)
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("broker did not start")
	}
	t.Cleanup(s.Shutdown)
	return s
}

func TestOnlyClientsWithTheTokenConnect(t *testing.T) {
	o := broker.DefaultOptions
	o.Listen, o.Token, o.MaxPayload = "127.0.0.1:0", "sidecar-secret", 65536
	url := start(t, o)
	if _, err := nats.Connect(url); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		t.Fatalf("a client without the token: %v, want an authorization violation", err)
	}
	if _, err := nats.Connect(url, nats.Token("wrong")); err == nil {
		t.Fatal("a client with the wrong token connected")
	}
	nc, err := nats.Connect(url, nats.Token("sidecar-secret"))
	if err != nil {
		t.Fatalf("a sidecar with the token: %v", err)
	}
	defer nc.Close()
	if nc.MaxPayload() != 65536 {
		t.Fatalf("max_payload %d, want the configured 65536", nc.MaxPayload())
	}
}

func TestExplicitLimitsAreRequired(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*broker.Options)
		want   string
	}{
		{"no credentials", func(o *broker.Options) { o.Token = "" }, "a token or sidecar nkeys are required"},
		{"token and nkeys", func(o *broker.Options) { o.SidecarNkeys = []string{"UABC"} }, "give one of"},
		{"bad nkey", func(o *broker.Options) { o.Token, o.SidecarNkeys = "", []string{"not-a-key"} }, "not a public user nkey"},
		{"pending below payload", func(o *broker.Options) { o.MaxPending = 10 }, "max_pending at least max_payload"},
		{"no connections", func(o *broker.Options) { o.MaxConnections = 0 }, "limits must be positive"},
		{"bad address", func(o *broker.Options) { o.Listen = "nowhere" }, "listen address"},
		{"route TLS without a cluster", func(o *broker.Options) { o.RouteTLS = &broker.RouteTLS{} }, "no cluster address"},
		{"route TLS without its CA", func(o *broker.Options) {
			o.ClusterListen, o.RouteTLS = "127.0.0.1:0", &broker.RouteTLS{CertFile: "tls.crt", KeyFile: "tls.key"}
		}, "all three"},
		{"route TLS files missing", func(o *broker.Options) {
			o.ClusterListen, o.RouteTLS = "127.0.0.1:0", &broker.RouteTLS{CertFile: "/nonexistent/tls.crt", KeyFile: "/nonexistent/tls.key", CAFile: "/nonexistent/ca.crt"}
		}, "reading the route certificate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := broker.DefaultOptions
			o.Listen, o.Token = "127.0.0.1:0", "x"
			tc.mutate(&o)
			if _, err := broker.New(o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestBrokersFormACluster(t *testing.T) {
	routeA, routeB := natstest.FreeAddr(t), natstest.FreeAddr(t)
	a := broker.DefaultOptions
	a.Listen, a.Token, a.ClusterListen = "127.0.0.1:0", "s", routeA
	urlA := start(t, a)
	b := a
	b.ClusterListen, b.Routes = routeB, []string{"nats://" + routeA}
	urlB := start(t, b)
	subscriber, err := nats.Connect(urlA, nats.Token("s"))
	if err != nil {
		t.Fatal(err)
	}
	defer subscriber.Close()
	got := make(chan string, 1)
	if _, err := subscriber.Subscribe("across", func(m *nats.Msg) { got <- string(m.Data) }); err != nil {
		t.Fatal(err)
	}
	if err := subscriber.Flush(); err != nil {
		t.Fatal(err)
	}
	publisher, err := nats.Connect(urlB, nats.Token("s"))
	if err != nil {
		t.Fatal(err)
	}
	defer publisher.Close()
	deadline := time.After(10 * time.Second)
	for {
		// The route forms asynchronously: publish until it carries one.
		if err := publisher.Publish("across", []byte("hello")); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-got:
			if m != "hello" {
				t.Fatalf("got %q", m)
			}
			return
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatal("no message crossed the route within 10s")
		}
	}
}

func TestOnlySidecarsWithTheNkeyConnect(t *testing.T) {
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := user.PublicKey()
	seed, _ := user.Seed()
	o := broker.DefaultOptions
	o.Listen, o.SidecarNkeys = "127.0.0.1:0", []string{pub}
	url := start(t, o)
	if _, err := nats.Connect(url); err == nil {
		t.Fatal("a client without the nkey connected")
	}
	other, _ := nkeys.CreateUser()
	otherPub, _ := other.PublicKey()
	if _, err := nats.Connect(url, nats.Nkey(otherPub, other.Sign)); err == nil {
		t.Fatal("a client with another nkey connected")
	}
	seedFile := filepath.Join(t.TempDir(), "sidecar.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	opt, err := nats.NkeyOptionFromSeed(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, opt)
	if err != nil {
		t.Fatalf("the sidecar's nkey was refused: %v", err)
	}
	nc.Close()
}
