// Package xds serves each sidecar its own pod's configuration over delta
// ADS (go-control-plane), authenticates every stream as a pod, and tracks
// from the sidecars' ACKs and NACKs how far each change has reached.
//
// A stream is refused until every pod has been computed once since this
// replica started or became the leader: the Cache (like go-control-plane's)
// answers a reconnecting sidecar that reports a resource the cache does not
// hold with a removal, so an operator that restarts would otherwise wipe its
// sidecars. Replicas that are not the leader never compute, so they refuse
// every stream, and the sidecar reconnects with backoff until it reaches
// the leader.
//
// Lock order: Server.mu, then Publisher.mu, then the Cache's own lock;
// Tracker.mu is taken alone or after Publisher.mu (ForgetResources), and
// the Tracker calls nothing while holding it. A Change's Members iterator
// takes the Cache's lock: propagation runs it under its own locks, which
// the Cache never takes.
package xds

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	serverconfig "github.com/envoyproxy/go-control-plane/pkg/server/config"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/weighstation/weighstation/meshconfig/xdsresource"
)

// deltaADSMethod is the one RPC the server answers: the state-of-the-world
// variant cannot signal the removal of a named resource, and its legacy
// wildcard would hand out every pod's configuration.
const deltaADSMethod = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"

// Options configure a Server.
type Options struct {
	// Listen is the gRPC address, host:port.
	Listen string
	// TLS serves the stream over TLS; nil serves plaintext, which only
	// tests do (the operator's flags always set it).
	TLS *tls.Config
	// Authenticator proves which pod a stream belongs to.
	Authenticator Authenticator
	// Now is the clock that token expiry is judged by; tests inject one.
	Now func() time.Time
	// Registerer takes the server's metrics; nil registers none.
	Registerer prometheus.Registerer
	Log        logr.Logger
	// Services are more services served beside delta ADS on the same
	// listener, behind the same authentication (IdentityFrom gives a
	// call's pod), keyed by the full names of their methods; each
	// registers itself on the gRPC server.
	Services map[string]func(grpc.ServiceRegistrar)
	// Limits bound each connection and stream; zero fields take
	// DefaultLimits'.
	Limits Limits
}

// responseBufferPool holds the buffers of messages in flight, in tiers of
// every power of two from 256 B to 8 MiB (above -xds-max-send-msg-size's
// default; larger ones are allocated as needed).
var responseBufferPool = func() mem.BufferPool {
	var exponents []uint8
	for e := uint8(8); e <= 23; e++ {
		exponents = append(exponents, e)
	}
	pool, err := mem.NewBinaryTieredBufferPool(exponents...)
	if err != nil {
		panic(fmt.Sprintf("the xDS server's buffer pool: %v", err))
	}
	return pool
}()

// connReadBuffer is each sidecar connection's read buffer.
const connReadBuffer = 8 << 10

// Server is the operator's xDS server. It is a manager Runnable that runs
// on every replica (the leader's Publisher alone is ever synced).
type Server struct {
	opts    Options
	pub     *Publisher
	tracker *Tracker
	metrics *serverMetrics

	mu       sync.Mutex
	streams  map[int64]*streamState
	listener net.Listener
	conns    *connTracker
	ready    chan struct{} // closed once listening

	// refusalLog samples the log of refused calls: a flood of junk tokens
	// is counted in full (refused_total), but logging each line would cost
	// more than refusing it.
	refusalLog *rate.Limiter
}

// Refused calls logged per second (and burst); the rest are counted only.
const (
	refusalLogRate  = 1
	refusalLogBurst = 10
)

// streamState is one stream's identity and what it was sent. Callbacks of
// one stream run on that stream's goroutine, so only the map that holds it
// needs the lock.
//
// It holds what was sent as changes, not as copies of everything the
// stream holds: a stream of a pod under thousands of Topics costs its
// pending responses' changes, not thousands of entries per response.
type streamState struct {
	id       Identity
	openedAt time.Time
	sawNode  bool
	started  bool // the first request was seen
	// pending is, for every response not yet settled, in order, the
	// versions it sent ("" for a removal): an ACK of a response means the
	// sidecar applied it and every earlier one.
	pending []sentChanges
	// unsettled are changes that the next ACK settles: those of responses
	// that a later response's NACK covered (the sidecar keeps them and
	// applies them with a later one) and removals by unsubscription;
	// unsettledMembers are such responses' collection members.
	unsettled        map[string]string
	unsettledMembers []memberChanges
	// subscriptions counts the names the stream subscribed to (less those
	// it unsubscribed from), for -xds-max-stream-resources; a name
	// subscribed twice counts twice, which only costs its own stream.
	subscriptions int
	// lastSubscribed is when the stream last subscribed to a name: a push
	// counts toward push latency only for a change made after it, so no
	// push of a change older than its subscription is counted (a push of
	// a newer change made before a later subscription is left out too).
	lastSubscribed time.Time
}

type sentChanges struct {
	nonce string
	// versions are the names the stream subscribed to by name; members
	// what it was sent of collections.
	versions map[string]string
	members  memberChanges
}

// memberChanges are what one response sent and removed of the
// collections it carries the markers of: the response's own slices, not
// copies (a complete response holds every Topic of the namespace), read
// only when the response is settled.
type memberChanges struct {
	resources []*discoveryResource
	removed   []string
}

// NewServer returns a server of pub's resources, recording ACKs in tracker.
func NewServer(pub *Publisher, tracker *Tracker, opts Options) *Server {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Limits = opts.Limits.withDefaults()
	// What a pod holds of a Topic follows from the version of the
	// collection it acknowledged, which the cache reads.
	tracker.setCollections(pub.Cache())
	return &Server{opts: opts, pub: pub, tracker: tracker, metrics: newServerMetrics(opts.Registerer), streams: map[int64]*streamState{}, ready: make(chan struct{}),
		refusalLog: rate.NewLimiter(refusalLogRate, refusalLogBurst)}
}

// NeedLeaderElection is false: every replica listens, so that a sidecar
// reaching a replica that is not the leader is told to retry rather than
// finding nothing there.
func (s *Server) NeedLeaderElection() bool { return false }

// Addr returns the address the server listens on, once it does.
func (s *Server) Addr(ctx context.Context) (net.Addr, error) {
	select {
	case <-s.ready:
		return s.listener.Addr(), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Start serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	lis, err := net.Listen("tcp", s.opts.Listen)
	if err != nil {
		return fmt.Errorf("xDS server: listening on %s: %w", s.opts.Listen, err)
	}
	s.conns = newConnTracker(lis)
	s.listener = s.conns
	close(s.ready)
	grpcOpts := []grpc.ServerOption{
		grpc.StreamInterceptor(s.authenticate),
		grpc.UnaryInterceptor(s.authenticateUnary),
		// Sidecars hold one stream each for their lifetime; keepalives find
		// the ones whose pod vanished without a FIN.
		// A connection without a stream for maxConnectionIdle is closed: a
		// sidecar always holds one, a junk caller holds only the socket.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, MaxConnectionIdle: maxConnectionIdle}),
		// A client pinging more often than every 10 s is closed
		// (GOAWAY too_many_pings): the sidecars' KeepaliveTime is longer.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// What one connection can make the server hold: its streams, the
		// size of each message and of a call's metadata, and how long its
		// handshakes may take (Limits).
		grpc.MaxConcurrentStreams(uint32(s.opts.Limits.MaxConcurrentStreams)),
		grpc.MaxRecvMsgSize(s.opts.Limits.MaxRecvMsgSize),
		grpc.MaxSendMsgSize(s.opts.Limits.MaxSendMsgSize),
		grpc.MaxHeaderListSize(maxHeaderListSize),
		grpc.ConnectionTimeout(handshakeTimeout),
		// Thousands of sidecars hold a connection each, idle between a
		// report or a push every few seconds: a write buffer per connection
		// held for life (32 KiB by default) is 32 MiB per thousand. Shared,
		// it goes back to a pool after each flush. The read buffer stays,
		// smaller: reports are a few KiB.
		grpc.SharedWriteBuffer(true),
		grpc.ReadBufferSize(connReadBuffer),
		// gRPC's default pool gives any message of 32 KiB to 1 MiB a 1 MiB
		// buffer, held until the sidecar has read it, and a namespace's
		// Topics go to every sidecar at once. A tier at every power of two
		// wastes at most half.
		experimental.BufferPool(responseBufferPool),
	}
	if s.opts.TLS != nil {
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(s.opts.TLS)))
	}
	gs := grpc.NewServer(grpcOpts...)
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(gs, &deltaOnly{srv: s})
	registered := map[string]bool{}
	for method, register := range s.opts.Services {
		// One service may have several methods: register it once.
		if service := path.Dir(method); !registered[service] {
			registered[service] = true
			register(gs)
		}
	}
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(s.conns) }()
	s.opts.Log.Info("xDS server listening", "address", lis.Addr().String(), "tls", s.opts.TLS != nil)
	select {
	case <-ctx.Done():
		// Streams never end by themselves: stop them, then return.
		gs.Stop()
		return nil
	case err := <-errc:
		return fmt.Errorf("xDS server: %w", err)
	}
}

// deltaOnly serves the delta ADS RPC alone.
//
// Each stream runs under a go-control-plane server of its own, whose
// context is the stream's: go-control-plane's stream loop ends when its
// server's context does, which is how a stream ends when its token
// expires (authenticate cancels it). Its receive loop does not watch the
// stream, and ending it from a goroutine per stream waiting on each
// receive would add a goroutine for every stream of every sidecar. The
// servers are a few small structs; stream IDs are numbered here, as each
// server would number its one stream 1.
type deltaOnly struct {
	discoverygrpc.UnimplementedAggregatedDiscoveryServiceServer
	srv     *Server
	streams atomic.Int64
}

func (d *deltaOnly) DeltaAggregatedResources(stream discoverygrpc.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	s, id := d.srv, d.streams.Add(1)
	callbacks := serverv3.CallbackFuncs{
		DeltaStreamOpenFunc:     func(ctx context.Context, _ int64, typeURL string) error { return s.onStreamOpen(ctx, id, typeURL) },
		DeltaStreamClosedFunc:   func(int64, *corev3Node) { s.onStreamClosed(id) },
		StreamDeltaRequestFunc:  func(_ int64, req *discoveryRequest) error { return s.onRequest(id, req) },
		StreamDeltaResponseFunc: func(_ int64, req *discoveryRequest, resp *discoveryResponse) { s.onResponse(id, req, resp) },
	}
	return serverv3.NewServer(stream.Context(), s.pub.Cache(), callbacks, serverconfig.DeactivateLegacyWildcard()).DeltaAggregatedResources(stream)
}

type identityKey struct{}

// IdentityFrom returns the pod that the stream of ctx proved it is (false
// outside an authenticated stream).
func IdentityFrom(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// AcceptedHeader is the response header that tells a sidecar its stream
// was admitted, naming the pod it was admitted as.
const AcceptedHeader = "weighstation-accepted-pod"

// admit checks that this replica serves method and that the caller of ctx
// proved which pod it is with a token that has not expired; it returns
// the pod and how long its token remains valid.
func (s *Server) admit(ctx context.Context, method string) (Identity, time.Duration, error) {
	if _, other := s.opts.Services[method]; method != deltaADSMethod && !other {
		s.metrics.refused.WithLabelValues("method").Inc()
		return Identity{}, 0, status.Errorf(codes.Unimplemented, "%s is not served: weighstation serves delta ADS and its own services only", method)
	}
	if !s.pub.Synced() {
		s.metrics.refused.WithLabelValues("not_ready").Inc()
		// The sidecar would retry on the same connection, to this replica,
		// whatever the Service selects by now: close it (connTracker).
		if p, ok := peer.FromContext(ctx); ok && s.conns != nil && s.conns.closeSoon(p.Addr) {
			s.metrics.refusedConnsClosed.Inc()
		}
		return Identity{}, 0, status.Error(codes.Unavailable, "this operator replica does not serve configuration now (not the leader, or still computing every pod); retry")
	}
	token, err := bearerToken(ctx)
	if err != nil {
		s.metrics.refused.WithLabelValues("no_token").Inc()
		return Identity{}, 0, status.Error(codes.Unauthenticated, err.Error())
	}
	id, err := s.opts.Authenticator.Authenticate(ctx, token)
	if err != nil {
		code, reason := codes.Unauthenticated, "unauthenticated"
		var r *refusal
		switch {
		case errors.As(err, &r):
			// A TokenGate's: a local check, the cache, or a rate limit.
			code, reason = r.code, r.reason
		case !errors.Is(err, errUnauthenticated):
			code, reason = codes.Unavailable, "review_failed" // the apiserver, not the caller
		}
		s.metrics.refused.WithLabelValues(reason).Inc()
		if s.refusalLog.Allow() {
			s.opts.Log.Info("refused an xDS call (sampled: weighstation_operator_xds_refused_total counts them all)", "method", method, "reason", err.Error(), "peer", peerOf(ctx))
		}
		if reason == "review_failed" && r == nil {
			return Identity{}, 0, status.Errorf(codes.Unavailable, "checking the token: %v", err)
		}
		return Identity{}, 0, status.Error(code, err.Error())
	}
	remaining := id.Expiry.Sub(s.opts.Now())
	if remaining <= 0 {
		s.metrics.refused.WithLabelValues("expired").Inc()
		return Identity{}, 0, status.Errorf(codes.Unauthenticated, "the token of %s expired at %s", id.NodeID(), id.Expiry.Format(time.RFC3339))
	}
	return id, remaining, nil
}

// authenticateUnary admits a call of one of Services' unary methods as
// authenticate admits a stream.
func (s *Server) authenticateUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	id, _, err := s.admit(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return handler(context.WithValue(ctx, identityKey{}, id), req)
}

// authenticate admits a stream once this replica serves and the caller
// proved which pod it is; the stream ends when the caller's token expires.
func (s *Server) authenticate(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	id, remaining, err := s.admit(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	// Tell the sidecar it is in, before any configuration: a reconnecting
	// sidecar that holds the current versions gets no response at all.
	if err := ss.SendHeader(metadata.Pairs(AcceptedHeader, id.NodeID())); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.WithValue(ss.Context(), identityKey{}, id))
	defer cancel()
	expired := make(chan struct{})
	// Ending the stream's context ends deltaOnly's stream loop.
	timer := time.AfterFunc(remaining, func() { close(expired); cancel() })
	defer timer.Stop()
	err = handler(srv, &expiringStream{ServerStream: ss, ctx: ctx, node: id.NodeID(), srv: s})
	select {
	case <-expired:
		// go-control-plane ends a stream whose context ended without an
		// error; the sidecar must learn why.
		return status.Errorf(codes.Unauthenticated, "the token of %s expired; reconnect with a fresh one", id.NodeID())
	default:
		return err
	}
}

// expiringStream is a stream whose context ends when the caller's token
// expires (see deltaOnly), and which names the flags of its size limits.
type expiringStream struct {
	grpc.ServerStream
	ctx  context.Context
	node string
	srv  *Server
}

func (e *expiringStream) Context() context.Context { return e.ctx }

func (e *expiringStream) RecvMsg(m any) error {
	err := e.ServerStream.RecvMsg(m)
	if isSizeError(err) {
		// gRPC has already ended the stream with its own message, which
		// gives the limit's value but not the flag: say it here.
		e.srv.metrics.refused.WithLabelValues("recv_msg_size").Inc()
		if e.srv.refusalLog.Allow() {
			e.srv.opts.Log.Info("a sidecar sent a message over the limit", "pod", e.node, "limit", "-xds-max-recv-msg-size", "bytes", e.srv.opts.Limits.MaxRecvMsgSize, "reason", err.Error())
		}
	}
	return err
}

// SendMsg refuses a message over -xds-max-send-msg-size itself, naming
// the flag: gRPC's own refusal names neither the flag nor whose limit it
// is.
func (e *expiringStream) SendMsg(m any) error {
	if msg, ok := m.(proto.Message); ok {
		if n, limit := proto.Size(msg), e.srv.opts.Limits.MaxSendMsgSize; n > limit {
			e.srv.metrics.refused.WithLabelValues("send_msg_size").Inc()
			e.srv.opts.Log.Info("a response is over the limit: the stream ends", "pod", e.node, "limit", "-xds-max-send-msg-size", "bytes", n)
			return status.Errorf(codes.ResourceExhausted, "the operator's response is %d bytes: over its -xds-max-send-msg-size (%d bytes)", n, limit)
		}
	}
	return e.ServerStream.SendMsg(m)
}

// isSizeError is gRPC's refusal of a message over a size limit.
func isSizeError(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.ResourceExhausted && strings.Contains(st.Message(), "larger than max")
}

func bearerToken(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if token, ok := strings.CutPrefix(v, "Bearer "); ok && token != "" {
			return token, nil
		}
	}
	return "", errors.New("no bearer token: send the pod's projected ServiceAccount token as 'authorization: Bearer <token>' metadata")
}

func (s *Server) onStreamOpen(ctx context.Context, streamID int64, typeURL string) error {
	id, ok := ctx.Value(identityKey{}).(Identity)
	if !ok {
		return status.Error(codes.Internal, "stream opened without an identity")
	}
	s.mu.Lock()
	s.streams[streamID] = &streamState{id: id, openedAt: time.Now()}
	s.mu.Unlock()
	s.metrics.streams.Inc()
	s.opts.Log.V(1).Info("xDS stream opened", "stream", streamID, "pod", id.NodeID(), "expires", id.Expiry)
	return nil
}

func (s *Server) onStreamClosed(streamID int64) {
	s.mu.Lock()
	st, ok := s.streams[streamID]
	delete(s.streams, streamID)
	s.mu.Unlock()
	if ok {
		s.metrics.streams.Dec()
		s.opts.Log.V(1).Info("xDS stream closed", "stream", streamID, "pod", st.id.NodeID())
	}
}

func (s *Server) stream(streamID int64) (*streamState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.streams[streamID]
	if !ok {
		return nil, status.Error(codes.Internal, "unknown stream")
	}
	return st, nil
}

// onRequest checks what a stream asks for and records its ACK or NACK.
// An error ends the stream with that status.
func (s *Server) onRequest(streamID int64, req *discoveryRequest) error {
	st, err := s.stream(streamID)
	if err != nil {
		return err
	}
	if n := max(len(req.GetInitialResourceVersions()), len(req.GetResourceNamesSubscribe())); n > s.opts.Limits.MaxStreamResources {
		// Refused before its names are looked at one by one.
		s.metrics.refused.WithLabelValues("stream_resources").Inc()
		return status.Errorf(codes.ResourceExhausted, "the request names %d resources: over the operator's -xds-max-stream-resources (%d)", n, s.opts.Limits.MaxStreamResources)
	}
	err = s.checkRequest(st, req)
	if err == nil {
		err = s.checkIncarnation(st)
	}
	if err != nil {
		s.metrics.refused.WithLabelValues("forbidden").Inc()
		s.opts.Log.Info("refused an xDS request", "pod", st.id.NodeID(), "reason", err.Error())
		return status.Error(codes.PermissionDenied, err.Error())
	}
	for _, name := range req.GetResourceNamesSubscribe() {
		if name == st.id.NodeID() {
			// A sidecar of the previous release (schema 1) reads its pod's
			// resource under the node ID: publish it, before the watch
			// that answers this request looks for it.
			s.pub.ServeV1(name)
			break
		}
	}
	if !st.started {
		// The sidecar reports what it holds (it reports only what it
		// applied): that is what it holds now, even if this operator never
		// sent it, as after a restart.
		st.started = true
		s.tracker.hold(st.id.key(), req.GetInitialResourceVersions(), s.pub.excludedFrom(st.id.NodeID()))
	}
	if unsubscribe := req.GetResourceNamesUnsubscribe(); len(unsubscribe) > 0 {
		st.subscriptions = max(0, st.subscriptions-len(unsubscribe))
		if st.unsettled == nil {
			st.unsettled = map[string]string{}
		}
		for _, name := range unsubscribe {
			st.unsettled[name] = ""
			for _, p := range st.pending {
				delete(p.versions, name)
			}
		}
	}
	if subscribe := req.GetResourceNamesSubscribe(); len(subscribe) > 0 {
		st.subscriptions += len(subscribe)
		st.lastSubscribed = time.Now()
		for _, name := range subscribe {
			delete(st.unsettled, name)
		}
	}
	if n := st.subscriptions; n > s.opts.Limits.MaxStreamResources {
		// The stream ends here: nothing of this request is served.
		s.metrics.refused.WithLabelValues("stream_resources").Inc()
		s.opts.Log.Info("ended an xDS stream subscribed to too many resources", "pod", st.id.NodeID(), "resources", n)
		return status.Errorf(codes.ResourceExhausted, "this stream subscribes to %d resources: over the operator's -xds-max-stream-resources (%d)", n, s.opts.Limits.MaxStreamResources)
	}
	if nonce := req.GetResponseNonce(); nonce != "" {
		s.settle(st, nonce, req)
	}
	if n := len(st.pending); n >= s.opts.Limits.MaxUnackedPushes {
		// A sidecar answers every response before it asks again (each
		// request may bring one more): one that keeps asking without
		// answering grows what is held for it.
		s.metrics.refused.WithLabelValues("unacked_pushes").Inc()
		s.opts.Log.Info("ended an xDS stream with too many unacknowledged responses", "pod", st.id.NodeID(), "unacknowledged", n)
		return status.Errorf(codes.ResourceExhausted, "%d responses on this stream are neither acknowledged nor refused: at the operator's -xds-max-unacked-pushes (%d); reconnect", n, s.opts.Limits.MaxUnackedPushes)
	}
	return nil
}

// checkIncarnation refuses a stream of a pod that was re-created under the
// same name: its ACKs would be counted for the new pod.
func (s *Server) checkIncarnation(st *streamState) error {
	uid, ok := s.pub.PodUID(st.id.NodeID())
	if !ok {
		return nil
	}
	if uid != "" && string(uid) != st.id.PodUID {
		return fmt.Errorf("pod %s was re-created: this stream's token is for UID %s, the pod's UID is now %s", st.id.NodeID(), st.id.PodUID, uid)
	}
	return nil
}

// checkRequest refuses a request that is not the pod's to make.
func (s *Server) checkRequest(st *streamState, req *discoveryRequest) error {
	if req.GetTypeUrl() != xdsresource.TypeURL {
		return fmt.Errorf("type %q is not served; the one type is %q", req.GetTypeUrl(), xdsresource.TypeURL)
	}
	if node := req.GetNode(); node != nil {
		if node.GetId() != st.id.NodeID() {
			return fmt.Errorf("node ID %q does not match the token's pod %q", node.GetId(), st.id.NodeID())
		}
		st.sawNode = true
	}
	if !st.sawNode {
		return fmt.Errorf("the first request must carry the node ID %q", st.id.NodeID())
	}
	if !st.started && len(req.GetResourceNamesSubscribe()) == 0 {
		return errors.New("an empty first subscription (the legacy wildcard) is not served: subscribe to your pod's resource by name (<namespace>/pod/<pod>)")
	}
	names := slices.Clone(req.GetResourceNamesSubscribe())
	for name := range req.GetInitialResourceVersions() {
		names = append(names, name)
	}
	for _, name := range names {
		if err := s.mayRead(st.id, name); err != nil {
			return err
		}
	}
	return nil
}

// mayRead allows a pod its own resource (of either schema), its
// namespace's Topic collection and the shared resources of its namespace.
func (s *Server) mayRead(id Identity, name string) error {
	if name == "*" {
		return errors.New("the wildcard subscription is not served: subscribe to resources by name")
	}
	parsed, err := xdsresource.ParseName(name)
	if err != nil {
		return err
	}
	switch {
	case parsed.Kind == xdsresource.KindPod && xdsresource.PodName(parsed.Namespace, parsed.Name) != id.NodeID():
		return fmt.Errorf("pod %s may not read %s: another pod's configuration", id.NodeID(), name)
	case parsed.Namespace != id.Namespace:
		return fmt.Errorf("pod %s may not read %s: another namespace's resource", id.NodeID(), name)
	}
	return nil
}

// settle records the ACK or NACK of the response with nonce. The sidecar
// applies in order, so an ACK of a response covers every earlier one: it
// then holds what it held, changed by every response up to that one.
func (s *Server) settle(st *streamState, nonce string, req *discoveryRequest) {
	i := slices.IndexFunc(st.pending, func(r sentChanges) bool { return r.nonce == nonce })
	if i < 0 {
		return // settled already
	}
	changes := st.unsettled
	if changes == nil {
		changes = map[string]string{}
	}
	members := st.unsettledMembers
	for _, p := range st.pending[:i+1] {
		maps.Copy(changes, p.versions)
		if len(p.members.resources)+len(p.members.removed) > 0 {
			members = append(members, p.members)
		}
	}
	st.pending = slices.Delete(st.pending, 0, i+1)
	st.unsettled, st.unsettledMembers = nil, nil
	if detail := req.GetErrorDetail(); detail != nil {
		// The refusal is charged to what the sidecar was sent and does
		// not hold: one of those is what it cannot apply. It keeps them,
		// and the next ACK says it applied them after all.
		// The members are kept as one batch of what each was last sent
		// as: a sidecar that keeps refusing holds one entry per member,
		// not every response's.
		collapsed := map[string]string{}
		for _, m := range members {
			m.versionsInto(collapsed, changes)
		}
		sent := maps.Clone(changes)
		maps.Copy(sent, collapsed)
		suspects := s.tracker.notHeld(st.id.key(), sent)
		st.unsettled, st.unsettledMembers = changes, nil
		if len(collapsed) > 0 {
			st.unsettledMembers = []memberChanges{memberChangesOf(collapsed)}
		}
		s.metrics.nacks.Inc()
		// The reason is the sidecar's to write, and is kept per resource
		// and pod, shown in status and logged: cut to a stated length.
		reason, truncated := truncateReason(detail.GetMessage())
		if truncated {
			s.metrics.nackReasonsTruncated.Inc()
		}
		s.tracker.nack(st.id.key(), suspects, reason, time.Now())
		s.opts.Log.Info("a sidecar refused its configuration (NACK)", "pod", st.id.NodeID(), "reason", reason, "resources", len(suspects))
		return
	}
	s.metrics.acks.Inc()
	// A Topic that leaves the pod out counts other pods only: the pod
	// applying it changes nothing of its status. The lookup is skipped
	// for an ACK without collection members.
	var excluded []string
	if len(members) > 0 {
		excluded = s.pub.excludedFrom(st.id.NodeID())
	}
	s.tracker.applyWithMembers(st.id.key(), changes, members, excluded)
}

// versionsInto adds to versions the members' versions ("" for a
// removal), those of a collection whose marker is in markers.
func (m memberChanges) versionsInto(versions, markers map[string]string) {
	for _, r := range m.resources {
		if _, ok := collectionOf(r.GetName(), markers); ok {
			versions[r.GetName()] = r.GetVersion()
		}
	}
	for _, name := range m.removed {
		if _, ok := collectionOf(name, markers); ok {
			versions[name] = ""
		}
	}
}

// memberChangesOf is versions (a member's version, "" for a removal) as
// one batch of member changes.
func memberChangesOf(versions map[string]string) memberChanges {
	var m memberChanges
	for name, v := range versions {
		if v == "" {
			m.removed = append(m.removed, name)
			continue
		}
		m.resources = append(m.resources, &discoveryResource{Name: name, Version: v})
	}
	return m
}

func (s *Server) onResponse(streamID int64, _ *discoveryRequest, resp *discoveryResponse) {
	st, err := s.stream(streamID)
	if err != nil {
		return
	}
	// A response that carries a collection's marker carries its members:
	// those are kept as the response's slices, the rest by name.
	var markers map[string]string
	for _, r := range resp.GetResources() {
		if _, ok := xdsresource.IsCollection(r.GetName()); ok {
			if markers == nil {
				markers = map[string]string{}
			}
			markers[r.GetName()] = r.GetVersion()
		}
	}
	sent := make(map[string]string, len(markers)+1)
	for _, r := range resp.GetResources() {
		if _, member := collectionOf(r.GetName(), markers); !member {
			sent[r.GetName()] = r.GetVersion()
		}
	}
	for _, name := range resp.GetRemovedResources() {
		if _, member := collectionOf(name, markers); !member {
			sent[name] = ""
		}
	}
	sc := sentChanges{nonce: resp.GetNonce(), versions: sent}
	if markers != nil {
		sc.members = memberChanges{resources: resp.GetResources(), removed: resp.GetRemovedResources()}
	}
	st.pending = append(st.pending, sc)
	now := time.Now()
	s.pub.changedSince(resp.GetResources(), st.lastSubscribed, func(changed time.Time) {
		s.metrics.pushLatency.Observe(now.Sub(changed).Seconds())
	})
	s.metrics.pushes.Inc()
}

func peerOf(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
