package sidecarapp

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats-server/v2/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	deltav1 "github.com/weighstation/weighstation/api/xds/delta/v1"
	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/meshconfig/xdsresource"
	"github.com/weighstation/weighstation/sidecar/report"
	"github.com/weighstation/weighstation/sidecar/upstream"
	"github.com/weighstation/weighstation/sidecar/xdsclient"
)

// The pod of the in-process tests.
const (
	testNamespace, testPod, testUID = "apps", "app-0", "uid-0"
	// testVersion is the resource's; the configuration's own version
	// (XDS.Version) is its content's hash.
	testVersion = "v1"
)

// inProcessOptions are a sidecar's options as a test in process sets
// them: no endpoints, no broker credential, no log.
func inProcessOptions(t *testing.T, brokerURL string) Options {
	t.Helper()
	discard := logr.Discard()
	opts := NewOptions()
	opts.Sidecar.Listen = "127.0.0.1:0"
	opts.BrokerURL = brokerURL
	opts.BrokerCredentials = &upstream.Credentials{}
	opts.MetricsListen, opts.HealthListen = "", ""
	opts.Logger = &discard
	return *opts
}

// TestNewStandaloneInProcess: New serves the documented defaults, through
// WrapApply, and Run drains and closes when its context ends.
func TestNewStandaloneInProcess(t *testing.T) {
	broker := natstest.StartBroker(t, &server.Options{})
	opts := inProcessOptions(t, broker.ClientURL())
	var applied atomic.Int32
	opts.WrapApply = func(apply func(meshconfig.PodConfig) error) func(meshconfig.PodConfig) error {
		return func(cfg meshconfig.PodConfig) error {
			applied.Add(1)
			return apply(cfg)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if applied.Load() != 1 {
		t.Errorf("WrapApply saw %d configurations, want the defaults", applied.Load())
	}
	if s.Link != nil || s.XDS != nil || s.Reporter != nil || s.Credential != nil {
		t.Errorf("a standalone sidecar has an operator's parts: %+v", s)
	}
	nc := natstest.Connect(t, "nats://"+s.Server.Addr().String())
	if err := nc.Flush(); err != nil {
		t.Fatalf("an application's PING: %v", err)
	}
	nc.Close()
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()
	cancel()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	s.Close() // again: a no-op
	if _, err := net.Dial("tcp", s.Server.Addr().String()); err == nil {
		t.Error("the application listener is still open after Run")
	}
}

// TestWrapApplyRefusalStopsNew: a configuration file that WrapApply
// refuses at start stops New with its error, as a bad file does.
func TestWrapApplyRefusalStopsNew(t *testing.T) {
	broker := natstest.StartBroker(t, &server.Options{})
	opts := inProcessOptions(t, broker.ClientURL())
	opts.ConfigFile = "../../../config/samples/sidecar/sidecar-config.yaml"
	refused := errors.New("refused by the test")
	opts.WrapApply = func(func(meshconfig.PodConfig) error) func(meshconfig.PodConfig) error {
		return func(meshconfig.PodConfig) error { return refused }
	}
	if _, err := New(context.Background(), opts); !errors.Is(err, refused) {
		t.Fatalf("New: %v, want the refusal", err)
	}
}

// TestNewWithOperatorInProcess: with transport credentials given, the
// connection to the operator is up from New on; WrapApply sees (and may
// refuse) the operator's configurations; StopReports stops the reports
// alone.
func TestNewWithOperatorInProcess(t *testing.T) {
	broker := natstest.StartBroker(t, &server.Options{})
	op := startFakeOperator(t)
	opts := inProcessOptions(t, broker.ClientURL())
	opts.XDS = xdsclient.Options{Address: op.addr, Namespace: testNamespace, Pod: testPod, PodUID: testUID, TokenFile: identityToken(t),
		Credentials: insecure.NewCredentials(), InitialBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}
	opts.ReportInterval = report.MinInterval
	var refuse atomic.Bool
	refuse.Store(true)
	opts.WrapApply = func(apply func(meshconfig.PodConfig) error) func(meshconfig.PodConfig) error {
		return func(cfg meshconfig.PodConfig) error {
			if refuse.Load() {
				return errors.New("refused by the test")
			}
			return apply(cfg)
		}
	}
	s, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if s.XDS == nil || s.Reporter == nil || s.Link == nil {
		t.Fatalf("the operator's parts are missing: %+v", s)
	}
	eventually(t, 10*time.Second, "the configuration is refused", func() error {
		if st := s.XDS.Stats(); st.Refused == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	if v := s.XDS.Version(); v != "" {
		t.Fatalf("holds %q after refusing it", v)
	}
	refuse.Store(false)
	op.closeStreams() // the sidecar reconnects and gets it again
	eventually(t, 10*time.Second, "the configuration applies and the reports flow", func() error {
		if s.XDS.Version() == "" {
			return errors.New("no configuration held")
		}
		if !s.Reporter.Stats().Connected {
			return errors.New("no report stream")
		}
		return nil
	})
	s.StopReports()
	if s.Reporter.Stats().Connected {
		t.Error("the report stream is still up after StopReports")
	}
	if !s.XDS.Stats().Connected {
		t.Error("StopReports stopped the xDS stream too")
	}
}

// TestOperatorLinkLifecycle: a link has one Reporter; one never started
// is Done at Close.
func TestOperatorLinkLifecycle(t *testing.T) {
	l, err := NewOperatorLink(LinkOptions{XDS: xdsclient.Options{Address: "127.0.0.1:1", Namespace: testNamespace, Pod: testPod, PodUID: testUID,
		TokenFile: identityToken(t), Credentials: insecure.NewCredentials(), Apply: func(meshconfig.PodConfig) error { return nil }}})
	if err != nil {
		t.Fatal(err)
	}
	if l.Reporter() != nil {
		t.Fatal("a Reporter without reports")
	}
	src := &fixedSource{}
	if _, err := l.StartReports(report.Options{Source: src}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.StartReports(report.Options{Source: src}); err == nil {
		t.Fatal("a second Reporter was made")
	}
	l.StopReports()
	l.Close()
	select {
	case <-l.Done():
	default:
		t.Fatal("not Done after Close")
	}
	l.Start(context.Background()) // after Close: nothing
	l.Close()

	if _, err := NewOperatorLink(LinkOptions{XDS: xdsclient.Options{Address: "no-port", Namespace: testNamespace, Pod: testPod,
		TokenFile: "token", Apply: func(meshconfig.PodConfig) error { return nil }}}); err == nil {
		t.Fatal("an operator address without a port was taken for the CA bundle's server name")
	}
}

// fixedSource is a report.Source that measured nothing.
type fixedSource struct{ report.Source }

// identityToken writes the pod's identity token.
func identityToken(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// fakeOperator serves the pod's configuration over delta ADS, and admits
// report streams (reading them, acknowledging none), without TLS.
type fakeOperator struct {
	addr     string
	resource *anypb.Any

	mu      sync.Mutex
	streams map[grpc.ServerStream]context.CancelFunc
}

func startFakeOperator(t *testing.T) *fakeOperator {
	t.Helper()
	cfg := meshconfig.PodConfig{Namespace: testNamespace, Pod: testPod,
		Default: meshconfig.TopicPolicy{Subject: ">", MaxMessageBytes: 1 << 20, MayPublish: true}}
	body, err := anypb.New(xdsresource.PodResource(cfg, testUID))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &fakeOperator{addr: lis.Addr().String(), resource: body, streams: map[grpc.ServerStream]context.CancelFunc{}}
	gs := grpc.NewServer(grpc.UnknownServiceHandler(o.handle))
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return o
}

// closeStreams ends the xDS streams open now.
func (o *fakeOperator) closeStreams() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, cancel := range o.streams {
		cancel()
	}
}

func (o *fakeOperator) handle(_ any, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	if err := ss.SendHeader(metadata.Pairs("weighstation-accepted-pod", xdsresource.PodName(testNamespace, testPod))); err != nil {
		return err
	}
	switch method {
	case xdsv1.Reports_Stream_FullMethodName:
		for {
			if err := ss.RecvMsg(new(xdsv1.Report)); err != nil {
				return nil
			}
		}
	case "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources":
	default:
		return status.Errorf(codes.Unimplemented, "%s", method)
	}
	ctx, cancel := context.WithCancel(ss.Context())
	o.mu.Lock()
	o.streams[ss] = cancel
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		delete(o.streams, ss)
		o.mu.Unlock()
	}()
	if err := ss.RecvMsg(new(deltav1.Request)); err != nil {
		return err
	}
	marker, err := anypb.New(xdsresource.TopicCollectionResource(true, 0))
	if err != nil {
		return err
	}
	if err := ss.SendMsg(&deltav1.Response{
		TypeUrl: xdsresource.TypeURL, Nonce: "1",
		Resources: []*deltav1.Resource{
			{Name: xdsresource.PodResourceName(testNamespace, testPod), Version: testVersion, Resource: o.resource},
			{Name: xdsresource.TopicCollectionName(testNamespace), Version: "e.1", Resource: marker},
		},
	}); err != nil {
		return err
	}
	received := make(chan error, 1)
	go func() {
		for {
			if err := ss.RecvMsg(new(deltav1.Request)); err != nil {
				received <- err
				return
			}
		}
	}()
	select {
	case <-ctx.Done():
		return status.Error(codes.Unavailable, "the test closed the stream")
	case <-received:
		return nil
	}
}
