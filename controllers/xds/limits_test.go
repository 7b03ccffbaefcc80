package xds_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/go-logr/logr/testr"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/weighstation/weighstation/controllers/xds"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/meshconfig/xdsresource"
)

// startLimited serves pub with limits, and returns a connection to it
// and the server's tracker.
func startLimited(t *testing.T, pub *xds.Publisher, limits xds.Limits) (*grpc.ClientConn, *xds.Tracker) {
	t.Helper()
	return startWith(t, pub, xds.Options{
		Limits:        limits,
		Authenticator: tokens{"t1": {Namespace: "shop", Pod: "billing-0", PodUID: "uid-1", Expiry: time.Now().Add(time.Hour)}},
	})
}

// startWith serves pub with opts (listening on loopback, logging to t).
func startWith(t *testing.T, pub *xds.Publisher, opts xds.Options) (*grpc.ClientConn, *xds.Tracker) {
	t.Helper()
	tracker := xds.NewTracker()
	opts.Listen, opts.Log = "127.0.0.1:0", testr.New(t)
	srv := xds.NewServer(pub, tracker, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	waitCtx, waitCancel := context.WithTimeout(ctx, 10*time.Second)
	defer waitCancel()
	addr, err := srv.Addr(waitCtx)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, tracker
}

func syncedPublisher(t *testing.T, cfg meshconfig.PodConfig) *xds.Publisher {
	pub := newPublisher(t)
	pub.Set(cfg, "uid-1")
	pub.MarkSynced()
	return pub
}

// openADS opens a delta ADS stream as shop/billing-0.
func openADS(t *testing.T, conn *grpc.ClientConn, timeout time.Duration) (discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer t1"), timeout)
	t.Cleanup(cancel)
	return discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
}

var own = &corev3.Node{Id: "shop/billing-0"}

func subscribe(names ...string) *discoveryv3.DeltaDiscoveryRequest {
	return &discoveryv3.DeltaDiscoveryRequest{TypeUrl: xdsresource.TypeURL, ResourceNamesSubscribe: names}
}

// exchange sends req and waits for one response, or the stream's end.
func exchange(st discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient, req *discoveryv3.DeltaDiscoveryRequest) (*discoveryv3.DeltaDiscoveryResponse, error) {
	if err := st.Send(req); err != nil {
		_, err := st.Recv()
		return nil, err
	}
	return st.Recv()
}

func wantEnded(t *testing.T, err error, code codes.Code, want string) {
	t.Helper()
	if s := status.Convert(err); err == nil || s.Code() != code || !strings.Contains(s.Message(), want) {
		t.Fatalf("got %v, want %s naming %q", err, code, want)
	}
}

// Each per-stream bound at its edge: at the limit the stream works, one
// past it the stream ends RESOURCE_EXHAUSTED, naming the flag.
func TestStreamLimitsAtTheirEdges(t *testing.T) {
	topic, sub := xdsresource.TopicName("shop", "orders"), xdsresource.SubscriptionName("shop", "billing")
	t.Run("resource names", func(t *testing.T) {
		conn, _ := startLimited(t, syncedPublisher(t, podConfig("shop", "billing-0", false)), xds.Limits{MaxStreamResources: 3})
		st, err := openADS(t, conn, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		first := subscribe("shop/billing-0", topic, sub)
		first.Node = own
		if _, err := exchange(st, first); err != nil {
			t.Fatalf("3 names at a limit of 3: %v", err)
		}
		_, err = exchange(st, subscribe(xdsresource.TopicName("shop", "audit")))
		wantEnded(t, err, codes.ResourceExhausted, "-xds-max-stream-resources (3)")
	})
	t.Run("resource names in one request", func(t *testing.T) {
		conn, _ := startLimited(t, syncedPublisher(t, podConfig("shop", "billing-0", false)), xds.Limits{MaxStreamResources: 3})
		st, err := openADS(t, conn, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		first := subscribe("shop/billing-0", topic, sub, xdsresource.TopicName("shop", "audit"))
		first.Node = own
		_, err = exchange(st, first)
		wantEnded(t, err, codes.ResourceExhausted, "-xds-max-stream-resources (3)")
	})
	t.Run("unacknowledged pushes", func(t *testing.T) {
		conn, _ := startLimited(t, syncedPublisher(t, podConfig("shop", "billing-0", false)), xds.Limits{MaxUnackedPushes: 2})
		st, err := openADS(t, conn, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// Each request asks for more and answers nothing: a response
		// each, none of them settled.
		first := subscribe("shop/billing-0")
		first.Node = own
		if _, err := exchange(st, first); err != nil {
			t.Fatal(err)
		}
		if _, err := exchange(st, subscribe(topic)); err != nil {
			t.Fatalf("a request with 1 response unacknowledged, at a limit of 2: %v", err)
		}
		_, err = exchange(st, subscribe(sub))
		wantEnded(t, err, codes.ResourceExhausted, "-xds-max-unacked-pushes (2)")
	})
	t.Run("received message size", func(t *testing.T) {
		const limit = 64 << 10
		conn, _ := startLimited(t, syncedPublisher(t, podConfig("shop", "billing-0", false)), xds.Limits{MaxRecvMsgSize: limit})
		for _, size := range []int{limit, limit + 1} {
			st, err := openADS(t, conn, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			_, err = exchange(st, paddedTo(t, size))
			if size == limit && err != nil {
				t.Fatalf("a request of exactly %d bytes: %v", size, err)
			}
			if size > limit {
				// gRPC's own refusal, with the limit's value; the
				// operator's log names the flag.
				wantEnded(t, err, codes.ResourceExhausted, "larger than max (65537 vs. 65536)")
			}
		}
	})
	t.Run("sent message size", func(t *testing.T) {
		// A configuration over 64 KiB: 1,500 Topics' names in the pod's
		// resource.
		cfg := podConfig("shop", "billing-0", false)
		for i := range 1500 {
			cfg.Topics = append(cfg.Topics, meshconfig.TopicPolicy{Name: fmt.Sprintf("topic-%04d-%s", i, strings.Repeat("x", 40)), Subject: fmt.Sprintf("t%d.>", i), MaxMessageBytes: 1024})
		}
		cfg.Version, _ = meshconfig.Hash(cfg)
		conn, _ := startLimited(t, syncedPublisher(t, cfg), xds.Limits{MaxSendMsgSize: 64 << 10})
		st, err := openADS(t, conn, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		first := subscribe("shop/billing-0")
		first.Node = own
		_, err = exchange(st, first)
		wantEnded(t, err, codes.ResourceExhausted, "-xds-max-send-msg-size (65536 bytes)")
	})
}

// paddedTo is a valid first request of exactly size bytes on the wire:
// the padding is an error detail, which a request without a nonce settles
// nothing with.
func paddedTo(t *testing.T, size int) *discoveryv3.DeltaDiscoveryRequest {
	t.Helper()
	req := subscribe("shop/billing-0")
	req.Node = own
	req.ErrorDetail = &spb.Status{}
	for pad := size - proto.Size(req); ; pad-- {
		req.ErrorDetail.Message = strings.Repeat("p", max(pad, 0))
		switch n := proto.Size(req); {
		case n == size:
			return req
		case n < size || pad <= 0:
			t.Fatalf("cannot pad a request to %d bytes (%d)", size, n)
		}
	}
}

// MaxConcurrentStreams: a connection holds that many streams at once; the
// next waits until one ends.
func TestConcurrentStreamsPerConnectionAtTheEdge(t *testing.T) {
	conn, _ := startLimited(t, syncedPublisher(t, podConfig("shop", "billing-0", false)), xds.Limits{MaxConcurrentStreams: 3})
	var cancels []context.CancelFunc
	for i := range 3 {
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer t1"), 10*time.Second)
		t.Cleanup(cancel)
		cancels = append(cancels, cancel)
		st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		first := subscribe("shop/billing-0")
		first.Node = own
		if _, err := exchange(st, first); err != nil {
			t.Fatalf("stream %d of 3: %v", i+1, err)
		}
	}
	fourth := func(timeout time.Duration) error {
		st, err := openADS(t, conn, timeout)
		if err != nil {
			return err
		}
		first := subscribe("shop/billing-0")
		first.Node = own
		_, err = exchange(st, first)
		return err
	}
	if err := fourth(300 * time.Millisecond); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a fourth stream on the connection: %v, want it held back (DeadlineExceeded)", err)
	}
	cancels[0]()
	if err := fourth(10 * time.Second); err != nil {
		t.Fatalf("a fourth stream once one ended: %v", err)
	}
}

// A sidecar's NACK reason is kept at most MaxNACKReasonBytes long, valid
// UTF-8 (truncateReason's edges: limits_internal_test.go).
func TestALongNACKReasonIsCut(t *testing.T) {
	pub, tracker, s := configuredSidecar(t)
	s.mu.Lock()
	s.refuse = errors.New(strings.Repeat("é", 5*xds.MaxNACKReasonBytes))
	s.mu.Unlock()
	pub.Set(podConfig("shop", "billing-0", true), "uid-1")
	subName := xdsresource.SubscriptionName("shop", "billing")
	eventually(t, "the NACK is recorded, cut", func() error {
		n, ok := tracker.NACKs(subName)[xds.PodKey("shop", "billing-0", "uid-1")]
		if !ok {
			return errors.New("no NACK yet")
		}
		if len(n.Reason) > xds.MaxNACKReasonBytes || !utf8.ValidString(n.Reason) || !strings.HasSuffix(n.Reason, "(truncated)") {
			t.Fatalf("kept a reason of %d bytes (valid UTF-8: %t), want at most %d, marked truncated", len(n.Reason), utf8.ValidString(n.Reason), xds.MaxNACKReasonBytes)
		}
		return nil
	})
}

func TestLimitsAreValidated(t *testing.T) {
	d := xds.DefaultLimits
	with := func(f func(*xds.Limits)) xds.Limits { l := d; f(&l); return l }
	tests := []struct {
		name   string
		limits xds.Limits
		want   string
	}{
		{"defaults", d, ""},
		{"the least of each", xds.Limits{MaxConcurrentStreams: 3, MaxRecvMsgSize: 64 << 10, MaxSendMsgSize: 64 << 10, MaxStreamResources: 1, MaxUnackedPushes: 2}, ""},
		{"2 streams", with(func(l *xds.Limits) { l.MaxConcurrentStreams = 2 }), "-xds-max-concurrent-streams"},
		{"receive under 64 KiB", with(func(l *xds.Limits) { l.MaxRecvMsgSize = 64<<10 - 1 }), "-xds-max-recv-msg-size"},
		{"send under 64 KiB", with(func(l *xds.Limits) { l.MaxSendMsgSize = 64<<10 - 1 }), "-xds-max-send-msg-size"},
		{"no resources", with(func(l *xds.Limits) { l.MaxStreamResources = 0 }), "-xds-max-stream-resources"},
		{"1 unacknowledged push", with(func(l *xds.Limits) { l.MaxUnackedPushes = 1 }), "-xds-max-unacked-pushes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.limits.Validate()
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate() = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}
