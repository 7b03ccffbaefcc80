// Package xdsclient is the sidecar's source of configuration from the
// operator: a delta ADS client of the operator's xDS server that subscribes
// to its own pod's resource, to its namespace's Topic collection and to the
// Subscriptions its resource names (schema 2, meshconfig/xdsresource), applies
// each complete configuration through the same function as the file source,
// and acknowledges it (ACK), or refuses it with the reason (NACK) and keeps
// the last good one.
//
// It keeps its last good configuration while the operator is unreachable
// and reconnects with capped exponential backoff and jitter, reporting the
// versions it holds, so a reconnection resends nothing that did not change.
//
// go-control-plane's own client is a prototype (wildcard only, no
// reconnection); this one opens envoy's delta ADS method with messages of
// its own that are envoy's on the wire (api/xds/delta/v1), so that the
// sidecar links neither go-control-plane nor envoy's descriptors. The
// operator's tests run it against the real go-control-plane server. It
// imports no Kubernetes package.
package xdsclient

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"

	deltav1 "github.com/weighstation/weighstation/api/xds/delta/v1"
	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/meshconfig/xdsresource"
)

// Options configure a Client.
type Options struct {
	// Address is the operator's xDS address, host:port.
	Address string
	// Namespace, Pod and PodUID are this sidecar's pod (from the downward
	// API). A configuration for another UID of the same pod name is
	// refused.
	Namespace, Pod, PodUID string
	// TokenFile holds the pod's projected ServiceAccount token; it is read
	// again at every connection, because the kubelet rotates it.
	TokenFile string
	// Credentials secure the connection (TLS with the operator's CA).
	Credentials credentials.TransportCredentials
	// Conn, when set, is the connection to the operator (see Dial), which
	// Run uses instead of dialing Address with Credentials, and does not
	// close: the sidecar shares one connection between its xDS stream and
	// its reports.
	Conn grpc.ClientConnInterface
	// Apply installs a complete configuration, atomically, or refuses it
	// with the reason.
	Apply func(meshconfig.PodConfig) error
	// InitialBackoff and MaxBackoff bound the wait between attempts,
	// doubling with jitter from InitialBackoff up to MaxBackoff: the
	// client's own between streams, and the connection's own between
	// dials (gRPC's, on a connection from Dial or Options.Dial). The
	// backoff starts over after a stream that worked: one whose
	// configuration was applied and acknowledged, or that stayed up
	// stableStream.
	InitialBackoff, MaxBackoff time.Duration
	// RedialMaxBackoff caps the connection's own waits between dials
	// (gRPC's, from InitialBackoff, doubling), below MaxBackoff: a dial
	// costs the operator a TCP and TLS handshake at most (a refused one,
	// while no replica is selected, costs it nothing), not a stream and a
	// TokenReview, so a sidecar redials often enough to find a new leader
	// within RedialMaxBackoff of its Service selecting it.
	RedialMaxBackoff time.Duration
	// DialTimeout bounds one attempt to connect to the operator (TCP, TLS
	// and HTTP/2 handshakes): an address whose endpoint vanished, a SYN to
	// a deleted pod's IP that nothing answers, fails after it rather than
	// after gRPC's 20 s. gRPC gives an attempt max(DialTimeout, its
	// current backoff), so RedialMaxBackoff at most.
	DialTimeout time.Duration
	// KeepaliveTime and KeepaliveTimeout find an operator that vanished
	// without closing the connection (its node lost, a network partition):
	// after KeepaliveTime without anything received the sidecar pings, and
	// gives the connection up when no answer comes within KeepaliveTimeout.
	// KeepaliveTime is at least MinKeepaliveTime, gRPC's minimum, and
	// must not be shorter than the operator's enforcement (its xDS
	// server's MinTime, 10 s), which otherwise closes the connection for
	// too many pings.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// LocalAddr, when set, is the address connections are made from: a
	// benchmark's simulated sidecars each dial from a loopback address of
	// their own, as pods have their own IPs, so that the operator's
	// per-peer limits see one peer per pod. Nil: the system chooses.
	LocalAddr net.IP
	Log       logr.Logger
}

// Defaults of the connection to the operator, which runs in the cluster,
// a few milliseconds away.
//
// The backoff: a first retry soon enough that an operator failover is
// barely noticed, and a cap of a few seconds, so that a sidecar whose
// attempts failed through a failover (connection refused while the old
// leader stops, nothing at all while a Service still routes to its IP, the
// new leader refusing until it has computed every pod) tries again within
// MaxBackoff of the new leader serving. A fleet that lost the operator
// together does not return together: every wait is jittered, between half
// the backoff and all of it, and an attempt against a replica that refuses
// is one HTTP/2 stream on a connection already open.
//
// The dial timeout: a TLS handshake in the cluster takes milliseconds, so
// 5 s leaves room for an operator busy with every sidecar reconnecting at
// once, and a dial to a dead endpoint is given up well inside a failover.
//
// Keepalive: gRPC's minimum interval, and 5 s for the answer, so an
// operator lost without a FIN is noticed within 15 s of the last thing
// received, inside the 15 s Lease that its successor waits for.
const (
	DefaultInitialBackoff   = 100 * time.Millisecond
	DefaultMaxBackoff       = 2 * time.Second
	DefaultRedialMaxBackoff = 500 * time.Millisecond
	DefaultDialTimeout      = 5 * time.Second
	DefaultKeepaliveTime    = 10 * time.Second
	DefaultKeepaliveTimeout = 5 * time.Second
	// MinKeepaliveTime is gRPC's minimum ping interval.
	MinKeepaliveTime = 10 * time.Second
)

// connJitter is gRPC's jitter of the connection's backoff (±20 %), which
// its cap leaves room for, so that no wait exceeds MaxBackoff.
const connJitter = 0.2

// Client is a running xDS client.
type Client struct {
	opts Options
	// own is the pod's own resource; topics its namespace's Topic
	// collection, whose members' names begin with topicPrefix.
	own, topics, topicPrefix string

	mu sync.Mutex
	// held is the resource set of the configuration in force, by name: what
	// a reconnection reports, and what a refused update falls back to.
	held    map[string]received
	applied string // version of the configuration in force
	stats   Stats

	// order is the stream's Topics in a configuration's order (handle's
	// alone: streams run one at a time).
	order topicOrder
}

// topicOrder keeps the members of the Topic collection sorted by subject,
// as a configuration lists them, across responses: a change that moves no
// Topic (a limit) reuses the order instead of sorting thousands of Topics
// again.
type topicOrder struct {
	names    []string
	subjects map[string]string // name → subject when ordered
}

// topics returns the members of working in order, sorting again only when
// a member named in dirty came, went or changed its subject.
func (o *topicOrder) topics(working map[string]received, dirty map[string]bool, isMember func(string) bool) []*xdsv1.TopicPolicy {
	stale := o.subjects == nil
	for name := range dirty {
		if stale {
			break
		}
		if !isMember(name) {
			continue
		}
		r, present := working[name]
		subject, ordered := o.subjects[name]
		stale = present != ordered || (present && r.resource.GetTopic().GetSubject() != subject)
	}
	if stale {
		o.names = o.names[:0]
		o.subjects = map[string]string{}
		for name, r := range working {
			if isMember(name) {
				o.names = append(o.names, name)
				o.subjects[name] = r.resource.GetTopic().GetSubject()
			}
		}
		slices.SortFunc(o.names, func(a, b string) int {
			return cmp.Or(cmp.Compare(o.subjects[a], o.subjects[b]), cmp.Compare(a, b))
		})
	}
	topics := make([]*xdsv1.TopicPolicy, len(o.names))
	for i, name := range o.names {
		topics[i] = working[name].resource.GetTopic()
	}
	return topics
}

type received struct {
	resource *xdsv1.Resource
	version  string
}

// Stats count what the client did.
type Stats struct {
	Connects, Applied, Refused uint64
	// Connected is whether a stream is open now.
	Connected bool
	// LastError is why the last stream ended or the last update was
	// refused ("" for none).
	LastError string
}

// New returns a client; Run starts it.
func New(opts Options) (*Client, error) {
	switch {
	case opts.Address == "":
		return nil, errors.New("-operator is required: the operator's xDS address, host:port")
	case opts.Namespace == "" || opts.Pod == "":
		return nil, errors.New("-pod-namespace and -pod-name are required with -operator (from the downward API)")
	case opts.TokenFile == "":
		return nil, errors.New("-identity-token-file is required with -operator: the pod's projected ServiceAccount token")
	case opts.Credentials == nil && opts.Conn == nil:
		return nil, errors.New("no transport credentials: -ca-file is required with -operator")
	case opts.Apply == nil:
		return nil, errors.New("no apply function")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Client{
		opts: opts, own: xdsresource.PodResourceName(opts.Namespace, opts.Pod),
		topics: xdsresource.TopicCollectionName(opts.Namespace), topicPrefix: xdsresource.TopicCollectionPrefix(opts.Namespace),
		held: map[string]received{},
	}, nil
}

// withDefaults fills in the defaults of the connection's limits (a zero
// or negative one takes its default, and so does a MaxBackoff below
// InitialBackoff) and checks them.
func (o Options) withDefaults() (Options, error) {
	if o.InitialBackoff <= 0 {
		o.InitialBackoff = DefaultInitialBackoff
	}
	if o.MaxBackoff < o.InitialBackoff {
		o.MaxBackoff = max(DefaultMaxBackoff, o.InitialBackoff)
	}
	if o.RedialMaxBackoff <= 0 {
		o.RedialMaxBackoff = DefaultRedialMaxBackoff
	}
	o.RedialMaxBackoff = min(max(o.RedialMaxBackoff, o.InitialBackoff), o.MaxBackoff)
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.KeepaliveTime <= 0 {
		o.KeepaliveTime = DefaultKeepaliveTime
	}
	if o.KeepaliveTime < MinKeepaliveTime {
		return o, fmt.Errorf("xDS client: keepalive time %s is below gRPC's minimum of %s", o.KeepaliveTime, MinKeepaliveTime)
	}
	if o.KeepaliveTimeout <= 0 {
		o.KeepaliveTimeout = DefaultKeepaliveTimeout
	}
	return o, nil
}

// Version returns the version of the configuration in force ("" before the
// first).
func (c *Client) Version() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.applied
}

// Stats returns the client's counts.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Dial returns a connection to the operator's address with the default
// limits (DefaultDialTimeout, DefaultKeepaliveTime and
// DefaultKeepaliveTimeout, and the connection's own retries between
// DefaultInitialBackoff and DefaultRedialMaxBackoff); Options.Dial takes them
// from Options. It connects lazily and reconnects by itself; streams on it
// fail while it is down.
func Dial(address string, creds credentials.TransportCredentials) (*grpc.ClientConn, error) {
	return Options{Address: address, Credentials: creds}.Dial()
}

// Dial returns a connection to o.Address with o.Credentials and o's
// limits: an attempt to connect gives up after DialTimeout (or the
// current backoff, if longer), attempts are InitialBackoff apart, doubling
// up to RedialMaxBackoff (jitter included), and keepalive pings find a
// connection whose other end vanished.
func (o Options) Dial() (*grpc.ClientConn, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	dialOpts := []grpc.DialOption{grpc.WithTransportCredentials(o.Credentials)}
	if o.LocalAddr != nil {
		dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: o.LocalAddr}}
		dialOpts = append(dialOpts, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dialer.DialContext(ctx, "tcp", addr)
		}))
	}
	conn, err := grpc.NewClient(o.Address, append(dialOpts,
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: grpcbackoff.Config{
				BaseDelay:  o.InitialBackoff,
				Multiplier: 2,
				Jitter:     connJitter,
				MaxDelay:   time.Duration(float64(o.RedialMaxBackoff) / (1 + connJitter)),
			},
			MinConnectTimeout: o.DialTimeout,
		}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: o.KeepaliveTime, Timeout: o.KeepaliveTimeout}))...)
	if err != nil {
		return nil, fmt.Errorf("connection to the operator at %s: %w", o.Address, err)
	}
	return conn, nil
}

// Run connects and reconnects until ctx ends.
func (c *Client) Run(ctx context.Context) error {
	conn := c.opts.Conn
	if conn == nil {
		own, err := c.opts.Dial()
		if err != nil {
			return fmt.Errorf("xDS client: %w", err)
		}
		defer own.Close()
		conn = own
	}
	backoff := c.opts.InitialBackoff
	for ctx.Err() == nil {
		worked, err := c.stream(ctx, conn)
		c.mu.Lock()
		c.stats.Connected = false
		if err != nil && ctx.Err() == nil {
			c.stats.LastError = err.Error()
		}
		c.mu.Unlock()
		if ctx.Err() != nil {
			break
		}
		if worked {
			backoff = c.opts.InitialBackoff
		}
		// Equal jitter: at least half the backoff, so a fleet that lost the
		// operator together does not return together.
		wait := backoff/2 + rand.N(backoff/2+1)
		c.opts.Log.Info("xDS stream ended; keeping the configuration in force and retrying", "reason", errString(err), "retryIn", wait.String(), "version", c.Version())
		waitCtx, stopWaiting := context.WithCancel(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		case <-reconnected(waitCtx, conn):
			// The stream failed for want of a connection, which is back
			// (to the new leader, as like as not).
		}
		stopWaiting()
		backoff = min(2*backoff, c.opts.MaxBackoff)
	}
	return nil
}

// stateConn is what a *grpc.ClientConn tells of its connection.
type stateConn interface {
	GetState() connectivity.State
	WaitForStateChange(context.Context, connectivity.State) bool
}

// reconnected returns a channel that is closed when conn, which failed to
// connect (TRANSIENT_FAILURE), becomes ready, until ctx ends: its own
// backoff and dial are then over, and waiting longer gains nothing. It is
// nil (never ready) for a connection that is up or idle, where the stream
// failed for a reason of its own, or that cannot say. Between two failures
// to connect gRPC waits its own backoff, so it never wakes the client in a
// tight loop.
func reconnected(ctx context.Context, conn grpc.ClientConnInterface) <-chan struct{} {
	sc, ok := conn.(stateConn)
	if !ok || sc.GetState() != connectivity.TransientFailure {
		return nil
	}
	ch := make(chan struct{})
	go func() {
		state := connectivity.TransientFailure
		for sc.WaitForStateChange(ctx, state) {
			if state = sc.GetState(); state == connectivity.Ready {
				close(ch)
				return
			}
		}
	}()
	return ch
}

// deltaADSMethod is the one RPC: envoy's delta ADS, by its method path.
// The messages are deltav1's, envoy's on the wire (api/xds/delta/v1 says
// why the sidecar does not link envoy's own).
const deltaADSMethod = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"

var deltaADSDesc = grpc.StreamDesc{StreamName: "DeltaAggregatedResources", ClientStreams: true, ServerStreams: true}

// deltaADS is one delta ADS stream.
type deltaADS struct{ grpc.ClientStream }

func openDeltaADS(ctx context.Context, conn grpc.ClientConnInterface) (*deltaADS, error) {
	cs, err := conn.NewStream(ctx, &deltaADSDesc, deltaADSMethod)
	if err != nil {
		return nil, err
	}
	return &deltaADS{cs}, nil
}

func (s *deltaADS) Send(r *deltav1.Request) error { return s.SendMsg(r) }

func (s *deltaADS) Recv() (*deltav1.Response, error) {
	r := new(deltav1.Response)
	if err := s.RecvMsg(r); err != nil {
		return nil, err
	}
	return r, nil
}

// acceptedHeader is the operator's header that admits a stream (the
// operator's xds.AcceptedHeader; the sidecar does not import the operator).
const acceptedHeader = "weighstation-accepted-pod"

// stream runs one ADS stream until it fails. admitted reports whether the
// stream worked (see stableStream), which resets the backoff.
func (c *Client) stream(ctx context.Context, conn grpc.ClientConnInterface) (admitted bool, err error) {
	token, err := os.ReadFile(c.opts.TokenFile)
	if err != nil {
		return false, fmt.Errorf("reading the identity token: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+strings.TrimSpace(string(token)))
	st, err := openDeltaADS(ctx, conn)
	if err != nil {
		return false, fmt.Errorf("opening the stream: %w", err)
	}

	c.mu.Lock()
	working := maps.Clone(c.held)
	c.stats.Connects++
	c.mu.Unlock()
	c.order = topicOrder{}
	subscribed := map[string]bool{c.own: true, c.topics: true}
	// dirty names what changed in working since the last configuration
	// applied: applying one moves just those into held.
	dirty := map[string]bool{}
	initial := map[string]string{}
	for name, r := range working {
		if c.isMember(name) {
			// The collection's version says what it holds of them.
			continue
		}
		subscribed[name] = true
		initial[name] = r.version
	}
	first := &deltav1.Request{
		Node:                    &deltav1.Node{Id: xdsresource.PodName(c.opts.Namespace, c.opts.Pod)},
		TypeUrl:                 xdsresource.TypeURL,
		ResourceNamesSubscribe:  slices.Sorted(maps.Keys(subscribed)),
		InitialResourceVersions: initial,
	}
	if err := st.Send(first); err != nil {
		return false, fmt.Errorf("subscribing: %w", err)
	}
	// The operator admits a stream with a header before any configuration:
	// a sidecar that holds the current versions gets no response at all.
	header, err := st.Header()
	if err != nil || len(header.Get(acceptedHeader)) == 0 {
		_, err := st.Recv() // the refusal's status
		return false, err
	}
	c.mu.Lock()
	c.stats.Connected = true
	c.mu.Unlock()
	c.opts.Log.Info("xDS stream open", "operator", c.opts.Address, "version", c.Version())
	// The backoff starts over only for a stream that worked: one that
	// completed a response, or stayed up a while. An admitted stream that
	// the operator then refuses (a wrong -pod-name) keeps backing off.
	opened := time.Now()
	worked := false
	defer func() {
		if !worked && time.Since(opened) >= stableStream {
			worked = true
		}
		admitted = worked
	}()
	for {
		resp, err := st.Recv()
		if err != nil {
			return false, err
		}
		ack := &deltav1.Request{TypeUrl: xdsresource.TypeURL, ResponseNonce: resp.GetNonce()}
		change, waiting, err := c.handle(resp, working, subscribed, dirty)
		var refused *refusal
		if errors.As(err, &refused) && refused.fatal {
			// Nothing of this response can be used, and the operator will
			// not send it again on this stream: refuse it, and start over
			// from what is applied.
			c.nack(ack, err)
			_ = st.Send(ack)
			return false, err
		}
		if change != nil {
			if err := st.Send(change); err != nil {
				return false, fmt.Errorf("changing the subscription: %w", err)
			}
		}
		if waiting {
			// The shared resources it names are on their way; the response
			// that completes them is acknowledged, and with it this one.
			continue
		}
		if err != nil {
			c.nack(ack, err)
		} else {
			worked = true
		}
		if err := st.Send(ack); err != nil {
			return false, fmt.Errorf("acknowledging: %w", err)
		}
	}
}

// stableStream is how long an admitted stream must stay up, without a
// response to complete, for the backoff to start over.
const stableStream = 10 * time.Second

// refusal is a response the sidecar refuses; a fatal one cannot be used at
// all, and ends the stream.
type refusal struct {
	err   error
	fatal bool
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

func (c *Client) nack(ack *deltav1.Request, err error) {
	ack.ErrorDetail = &deltav1.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
	c.mu.Lock()
	c.stats.Refused++
	c.stats.LastError = err.Error()
	c.mu.Unlock()
	c.opts.Log.Error(err, "configuration refused (NACK); the last good one stays in force", "version", c.Version())
}

// isMember reports whether name is a member of the pod's namespace's
// Topic collection.
func (c *Client) isMember(name string) bool {
	return name != c.topics && strings.HasPrefix(name, c.topicPrefix)
}

// handle merges one response into working and applies the result when it is
// complete. It returns a subscription change to send (or nil), whether the
// configuration still waits for shared resources, and why it was refused.
// dirty gathers the names working changed by since the last configuration
// applied. It costs what the response holds plus one assembly: the set of
// resources the pod needs is worked out again only when the pod's own
// resource changed.
func (c *Client) handle(resp *deltav1.Response, working map[string]received, subscribed, dirty map[string]bool) (change *deltav1.Request, waiting bool, err error) {
	decoded := make(map[string]received, len(resp.GetResources()))
	complete := false
	for _, r := range resp.GetResources() {
		res, err := xdsresource.Decode(r.GetName(), r.GetResource())
		if err != nil {
			return nil, false, &refusal{err: err, fatal: true}
		}
		switch {
		case r.GetName() == c.own:
			if err := c.checkOwn(res.GetPod()); err != nil {
				return nil, false, &refusal{err: err, fatal: true}
			}
		case r.GetName() == c.topics:
			complete = res.GetTopicCollection().GetComplete()
		}
		decoded[r.GetName()] = received{resource: res, version: r.GetVersion()}
	}
	if complete {
		// The response holds every Topic: those it does not are gone.
		for name := range working {
			if _, sent := decoded[name]; !sent && c.isMember(name) {
				delete(working, name)
				dirty[name] = true
			}
		}
	}
	for name, r := range decoded {
		working[name] = r
		dirty[name] = true
	}
	for _, name := range resp.GetRemovedResources() {
		if name == c.own {
			// The operator removes a pod's resource only once the pod is
			// gone; until this process is stopped too, it keeps enforcing.
			c.opts.Log.Info("the operator removed this pod's configuration; keeping the one in force")
			continue
		}
		delete(working, name)
		dirty[name] = true
	}
	pod, ok := working[c.own]
	if !ok {
		return nil, false, nil // nothing to apply yet
	}
	if _, podChanged := decoded[c.own]; podChanged {
		wanted := map[string]bool{c.own: true, c.topics: true}
		for _, name := range pod.resource.GetPod().GetSubscriptions() {
			wanted[name] = true
		}
		var sub, unsub []string
		for name := range wanted {
			if !subscribed[name] {
				sub = append(sub, name)
				subscribed[name] = true
			}
		}
		for name := range subscribed {
			if !wanted[name] {
				unsub = append(unsub, name)
				delete(subscribed, name)
				delete(working, name)
				dirty[name] = true
			}
		}
		if len(sub)+len(unsub) > 0 {
			slices.Sort(sub)
			slices.Sort(unsub)
			change = &deltav1.Request{TypeUrl: xdsresource.TypeURL, ResourceNamesSubscribe: sub, ResourceNamesUnsubscribe: unsub}
		}
	}
	if _, ok := working[c.topics]; !ok {
		return change, true, nil // the collection is on its way
	}
	topics := c.order.topics(working, dirty, c.isMember)
	cfg, missing, err := xdsresource.AssembleFrom(pod.resource.GetPod(), topics, func(name string) (*xdsv1.Resource, bool) {
		r, ok := working[name]
		return r.resource, ok
	})
	if err != nil {
		return change, false, err
	}
	if len(missing) > 0 {
		return change, true, nil
	}
	c.mu.Lock()
	same := cfg.Version == c.applied
	c.mu.Unlock()
	if !same {
		if err := c.opts.Apply(cfg); err != nil {
			return change, false, err
		}
		c.opts.Log.Info("configuration applied", "version", cfg.Version, "topics", len(cfg.Topics), "subscriptions", len(cfg.Subscriptions))
	}
	c.mu.Lock()
	c.applied = cfg.Version
	for name := range dirty {
		if r, ok := working[name]; ok {
			c.held[name] = r
		} else {
			delete(c.held, name)
		}
	}
	if !same {
		c.stats.Applied++
	}
	c.mu.Unlock()
	clear(dirty)
	return change, false, nil
}

// checkOwn refuses a pod resource that is not for this pod.
func (c *Client) checkOwn(p *xdsv1.PodPolicy) error {
	if xdsresource.PodResourceName(p.GetNamespace(), p.GetPod()) != c.own {
		return fmt.Errorf("the resource %s holds the configuration of %s/%s", c.own, p.GetNamespace(), p.GetPod())
	}
	if c.opts.PodUID != "" && p.GetPodUid() != c.opts.PodUID {
		return fmt.Errorf("the configuration is for pod UID %s; this pod's UID is %s", p.GetPodUid(), c.opts.PodUID)
	}
	return nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
