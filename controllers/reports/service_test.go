package reports

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/controllers/xds"
	"github.com/weighstation/weighstation/meshconfig"
)

// tokens is an Authenticator over a fixed table: the real one is a
// TokenReview; these tests are about what the stream does once the xDS
// server's authentication put the pod in its context.
type tokens map[string]xds.Identity

func (t tokens) Authenticate(_ context.Context, token string) (xds.Identity, error) {
	id, ok := t[token]
	if !ok {
		return xds.Identity{}, errors.New("unknown token")
	}
	return id, nil
}

// grpcRig is the real xDS server serving the Reports service, over TCP.
type grpcRig struct {
	svc     *Service
	reg     *prometheus.Registry
	conn    *grpc.ClientConn
	serving atomic.Bool
}

// meshPod is a pod's configuration as the operator computes it: Topic
// orders it may publish under, Topic audit it may not, Subscription
// billing.
func meshPod(pod string) meshconfig.PodConfig {
	cfg := meshconfig.DefaultConfig(meshconfig.DefaultPolicy)
	cfg.Namespace, cfg.Pod = "shop", pod
	cfg.Topics = []meshconfig.TopicPolicy{
		{Name: "audit", Subject: "audit.>", MaxMessageBytes: 1024},
		{Name: "orders", Subject: "orders.>", MaxMessageBytes: 1024, MayPublish: true},
	}
	cfg.Subscriptions = []meshconfig.SubscriptionPolicy{{Name: "billing", Subject: "orders.*"}}
	cfg.Version, _ = meshconfig.Hash(cfg)
	return cfg
}

func startGRPC(t *testing.T, clk *clock) *grpcRig {
	t.Helper()
	pub := xds.NewPublisher(testr.New(t), nil)
	pub.Set(meshPod("pod-0"), "uid-0")
	pub.Set(meshPod("pod-1"), "uid-1")
	pub.MarkSynced()
	r := &grpcRig{}
	r.serving.Store(true)
	r.svc, r.reg = newTestService(t, clk, func(o *Options) {
		o.Serving = r.serving.Load
		o.PolicyNames = PublisherPolicyNames(pub)
	})
	expiry := time.Now().Add(time.Hour)
	srv := xds.NewServer(pub, xds.NewTracker(), xds.Options{
		Listen: "127.0.0.1:0",
		Authenticator: tokens{
			"token-0": {Namespace: "shop", Pod: "pod-0", PodUID: "uid-0", Expiry: expiry},
			"token-1": {Namespace: "shop", Pod: "pod-1", PodUID: "uid-1", Expiry: expiry},
		},
		Log:      testr.New(t),
		Services: map[string]func(grpc.ServiceRegistrar){xdsv1.Reports_Stream_FullMethodName: r.svc.Register},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("xDS server: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("the xDS server did not stop within 10s")
		}
	})
	waitCtx, waitCancel := context.WithTimeout(ctx, 10*time.Second)
	defer waitCancel()
	addr, err := srv.Addr(waitCtx)
	if err != nil {
		t.Fatalf("the xDS server did not listen: %v", err)
	}
	r.conn, err = grpc.NewClient(addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.conn.Close() })
	return r
}

// open opens a Reports stream as the pod of token.
func (r *grpcRig) open(t *testing.T, token string) xdsv1.Reports_StreamClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	st, err := xdsv1.NewReportsClient(r.conn).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// send sends one report and waits for its acknowledgement or the
// stream's end.
func send(t *testing.T, st xdsv1.Reports_StreamClient, rep *xdsv1.Report) error {
	t.Helper()
	if err := st.Send(rep); err != nil {
		// A stream the server ended: Recv says why.
		_, rerr := st.Recv()
		return rerr
	}
	ack, err := st.Recv()
	if err != nil {
		return err
	}
	if ack.GetSequence() != rep.GetSequence() {
		t.Fatalf("acknowledged sequence %d, sent %d", ack.GetSequence(), rep.GetSequence())
	}
	return nil
}

func mustSend(t *testing.T, st xdsv1.Reports_StreamClient, rep *xdsv1.Report) {
	t.Helper()
	if err := send(t, st, rep); err != nil {
		t.Fatalf("report %d: %v", rep.GetSequence(), err)
	}
}

func wantCode(t *testing.T, err error, code codes.Code, mention string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got %v, want %s", err, code)
	}
	if !strings.Contains(status.Convert(err).Message(), mention) {
		t.Fatalf("the refusal %q does not mention %q", status.Convert(err).Message(), mention)
	}
}

func TestAReportIsAcknowledgedAndStored(t *testing.T) {
	clk := newClock()
	r := startGRPC(t, clk)
	st := r.open(t, "token-0")
	mustSend(t, st, report("uid-0", "boot-a", 1,
		[]*xdsv1.SubscriptionReport{subReport(t, "billing", 10, []int64{100, 200, 300}, []int64{5}, reason("overflow", 2))},
		topicRep("orders", 12, 11, reason("rate", 1)),
		// The pod may not publish under audit: its refusals are reported.
		topicRep("audit", 3, 0, reason("forbidden", 3))))

	sum, ok := r.svc.Store().Subscription("shop", "billing")
	if !ok {
		t.Fatal("no summary of billing")
	}
	if sum.Delivered != 10 || sum.EndToEnd.Count != 3 || sum.Dwell.Count != 1 || len(sum.Pods) != 1 || sum.Pods[0].Pod != "pod-0" {
		t.Fatalf("summary %+v", sum)
	}
	if want := []ReasonCount{{"overflow", 2}}; !equalReasons(sum.Dropped, want) {
		t.Fatalf("dropped %v, want %v", sum.Dropped, want)
	}
	orders, ok := r.svc.Store().Topic("shop", "orders")
	if !ok || orders.Attempts != 12 || orders.Forwarded != 11 || !equalReasons(orders.Refused, []ReasonCount{{"rate", 1}}) || orders.Pods != 1 {
		t.Fatalf("orders %+v, %v", orders, ok)
	}
	if audit, ok := r.svc.Store().Topic("shop", "audit"); !ok || audit.Attempts != 3 {
		t.Fatalf("audit %+v, %v", audit, ok)
	}
	if got := value(r.svc.metrics.accepted); got != 1 {
		t.Fatalf("accepted %v, want 1", got)
	}
}

func TestADuplicateIsAcknowledgedAndNotCountedAgain(t *testing.T) {
	clk := newClock()
	r := startGRPC(t, clk)
	st := r.open(t, "token-0")
	one := report("uid-0", "boot-a", 1, []*xdsv1.SubscriptionReport{subReport(t, "billing", 10, []int64{100, 200}, nil, reason("overflow", 1))})
	two := report("uid-0", "boot-a", 2, []*xdsv1.SubscriptionReport{subReport(t, "billing", 25, []int64{300, 400, 500}, nil, reason("overflow", 4))})
	for _, rep := range []*xdsv1.Report{one, two, two, one} {
		mustSend(t, st, rep)
	}
	// A resend on a new stream, as after a reconnection, is a duplicate too.
	mustSend(t, r.open(t, "token-0"), two)

	sum, ok := r.svc.Store().Subscription("shop", "billing")
	if !ok {
		t.Fatal("no summary")
	}
	if sum.Delivered != 25 || sum.EndToEnd.Count != 5 || !equalReasons(sum.Dropped, []ReasonCount{{"overflow", 4}}) {
		t.Fatalf("delivered %d, values %d, dropped %v; want 25, 5, overflow 4", sum.Delivered, sum.EndToEnd.Count, sum.Dropped)
	}
	if got := value(r.svc.metrics.duplicates); got != 3 {
		t.Fatalf("duplicates %v, want 3", got)
	}
	if got := value(r.svc.metrics.accepted); got != 2 {
		t.Fatalf("accepted %v, want 2", got)
	}
}

func TestANewBootIsANewSeries(t *testing.T) {
	clk := newClock()
	r := startGRPC(t, clk)
	st := r.open(t, "token-0")
	sub := func(delivered, dropped uint64) []*xdsv1.SubscriptionReport {
		return []*xdsv1.SubscriptionReport{subReport(t, "billing", delivered, []int64{1000}, nil, reason("overflow", dropped))}
	}
	mustSend(t, st, report("uid-0", "boot-a", 1, sub(100, 10)))
	mustSend(t, st, report("uid-0", "boot-a", 2, sub(150, 12)))
	// The sidecar restarted: its counters start again from zero, and its
	// sequence too. Neither is a duplicate nor a counter reset.
	st = r.open(t, "token-0")
	mustSend(t, st, report("uid-0", "boot-b", 1, sub(30, 1)))
	mustSend(t, st, report("uid-0", "boot-b", 2, sub(40, 3)))

	sum, _ := r.svc.Store().Subscription("shop", "billing")
	if sum.Delivered != 190 || !equalReasons(sum.Dropped, []ReasonCount{{"overflow", 15}}) || sum.EndToEnd.Count != 4 {
		t.Fatalf("delivered %d, dropped %v, values %d; want 150+40, overflow 12+3, 4", sum.Delivered, sum.Dropped, sum.EndToEnd.Count)
	}
	if len(sum.Pods) != 1 || sum.Pods[0].Delivered != 190 {
		t.Fatalf("pods %+v", sum.Pods)
	}
	if got := value(r.svc.metrics.series); got != 2 {
		t.Fatalf("series %v, want 2", got)
	}
}

func TestARefusedReportStoresNothing(t *testing.T) {
	billing := func(t *testing.T) *xdsv1.SubscriptionReport { return subReport(t, "billing", 5, []int64{100}, nil) }
	cases := []struct {
		name    string
		token   string
		report  func(t *testing.T) *xdsv1.Report
		code    codes.Code
		mention string
		metric  string
	}{
		{
			name: "a Subscription not in the pod's configuration", token: "token-0",
			report: func(t *testing.T) *xdsv1.Report {
				return report("uid-0", "b", 1, []*xdsv1.SubscriptionReport{billing(t), subReport(t, "ghost", 1, nil, nil)})
			},
			code: codes.InvalidArgument, mention: `Subscription "ghost"`, metric: refusedPolicy,
		},
		{
			name: "a Topic not in the pod's configuration", token: "token-0",
			report: func(t *testing.T) *xdsv1.Report {
				return report("uid-0", "b", 1, []*xdsv1.SubscriptionReport{billing(t)}, topicRep("orders", 1, 1), topicRep("payments", 1, 1))
			},
			code: codes.InvalidArgument, mention: `Topic "payments"`, metric: refusedPolicy,
		},
		{
			name: "another pod's UID", token: "token-0",
			report: func(t *testing.T) *xdsv1.Report {
				return report("uid-1", "b", 1, []*xdsv1.SubscriptionReport{billing(t)})
			},
			code: codes.PermissionDenied, mention: "uid-1", metric: refusedPodUID,
		},
		{
			name: "an unknown schema version", token: "token-0",
			report: func(t *testing.T) *xdsv1.Report {
				r := report("uid-0", "b", 1, []*xdsv1.SubscriptionReport{billing(t)})
				r.SchemaVersion = 2
				return r
			},
			code: codes.InvalidArgument, mention: "schema version 2", metric: refusedSchema,
		},
		{
			name: "V2 encoding: 2 significant digits", token: "token-0",
			report: func(t *testing.T) *xdsv1.Report {
				s := billing(t)
				s.Dwell = encodeGeometry(t, 1, 60_000_000, 2, []int64{100})
				return report("uid-0", "b", 1, []*xdsv1.SubscriptionReport{s})
			},
			code: codes.InvalidArgument, mention: "2 digits", metric: refusedHistogram,
		},
		{
			name: "V2 encoding: a highest value of an hour", token: "token-0",
			report: func(t *testing.T) *xdsv1.Report {
				s := billing(t)
				s.EndToEndBuckets, s.EndToEnd = nil, encodeGeometry(t, 1, 3_600_000_000, 3, []int64{100})
				return report("uid-0", "b", 1, []*xdsv1.SubscriptionReport{s})
			},
			code: codes.InvalidArgument, mention: "highest 3600000000", metric: refusedHistogram,
		},
		{
			name: "V2 encoding: a lowest value of 1 ms", token: "token-0",
			report: func(t *testing.T) *xdsv1.Report {
				s := billing(t)
				s.EndToEndBuckets, s.EndToEnd = nil, encodeGeometry(t, 1000, 60_000_000, 3, []int64{100_000})
				return report("uid-0", "b", 1, []*xdsv1.SubscriptionReport{s})
			},
			code: codes.InvalidArgument, mention: "lowest 1000", metric: refusedHistogram,
		},
		{
			name: "V2 encoding: a histogram that does not decode", token: "token-0",
			report: func(t *testing.T) *xdsv1.Report {
				s := billing(t)
				s.EndToEndBuckets, s.EndToEnd = nil, []byte("HISTFAAAAB14nJNpmSzMwMDAxQABzFCaEUzOmNZg") // truncated
				return report("uid-0", "b", 1, []*xdsv1.SubscriptionReport{s})
			},
			code: codes.InvalidArgument, mention: "end_to_end", metric: refusedHistogram,
		},
		{
			name: "bucket counts: a highest value of an hour", token: "token-0",
			report: func(t *testing.T) *xdsv1.Report {
				s := billing(t)
				s.EndToEndBuckets = bucketsGeometry(t, 1, 3_600_000_000, 3, []int64{100})
				return report("uid-0", "b", 1, []*xdsv1.SubscriptionReport{s})
			},
			code: codes.InvalidArgument, mention: "highest 3600000000", metric: refusedHistogram,
		},
		{
			name: "bucket counts: a lowest value of 1 ms", token: "token-0",
			report: func(t *testing.T) *xdsv1.Report {
				s := billing(t)
				s.DwellBuckets = bucketsGeometry(t, 1000, 60_000_000, 3, []int64{100_000})
				return report("uid-0", "b", 1, []*xdsv1.SubscriptionReport{s})
			},
			code: codes.InvalidArgument, mention: "lowest 1000", metric: refusedHistogram,
		},
		{
			name: "bucket counts: 1 significant digit", token: "token-0",
			report: func(t *testing.T) *xdsv1.Report {
				s := billing(t)
				s.EndToEndBuckets = bucketsGeometry(t, 1, 60_000_000, 1, []int64{100})
				return report("uid-0", "b", 1, []*xdsv1.SubscriptionReport{s})
			},
			code: codes.InvalidArgument, mention: "1 digits", metric: refusedHistogram,
		},
		{
			name: "bucket counts: a distance without its count", token: "token-0",
			report: func(t *testing.T) *xdsv1.Report {
				s := billing(t)
				s.EndToEndBuckets.Buckets = append(s.EndToEndBuckets.Buckets, 1)
				return report("uid-0", "b", 1, []*xdsv1.SubscriptionReport{s})
			},
			code: codes.InvalidArgument, mention: "malformed varint", metric: refusedHistogram,
		},
		{
			name: "bucket counts: a varint cut short", token: "token-0",
			report: func(t *testing.T) *xdsv1.Report {
				s := billing(t)
				s.EndToEndBuckets.Buckets = append(wireBuckets(101, 1, 1), 0x80)
				return report("uid-0", "b", 1, []*xdsv1.SubscriptionReport{s})
			},
			code: codes.InvalidArgument, mention: "malformed varint", metric: refusedHistogram,
		},
		{
			name: "bucket counts: a bucket twice", token: "token-0",
			report: func(t *testing.T) *xdsv1.Report {
				s := billing(t)
				s.EndToEndBuckets.Buckets = wireBuckets(101, 1, 0, 1)
				return report("uid-0", "b", 1, []*xdsv1.SubscriptionReport{s})
			},
			code: codes.InvalidArgument, mention: "distance 0", metric: refusedHistogram,
		},
		{
			name: "bucket counts: a count of 0", token: "token-0",
			report: func(t *testing.T) *xdsv1.Report {
				s := billing(t)
				s.DwellBuckets = &xdsv1.Histogram{LowestTrackableValue: 1, HighestTrackableValue: 60_000_000, SignificantDigits: 3, Buckets: wireBuckets(101, 0)}
				return report("uid-0", "b", 1, []*xdsv1.SubscriptionReport{s})
			},
			code: codes.InvalidArgument, mention: "count 0", metric: refusedHistogram,
		},
		{
			name: "bucket counts: an index past the geometry's", token: "token-0",
			report: func(t *testing.T) *xdsv1.Report {
				s := billing(t)
				s.EndToEndBuckets.Buckets = wireBuckets(101, 1, 1<<63, 1)
				return report("uid-0", "b", 1, []*xdsv1.SubscriptionReport{s})
			},
			code: codes.InvalidArgument, mention: "beyond the highest", metric: refusedHistogram,
		},
		{
			name: "bucket counts: a value above 60 s within the counts", token: "token-0",
			report: func(t *testing.T) *xdsv1.Report {
				s := billing(t)
				// 3 digits: the last bucket of the counts array (17,407)
				// lies at 67 s.
				s.EndToEndBuckets.Buckets = wireBuckets(17_408, 1)
				return report("uid-0", "b", 1, []*xdsv1.SubscriptionReport{s})
			},
			code: codes.InvalidArgument, mention: "beyond the highest", metric: refusedHistogram,
		},
		{
			name: "bucket counts: a count past 2^62", token: "token-0",
			report: func(t *testing.T) *xdsv1.Report {
				s := billing(t)
				s.EndToEndBuckets.Buckets = wireBuckets(101, 1<<62+1)
				return report("uid-0", "b", 1, []*xdsv1.SubscriptionReport{s})
			},
			code: codes.InvalidArgument, mention: "count", metric: refusedHistogram,
		},
		{
			name: "a reason listed twice", token: "token-0",
			report: func(t *testing.T) *xdsv1.Report {
				s := billing(t)
				s.Dropped = []*xdsv1.ReasonCount{reason("overflow", 1), reason("overflow", 2)}
				return report("uid-0", "b", 1, []*xdsv1.SubscriptionReport{s})
			},
			code: codes.InvalidArgument, mention: "twice", metric: refusedMalformed,
		},
		{
			name: "an unknown kill cause", token: "token-0",
			report: func(t *testing.T) *xdsv1.Report {
				s := billing(t)
				s.Kill = &xdsv1.KillState{Killed: true, Cause: "Bored"}
				return report("uid-0", "b", 1, []*xdsv1.SubscriptionReport{s})
			},
			code: codes.InvalidArgument, mention: "Bored", metric: refusedMalformed,
		},
		{
			name: "sequence 0", token: "token-0",
			report: func(t *testing.T) *xdsv1.Report {
				return report("uid-0", "b", 0, []*xdsv1.SubscriptionReport{billing(t)})
			},
			code: codes.InvalidArgument, mention: "sequence", metric: refusedMalformed,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := startGRPC(t, newClock())
			err := send(t, r.open(t, tc.token), tc.report(t))
			wantCode(t, err, tc.code, tc.mention)
			if _, ok := r.svc.Store().Subscription("shop", "billing"); ok {
				t.Error("billing was stored from a refused report")
			}
			if _, ok := r.svc.Store().Topic("shop", "orders"); ok {
				t.Error("orders was stored from a refused report")
			}
			if n := r.svc.Store().series.Load(); n != 0 {
				t.Errorf("%d series held after a refused report", n)
			}
			if got := value(r.svc.metrics.refused.WithLabelValues(tc.metric)); got != 1 {
				t.Errorf("refused{reason=%q} is %v, want 1", tc.metric, got)
			}
		})
	}
}

func TestAReplicaThatDoesNotServeRefusesTheStream(t *testing.T) {
	r := startGRPC(t, newClock())
	r.serving.Store(false)
	err := send(t, r.open(t, "token-0"), report("uid-0", "b", 1, nil))
	wantCode(t, err, codes.Unavailable, "not the leader")

	// Leadership lost in the middle of a stream ends it too.
	r.serving.Store(true)
	st := r.open(t, "token-0")
	mustSend(t, st, report("uid-0", "b", 1, nil))
	r.serving.Store(false)
	wantCode(t, send(t, st, report("uid-0", "b", 2, nil)), codes.Unavailable, "retry")
}

func TestAStreamWithoutAnIdentityIsRefused(t *testing.T) {
	// Served outside the xDS server's authentication, as by a mistake of
	// wiring: nothing is taken from an unknown caller.
	svc, _ := newTestService(t, newClock(), nil)
	err := svc.Stream(fakeServerStream{ctx: context.Background()})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("got %v, want Unauthenticated", err)
	}
}

type fakeServerStream struct {
	grpc.BidiStreamingServer[xdsv1.Report, xdsv1.ReportAck]
	ctx context.Context
}

func (f fakeServerStream) Context() context.Context { return f.ctx }

func equalReasons(a, b []ReasonCount) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
