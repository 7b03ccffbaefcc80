package xdsclient_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	deltav1 "github.com/weighstation/weighstation/api/xds/delta/v1"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/meshconfig/xdsresource"
)

// The pod of these tests.
const testNamespace, testPod = "apps", "app-0"

// fakeOperator serves one configuration over delta ADS as the operator
// does: it admits a stream with its header, sends the pod's resource
// unless the sidecar reports holding its version, and reads the ACKs.
type fakeOperator struct {
	gs       *grpc.Server
	version  string
	resource *anypb.Any
}

// configWith is the pod's configuration whose default policy's size limit
// is maxBytes, which tells the configurations of these tests apart, and
// its resource.
func configWith(t *testing.T, maxBytes int64) (meshconfig.PodConfig, *anypb.Any) {
	t.Helper()
	cfg := meshconfig.PodConfig{
		Namespace: testNamespace, Pod: testPod,
		Default: meshconfig.TopicPolicy{Subject: ">", MaxMessageBytes: maxBytes, MayPublish: true},
	}
	body, err := anypb.New(xdsresource.PodResource(cfg, ""))
	if err != nil {
		t.Fatal(err)
	}
	return cfg, body
}

// startOperator serves the configuration whose size limit is maxBytes on
// lis until it is stopped.
func startOperator(t *testing.T, lis net.Listener, maxBytes int64) *fakeOperator {
	t.Helper()
	_, body := configWith(t, maxBytes)
	o := &fakeOperator{version: fmt.Sprintf("v%d", maxBytes), resource: body}
	o.gs = grpc.NewServer(grpc.UnknownServiceHandler(o.handle),
		// The operator's own enforcement (controllers/xds), which the
		// sidecar's keepalive must not break.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}))
	go func() { _ = o.gs.Serve(lis) }()
	t.Cleanup(o.gs.Stop)
	return o
}

const deltaADSMethod = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"

func (o *fakeOperator) handle(_ any, ss grpc.ServerStream) error {
	if m, _ := grpc.MethodFromServerStream(ss); m != deltaADSMethod {
		return status.Errorf(codes.Unimplemented, "%s", m)
	}
	req := new(deltav1.Request)
	if err := ss.RecvMsg(req); err != nil {
		return err
	}
	if err := ss.SendHeader(metadata.Pairs("weighstation-accepted-pod", xdsresource.PodName(testNamespace, testPod))); err != nil {
		return err
	}
	own, topics := xdsresource.PodResourceName(testNamespace, testPod), xdsresource.TopicCollectionName(testNamespace)
	if req.GetInitialResourceVersions()[own] != o.version {
		// The pod's resource, and its namespace's Topic collection, empty.
		marker, err := anypb.New(xdsresource.TopicCollectionResource(true, 0))
		if err != nil {
			return err
		}
		if err := ss.SendMsg(&deltav1.Response{
			TypeUrl: xdsresource.TypeURL, Nonce: "1",
			Resources: []*deltav1.Resource{{Name: own, Version: o.version, Resource: o.resource}, {Name: topics, Version: "e.1", Resource: marker}},
		}); err != nil {
			return err
		}
	}
	for {
		if err := ss.RecvMsg(new(deltav1.Request)); err != nil {
			return nil
		}
	}
}

// tokenFile writes a token for the client to present.
func tokenFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// What a switchboard does with a connection to the operator's address, as
// a Service's ClusterIP does through a failover.
type route int

const (
	// refuse: nothing listens where the Service sends it (the old leader
	// stopping, or no endpoint): the connection is reset at once.
	refuse route = iota
	// blackhole: the Service still sends it to a pod that is gone: nothing
	// ever answers (the "i/o timeout" of a dial).
	blackhole
	// serve: to the operator that serves now.
	serve
)

// switchboard is the operator's one address, which keeps its port through
// a failover while what answers there changes, as a ClusterIP does.
type switchboard struct {
	lis net.Listener

	mu      sync.Mutex
	route   route
	to      *chanListener // the operator served, with serve
	held    []net.Conn    // blackholed, closed at the end
	holding chan struct{} // a signal for each connection blackholed
	served  []*freezable
	stopped bool
	// refusedDials and heldDials count the connections refused and
	// blackholed so far: the failover's phases last until the sidecar has
	// failed that many dials, not for a fixed time.
	refusedDials, heldDials int
}

func newSwitchboard(t *testing.T) *switchboard {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &switchboard{lis: lis, route: refuse, holding: make(chan struct{}, 1)}
	go s.run()
	t.Cleanup(s.close)
	return s
}

func (s *switchboard) addr() string { return s.lis.Addr().String() }

func (s *switchboard) run() {
	for {
		c, err := s.lis.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		switch {
		case s.stopped:
			_ = c.Close()
		case s.route == blackhole:
			s.held = append(s.held, c)
			s.heldDials++
			select {
			case s.holding <- struct{}{}:
			default:
			}
		case s.route == serve && s.to != nil:
			f := &freezable{Conn: c, thawed: make(chan struct{})}
			s.served = append(s.served, f)
			s.to.deliver(f)
		default:
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // a reset, as close to a refusal as an accepted connection gets
			}
			_ = c.Close()
			s.refusedDials++
		}
		s.mu.Unlock()
	}
}

// set routes new connections; with serve, to a new operator of its own
// listener.
func (s *switchboard) set(r route) net.Listener {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.route = r
	s.to = nil
	if r == serve {
		s.to = newChanListener(s.lis.Addr())
		return s.to
	}
	return nil
}

// dials returns how many connections were refused and blackholed so far.
func (s *switchboard) dials() (refused, held int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refusedDials, s.heldDials
}

// nextHeld waits at most within for a connection to be blackholed from
// now on: a dial that nothing will answer is in flight.
func (s *switchboard) nextHeld(within time.Duration) bool {
	select {
	case <-s.holding: // an older one
	default:
	}
	select {
	case <-s.holding:
		return true
	case <-time.After(within):
		return false
	}
}

// freeze makes every connection served so far stop moving bytes in either
// direction without closing: an operator whose node vanished.
func (s *switchboard) freeze() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.served {
		f.freeze()
	}
}

func (s *switchboard) close() {
	s.mu.Lock()
	s.stopped = true
	held := s.held
	s.held = nil
	served := s.served
	s.mu.Unlock()
	_ = s.lis.Close()
	for _, c := range held {
		_ = c.Close()
	}
	for _, f := range served {
		_ = f.Close()
	}
}

// chanListener hands a gRPC server the connections a switchboard routes
// to it.
type chanListener struct {
	addr  net.Addr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, conns: make(chan net.Conn, 64), done: make(chan struct{})}
}

func (l *chanListener) deliver(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		_ = c.Close()
	default:
		_ = c.Close() // nobody accepts: refused
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }

// freezable is a served connection that can stop moving bytes: reads and
// writes block until it is thawed (at the end) or closed.
type freezable struct {
	net.Conn
	mu     sync.Mutex
	frozen bool
	thawed chan struct{}
}

func (f *freezable) freeze() {
	f.mu.Lock()
	f.frozen = true
	f.mu.Unlock()
	// A read already blocked returns at once, and blocks again below.
	_ = f.Conn.SetReadDeadline(time.Now())
}

func (f *freezable) thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen {
		f.frozen = false
		close(f.thawed)
	}
}

func (f *freezable) wait() {
	f.mu.Lock()
	frozen := f.frozen
	f.mu.Unlock()
	if frozen {
		<-f.thawed
	}
}

func (f *freezable) Read(p []byte) (int, error) {
	for {
		f.wait()
		n, err := f.Conn.Read(p)
		if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
			f.mu.Lock()
			frozen := f.frozen
			f.mu.Unlock()
			if frozen {
				continue // the deadline of freeze, not the caller's
			}
		}
		return n, err
	}
}

// Close thaws the connection first, so that whoever blocks on it returns.
func (f *freezable) Close() error {
	f.thaw()
	return f.Conn.Close()
}

func (f *freezable) Write(p []byte) (int, error) {
	f.wait()
	return f.Conn.Write(p)
}
