package xdsclient_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/weighstation/weighstation/sidecar/xdsclient"
)

// recordPeer is a health server that remembers its caller's address.
type recordPeer struct {
	*health.Server
	peers chan net.Addr
}

func (r recordPeer) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if p, ok := peer.FromContext(ctx); ok {
		r.peers <- p.Addr
	}
	return r.Server.Check(ctx, req)
}

// A connection made with LocalAddr comes from that address, as the
// operator sees it; without it, from the system's choice.
func TestDialFromLocalAddr(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rec := recordPeer{Server: health.NewServer(), peers: make(chan net.Addr, 1)}
	healthpb.RegisterHealthServer(srv, rec)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	for _, tc := range []struct {
		name  string
		local net.IP
		want  string
	}{
		{"unset", nil, "127.0.0.1"},
		{"a loopback address of its own", net.IPv4(127, 1, 0, 7), "127.1.0.7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := (xdsclient.Options{Address: lis.Addr().String(), Credentials: insecure.NewCredentials(), LocalAddr: tc.local}).Dial()
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
				t.Fatal(err)
			}
			got := (<-rec.peers).(*net.TCPAddr).IP.String()
			if got != tc.want {
				t.Fatalf("the server saw the call from %s, want %s", got, tc.want)
			}
		})
	}
}
