// Command swarm is the sidecar side of `make bench-operator`: one simulated
// sidecar per pod, all in one process. Each has what makes the operator
// treat it as a pod's sidecar — its operator-facing half as a pod's sidecar
// builds it (sidecarapp.NewOperatorLink): its own xDS client
// (sidecar/xdsclient) on its own gRPC connection and ADS stream,
// authenticated by its own pod-bound token, over TLS to the operator's CA
// — but its Apply only records the configuration (no sidecar.Server, no
// NATS connection, no reports), so that 10,000 of them fit beside the
// operator on two cores. The xDS client ACKs what Apply accepted, so the
// operator's Ready means acknowledged.
// With Setup.StreamsPerConn above 1, that many sidecars share one gRPC
// connection (xdsclient.Options.Conn), each still on its own stream with
// its own token in its own call's metadata.
//
// The bench drives it over one TCP connection (test/bench/operator/opproto):
// it adds sidecars as it creates pods, and the swarm reports every applied
// configuration (when, its version, its Topics and Subscriptions) and, on
// request, how many bytes of configuration all sidecars received: a gRPC
// codec registered in place of the proto codec counts every
// DeltaDiscoveryResponse and its resources as gRPC decodes them.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/types/known/anypb"

	deltav1 "github.com/weighstation/weighstation/api/xds/delta/v1"
	"github.com/weighstation/weighstation/cmd/weighstation-sidecar/sidecarapp"
	"github.com/weighstation/weighstation/internal/tlsreload"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/meshconfig/xdsresource"
	"github.com/weighstation/weighstation/sidecar/xdsclient"
	"github.com/weighstation/weighstation/test/bench/harness"
	"github.com/weighstation/weighstation/test/bench/operator/opproto"
)

func main() {
	setupPath := flag.String("setup", "", "the bench's setup file (opproto.Setup, JSON)")
	bench := flag.String("bench", "", "the bench's address, host:port")
	maxBackoff := flag.Duration("max-backoff", 2*time.Second, "the xDS clients' longest retry wait")
	flag.Parse()
	if err := run(*setupPath, *bench, *maxBackoff); err != nil {
		fmt.Fprintln(os.Stderr, "swarm:", err)
		os.Exit(1)
	}
}

// counting wraps the proto codec: every message gRPC decodes in this
// process passes through it, and the sidecars' streams are the only gRPC
// here.
type counting struct {
	encoding.CodecV2
	mu sync.Mutex
	c  opproto.Counters
}

var codec *counting

func init() {
	codec = &counting{CodecV2: encoding.GetCodecV2("proto"), c: opproto.Counters{Resources: map[string]int64{}, ResourceBytes: map[string]int64{}}}
	if codec.CodecV2 == nil {
		panic("no proto codec registered")
	}
	encoding.RegisterCodecV2(codec)
}

func (c *counting) Unmarshal(data mem.BufferSlice, v any) error {
	size := data.Len()
	if err := c.CodecV2.Unmarshal(data, v); err != nil {
		return err
	}
	// The sidecar's client decodes envoy's wire format into messages of
	// its own (api/xds/delta/v1); go-control-plane's are accepted too.
	resp, ok := v.(interface {
		GetRemovedResources() []string
	})
	if !ok {
		return nil
	}
	var resources []interface {
		GetName() string
		GetResource() *anypb.Any
	}
	switch r := v.(type) {
	case *deltav1.Response:
		for _, res := range r.GetResources() {
			resources = append(resources, res)
		}
	case *discoveryv3.DeltaDiscoveryResponse:
		for _, res := range r.GetResources() {
			resources = append(resources, res)
		}
	default:
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.c.Responses++
	c.c.ResponseBytes += int64(size)
	c.c.Removed += int64(len(resp.GetRemovedResources()))
	for _, r := range resources {
		kind := "other"
		if n, err := xdsresource.ParseName(r.GetName()); err == nil {
			kind = n.Kind.String()
		}
		c.c.Resources[kind]++
		c.c.ResourceBytes[kind] += int64(len(r.GetResource().GetValue()))
	}
	return nil
}

func (c *counting) snapshot() *opproto.Counters {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.c
	s.Resources, s.ResourceBytes = map[string]int64{}, map[string]int64{}
	for k, v := range c.c.Resources {
		s.Resources[k] = v
	}
	for k, v := range c.c.ResourceBytes {
		s.ResourceBytes[k] = v
	}
	s.AppliedConfigs = appliedConfigs.Load()
	return &s
}

var (
	appliedConfigs atomic.Int64
	probe          atomic.Pointer[string]
)

func run(setupPath, benchAddr string, maxBackoff time.Duration) error {
	b, err := os.ReadFile(setupPath)
	if err != nil {
		return fmt.Errorf("reading the setup: %w", err)
	}
	var setup opproto.Setup
	if err := json.Unmarshal(b, &setup); err != nil {
		return fmt.Errorf("decoding the setup: %w", err)
	}
	conn, err := net.DialTimeout("tcp", benchAddr, 10*time.Second)
	if err != nil {
		return fmt.Errorf("reaching the bench at %s: %w", benchAddr, err)
	}
	out := newReporter(conn)
	defer out.close()
	// One CA pool for all: these are simulated sidecars, and each real one
	// reads the same mounted bundle.
	pool, err := tlsreload.NewReloadingPool(setup.CAFile, tlsreload.Options{})
	if err != nil {
		return err
	}
	creds := credentials.NewTLS(pool.ClientConfig(setup.ServerName))

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	var clientsMu sync.Mutex
	var links []*sidecarapp.OperatorLink
	conns := map[int]*grpc.ClientConn{} // shared connections, by number
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	add := func(p opproto.Pod) error {
		ns := p.Namespace
		if ns == "" {
			ns = setup.Namespace
		}
		opts := xdsclient.Options{
			Address: setup.XDSAddress, Namespace: ns, Pod: p.Name, PodUID: p.UID, TokenFile: p.TokenFile,
			Credentials: creds, Apply: applier(p.Index, out), InitialBackoff: xdsclient.DefaultInitialBackoff, MaxBackoff: maxBackoff,
			// Its own address, as a pod's: the operator's per-peer
			// TokenReview limit would otherwise admit one pod a second.
			LocalAddr: benchharness.SidecarIP(p.Index),
			Log:       logr.Discard(),
		}
		if k := setup.StreamsPerConn; k > 1 {
			// A connection of its own address per k sidecars (the
			// per-peer TokenReview limit then sees k pods behind it).
			n := p.Index / k
			clientsMu.Lock()
			conn, ok := conns[n]
			if !ok {
				o := opts
				o.LocalAddr = benchharness.SidecarIP(n)
				c, err := o.Dial()
				if err != nil {
					clientsMu.Unlock()
					return fmt.Errorf("connection %d: %w", n, err)
				}
				conn, conns[n] = c, c
			}
			clientsMu.Unlock()
			opts.Conn = conn
		}
		// Without a shared connection, the link dials its own with opts.
		l, err := sidecarapp.NewOperatorLink(sidecarapp.LinkOptions{XDS: opts})
		if err != nil {
			return fmt.Errorf("pod %s: %w", p.Name, err)
		}
		clientsMu.Lock()
		links = append(links, l)
		clientsMu.Unlock()
		l.Start(ctx)
		return nil
	}

	// Commands, until the bench closes the connection or ctx ends.
	cmdErr := make(chan error, 1)
	go func() {
		s := bufio.NewScanner(conn)
		s.Buffer(make([]byte, 64<<10), 64<<20)
		for s.Scan() {
			var cmd opproto.Command
			if err := json.Unmarshal(s.Bytes(), &cmd); err != nil {
				cmdErr <- fmt.Errorf("a command: %w", err)
				return
			}
			switch cmd.Op {
			case opproto.OpAdd:
				for _, p := range cmd.Pods {
					if err := add(p); err != nil {
						cmdErr <- err
						return
					}
				}
			case opproto.OpProbe:
				name := cmd.Topic
				probe.Store(&name)
			case opproto.OpCounters:
				ev := opproto.Event{Kind: opproto.KindCounters, ID: cmd.ID, Counters: codec.snapshot()}
				fillRuntime(&ev)
				out.send(ev)
			default:
				cmdErr <- fmt.Errorf("unknown command %q", cmd.Op)
				return
			}
		}
		cmdErr <- s.Err()
	}()
	select {
	case <-ctx.Done():
	case err = <-cmdErr:
	}
	cancel()
	stopped := make(chan struct{})
	go func() {
		clientsMu.Lock()
		all := links
		clientsMu.Unlock()
		for _, l := range all {
			<-l.Done()
		}
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		fmt.Fprintln(os.Stderr, "swarm: some xDS clients did not stop within 10 s")
	}
	stats := opproto.Event{Kind: opproto.KindStats, Counters: codec.snapshot()}
	clientsMu.Lock()
	for _, l := range links {
		s := l.XDS.Stats()
		stats.Connects += s.Connects
		stats.Applied += s.Applied
		stats.Refused += s.Refused
	}
	clientsMu.Unlock()
	fillRuntime(&stats)
	out.send(stats)
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// applier is one simulated sidecar's Apply: it accepts every
// configuration and reports what it holds.
func applier(index int, out *reporter) func(meshconfig.PodConfig) error {
	return func(cfg meshconfig.PodConfig) error {
		at := time.Now().UnixNano()
		appliedConfigs.Add(1)
		ev := opproto.Event{Kind: opproto.KindApplied, Pod: index, At: at, Version: cfg.Version, Topics: len(cfg.Topics), NSubs: len(cfg.Subscriptions), Probe: -1}
		names := make([]string, 0, len(cfg.Subscriptions))
		for _, s := range cfg.Subscriptions {
			names = append(names, s.Name)
			if s.KillSwitch.Engaged {
				ev.Engaged = append(ev.Engaged, s.Name)
			}
		}
		ev.Subs = opproto.SubsHash(names)
		if p := probe.Load(); p != nil {
			for _, t := range cfg.Topics {
				if t.Name == *p {
					ev.Probe = t.MaxMessageBytes
					break
				}
			}
		}
		out.send(ev)
		return nil
	}
}

func fillRuntime(e *opproto.Event) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	e.Goroutines, e.HeapInuse = runtime.NumGoroutine(), ms.HeapInuse
}

// reporter writes events to the bench from one goroutine; send never
// blocks (the queue is unbounded), so an Apply never waits on the socket.
type reporter struct {
	mu     sync.Mutex
	queue  []opproto.Event
	wake   chan struct{}
	closed bool
	done   chan struct{}
}

func newReporter(conn net.Conn) *reporter {
	r := &reporter{wake: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		w := bufio.NewWriterSize(conn, 256<<10)
		enc := json.NewEncoder(w)
		for {
			<-r.wake
			r.mu.Lock()
			batch, closed := r.queue, r.closed
			r.queue = nil
			r.mu.Unlock()
			for _, e := range batch {
				if err := enc.Encode(e); err != nil {
					fmt.Fprintln(os.Stderr, "swarm: reporting:", err)
					os.Exit(1)
				}
			}
			if err := w.Flush(); err != nil {
				fmt.Fprintln(os.Stderr, "swarm: reporting:", err)
				os.Exit(1)
			}
			if closed {
				_ = conn.Close()
				return
			}
		}
	}()
	return r
}

func (r *reporter) send(e opproto.Event) {
	r.mu.Lock()
	if !r.closed {
		r.queue = append(r.queue, e)
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// close sends what is queued and closes the connection.
func (r *reporter) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
	}
}
