// Command swarm is the sidecar side of `make bench-propagation`: many pods'
// sidecars in one process, each assembled as the sidecar command assembles
// one (cmd/weighstation-sidecar/sidecarapp), with what a real sidecar has
// of its own — a sidecar.Server on its own broker connection to one
// embedded nats-server, an xDS client (sidecar/xdsclient) on its own gRPC
// connection and ADS stream, authenticated by its own pod-bound token,
// trusting the operator's CA bundle through tlsreload — so the operator
// sees N real streams. They send no reports and serve no endpoints.
//
// Every configuration goes through sidecar.Server.SetConfig, the real apply
// path; the swarm wraps it (sidecarapp.Options.WrapApply) only to report,
// per sidecar, when SetConfig returned and which kill switch state it
// installed. Reports go to the bench as JSON lines (swarmproto.Event) over
// a TCP connection it listens for.
//
// The sidecars are not Started by default: Start adds the listener for
// applications and the automatic kill switch loop (a 50 ms ticker each),
// which no application uses here, and whose N tickers would compete for the
// same two cores as the operator being measured. -start turns them on.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof" //nolint:gosec // served only with -pprof, on loopback, for diagnosis
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats-server/v2/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/weighstation/weighstation/cmd/weighstation-sidecar/sidecarapp"
	"github.com/weighstation/weighstation/internal/tlsreload"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar/upstream"
	"github.com/weighstation/weighstation/sidecar/xdsclient"
	"github.com/weighstation/weighstation/test/bench/harness"
	"github.com/weighstation/weighstation/test/bench/propagation/swarmproto"
)

func main() {
	manifestPath := flag.String("manifest", "", "the bench's manifest (swarmproto.Manifest, JSON)")
	report := flag.String("report", "", "the bench's address for events, host:port")
	start := flag.Bool("start", false, "also Start each sidecar (application listener and automatic kill switch loop)")
	pprofAddr := flag.String("pprof", "", "serve net/http/pprof here (loopback), for diagnosis")
	profileDir := flag.String("profile-dir", "", "on SIGUSR1 start a CPU profile (swarm.cpu.pprof) here; on SIGUSR2 stop it and write a heap profile (swarm.heap.pprof)")
	initialBackoff := flag.Duration("initial-backoff", xdsclient.DefaultInitialBackoff, "the xDS clients' first retry wait")
	maxBackoff := flag.Duration("max-backoff", 2*time.Second, "the xDS clients' longest retry wait")
	flag.BoolVar(&ownIPs, "own-ips", false, "dial the operator from a loopback address of each sidecar's own (127.1.0.0/16), as pods have their own IPs: the operator's per-peer limits then see one peer per pod")
	flag.Parse()
	if *profileDir != "" {
		profileOnSignal(*profileDir)
	}
	if err := run(*manifestPath, *report, *start, *pprofAddr, *initialBackoff, *maxBackoff); err != nil {
		fmt.Fprintln(os.Stderr, "swarm:", err)
		os.Exit(1)
	}
}

// ownIPs is -own-ips.
var ownIPs bool

// pod is one running sidecar.
type pod struct {
	side *sidecarapp.Sidecar
	conn *grpc.ClientConn // with -own-ips
}

func run(manifestPath, reportAddr string, start bool, pprofAddr string, initialBackoff, maxBackoff time.Duration) error {
	b, err := os.ReadFile(manifestPath)
	if err != nil {
		return fmt.Errorf("reading the manifest: %w", err)
	}
	var m swarmproto.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("decoding the manifest: %w", err)
	}
	if pprofAddr != "" {
		go func() { _ = http.ListenAndServe(pprofAddr, nil) }() //nolint:gosec // diagnosis only
	}
	conn, err := net.DialTimeout("tcp", reportAddr, 10*time.Second)
	if err != nil {
		return fmt.Errorf("reaching the bench at %s: %w", reportAddr, err)
	}
	events := newReporter(conn)
	defer events.close()

	broker, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		return fmt.Errorf("configuring nats-server: %w", err)
	}
	go broker.Start()
	defer broker.Shutdown()
	if !broker.ReadyForConnections(10 * time.Second) {
		return errors.New("nats-server did not start within 10 s")
	}

	pods := make([]*pod, len(m.Pods))
	defer func() {
		// Bounded, so that the stats still reach the bench (events.close)
		// should a sidecar hang.
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			for _, p := range pods {
				if p != nil {
					p.close()
				}
			}
		}()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			fmt.Fprintln(os.Stderr, "swarm: some sidecars did not close within 10 s")
		}
	}()
	for i, spec := range m.Pods {
		p, err := newPod(i, spec, &m, broker.ClientURL(), start, initialBackoff, maxBackoff, events)
		if err != nil {
			return fmt.Errorf("pod %s: %w", spec.Name, err)
		}
		pods[i] = p
	}
	started := swarmproto.Event{Kind: swarmproto.KindStarted}
	fillRuntime(&started)
	events.send(started)

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	for _, p := range pods {
		p.side.Link.Start(ctx)
	}
	<-ctx.Done()
	stopped := make(chan struct{})
	go func() {
		for _, p := range pods {
			<-p.side.Link.Done()
		}
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		fmt.Fprintln(os.Stderr, "swarm: some xDS clients did not stop within 10 s")
	}
	stats := swarmproto.Event{Kind: swarmproto.KindStats}
	for _, p := range pods {
		s := p.side.XDS.Stats()
		stats.Connects += s.Connects
		stats.Applied += s.Applied
		stats.Refused += s.Refused
		if s.Connected {
			stats.Connected++
		}
	}
	fillRuntime(&stats)
	events.send(stats)
	return nil
}

func newPod(i int, spec swarmproto.Pod, m *swarmproto.Manifest, brokerURL string, start bool, initialBackoff, maxBackoff time.Duration, events *reporter) (*pod, error) {
	// Each sidecar reads the bundle itself, as each pod mounts it.
	pool, err := tlsreload.NewReloadingPool(m.CAFile, tlsreload.Options{})
	if err != nil {
		return nil, err
	}
	discard := logr.Discard()
	opts := sidecarapp.NewOptions()
	opts.Sidecar.Listen = "127.0.0.1:0"
	opts.BrokerURL = brokerURL
	opts.BrokerCredentials = &upstream.Credentials{} // the embedded nats-server has no authentication
	opts.MetricsListen, opts.HealthListen = "", ""
	opts.ReportInterval = 0
	opts.XDS = xdsclient.Options{
		Address: m.XDSAddress, Namespace: m.Namespace, Pod: spec.Name, PodUID: spec.UID, TokenFile: spec.TokenFile,
		Credentials:    credentials.NewTLS(pool.ClientConfig(m.ServerName)),
		InitialBackoff: initialBackoff, MaxBackoff: maxBackoff,
	}
	opts.Logger = &discard
	opts.WrapApply = func(setConfig func(meshconfig.PodConfig) error) func(meshconfig.PodConfig) error {
		return func(cfg meshconfig.PodConfig) error {
			err := setConfig(cfg)
			at := time.Now().UnixNano()
			if err != nil {
				events.send(swarmproto.Event{Kind: swarmproto.KindRefused, Pod: i, At: at, Version: cfg.Version, Error: err.Error()})
				return err
			}
			for _, s := range cfg.Subscriptions {
				if s.Name == m.Subscription {
					events.send(swarmproto.Event{Kind: swarmproto.KindApplied, Pod: i, Engaged: s.KillSwitch.Engaged, At: at, Version: cfg.Version})
					return nil
				}
			}
			events.send(swarmproto.Event{Kind: swarmproto.KindRefused, Pod: i, At: at, Version: cfg.Version,
				Error: fmt.Sprintf("applied, but without the Subscription %s", m.Subscription)})
			return nil
		}
	}
	opts.Unstarted = !start
	// Every sidecar is created before any connects (the bench measures
	// the swarm's memory in between, swarmproto.KindStarted).
	opts.DeferOperator = true
	p := &pod{}
	if ownIPs {
		opts.XDS.LocalAddr = benchharness.SidecarIP(i)
		if p.conn, err = opts.XDS.Dial(); err != nil {
			return nil, err
		}
		opts.XDS.Conn = p.conn
	}
	if p.side, err = sidecarapp.New(context.Background(), *opts); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// close stops the pod's sidecar and closes its own connection.
func (p *pod) close() {
	if p.side != nil {
		p.side.Close()
	}
	if p.conn != nil {
		_ = p.conn.Close()
	}
}

// profileOnSignal lets the bench bracket its change phase with a CPU
// profile of this process, and take the heap at its end.
func profileOnSignal(dir string) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		var cpu *os.File
		for sig := range sigs {
			switch {
			case sig == syscall.SIGUSR1 && cpu == nil:
				f, err := os.Create(filepath.Join(dir, "swarm.cpu.pprof"))
				if err == nil {
					err = pprof.StartCPUProfile(f)
				}
				if err != nil {
					fmt.Fprintln(os.Stderr, "swarm: CPU profile:", err)
					continue
				}
				cpu = f
			case sig == syscall.SIGUSR2 && cpu != nil:
				pprof.StopCPUProfile()
				cpu.Close()
				cpu = nil
				f, err := os.Create(filepath.Join(dir, "swarm.heap.pprof"))
				if err == nil {
					runtime.GC() // the heap profile is as of the last GC
					err = pprof.WriteHeapProfile(f)
					f.Close()
				}
				if err != nil {
					fmt.Fprintln(os.Stderr, "swarm: heap profile:", err)
				}
			}
		}
	}()
}

func fillRuntime(e *swarmproto.Event) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	e.Goroutines, e.HeapInuse, e.Sys = runtime.NumGoroutine(), ms.HeapInuse, ms.Sys
}

// reporter writes events to the bench in order, from one goroutine, so
// that an apply never waits on the socket (the channel is large enough
// for every sidecar to report several changes at once).
type reporter struct {
	ch   chan swarmproto.Event
	done chan struct{}

	mu     sync.Mutex // guards closed and sends against close
	closed bool
}

func newReporter(conn net.Conn) *reporter {
	r := &reporter{ch: make(chan swarmproto.Event, 1<<16), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		defer conn.Close()
		w := bufio.NewWriterSize(conn, 64<<10)
		enc := json.NewEncoder(w)
		for e := range r.ch {
			if err := enc.Encode(e); err != nil {
				fmt.Fprintln(os.Stderr, "swarm: reporting:", err)
				os.Exit(1)
			}
			if len(r.ch) == 0 {
				if err := w.Flush(); err != nil {
					fmt.Fprintln(os.Stderr, "swarm: reporting:", err)
					os.Exit(1)
				}
			}
		}
		_ = w.Flush()
	}()
	return r
}

func (r *reporter) send(e swarmproto.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.ch <- e
	}
}

// close sends what is queued and closes the connection.
func (r *reporter) close() {
	r.mu.Lock()
	r.closed = true
	close(r.ch)
	r.mu.Unlock()
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
	}
}
