// Package sidecarcmd is the sidecar's command line: its flags, its start
// (endpoints bound first, the broker connection, the configuration from the
// operator, a file or the defaults), and its drain on SIGTERM. Both
// `weighstation sidecar` and the weighstation-sidecar binary run it.
//
// It imports no Kubernetes package (cmd/weighstation-sidecar's test checks
// the whole binary): Go runs the init of every package a binary links, and
// the Kubernetes libraries' would cost every pod's sidecar their memory.
package sidecarcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/weighstation/weighstation/internal/logflags"
	"github.com/weighstation/weighstation/internal/tlsreload"
	"github.com/weighstation/weighstation/internal/tokenfile"
	"github.com/weighstation/weighstation/internal/version"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar"
	"github.com/weighstation/weighstation/sidecar/brokercred"
	"github.com/weighstation/weighstation/sidecar/configfile"
	"github.com/weighstation/weighstation/sidecar/report"
	"github.com/weighstation/weighstation/sidecar/upstream"
	"github.com/weighstation/weighstation/sidecar/xdsclient"
)

// Run runs the sidecar with the command line args (its flags), until
// SIGINT or SIGTERM, then drains what it holds and returns.
func Run(args []string) error {
	fs := flag.NewFlagSet("sidecar", flag.ExitOnError)
	opts := sidecar.DefaultOptions
	fs.StringVar(&opts.Listen, "listen", opts.Listen, "where the application connects")
	brokerURL := fs.String("broker", "nats://weighstation-broker:4222", "the broker's URL")
	tokenFile := fs.String("token-file", "", "file holding the broker token, for a broker run with -token-file (without it and -nkey-seed-file, a sidecar with -operator asks the operator for its own broker credential, held in memory only)")
	nkeySeedFile := fs.String("nkey-seed-file", "", "file holding the sidecar's nkey seed, instead of a token")
	brokerTLSCA := fs.String("broker-tls-ca", "", "PEM file of the CAs that sign the broker's TLS certificate: the connection to the broker then uses TLS, verified against them (a tls:// -broker URL, or a broker that requires TLS, uses TLS with the system's roots without it)")
	configPath := fs.String("config", "", "pod configuration file (JSON or YAML), reloaded on change; empty: the documented defaults, and the sidecar is ready at once")
	reload := fs.Duration("reload-interval", time.Second, "how often the configuration file is checked")
	fs.IntVar(&opts.MaxConnections, "max-connections", opts.MaxConnections, "most application connections")
	fs.Int64Var(&opts.MemoryBudget, "memory-budget", opts.MemoryBudget, "bytes all pending messages, and the application connections' read buffers past their first 4 KiB each, may hold together; past it, non-essential subscriptions are shed first")
	goMemLimit := fs.String("go-memory-limit", "auto", "Go's soft memory limit (GOMEMLIMIT), near which the garbage collector works harder rather than let the heap grow to twice what is live: "+
		"auto, -memory-budget plus 32 MiB (unless GOMEMLIMIT is set in the environment); off, none; or a number of bytes. Keep the container's memory limit at least 16 MiB above it (docs/sidecar.md, \"Memory\")")
	fs.DurationVar(&opts.ReadBudgetWait, "read-budget-wait", opts.ReadBudgetWait, "how long a PUB whose body needs a larger read buffer waits for room in -memory-budget; past it, the body is skipped unread and the publish refused with a Permissions Violation, the connection kept")
	fs.IntVar(&opts.AppSendBuffer, "app-send-buffer", opts.AppSendBuffer, "kernel send buffer (SO_SNDBUF) of each application connection, in bytes, and the most its write batches hold; 0: the kernel's autotuning (megabytes on loopback, where queued messages escape the sidecar's limits, drop counts and latency)")
	metricsListen := fs.String("metrics-listen", "127.0.0.1:9091", "address of /metrics (Prometheus) and /debug/latency; empty disables them. "+
		"Loopback by default, for a sidecar run by hand: in a pod, give :9091 (or $(POD_IP):9091) for Prometheus to scrape")
	fs.BoolVar(&opts.OverlapUpstreamWrites, "overlap-upstream-writes", opts.OverlapUpstreamWrites, "when a connection's reader is behind its application (a read filled its buffer), hand its publishes to the upstream writer goroutine so that the write to the broker overlaps the next read on another core; for machines with cores to spare (on 2 cores it costs about what it saves); at most 256 KiB wait behind a write in progress")
	pprofOn := fs.Bool("debug-pprof", false, "also serve Go's profiles at /debug/pprof/ on the metrics address (for benchmarking; off in production)")
	healthListen := fs.String("health-listen", ":8081", "address of the probes, and nothing else: /livez (200 while the process serves) and /readyz "+
		"(200 once a configuration is in force: the operator's with -operator, the -config file's, or the defaults without either; the broker connection is listed in "+
		"/readyz?verbose but never makes it fail, since the outage buffer covers it); empty disables them. Every interface by default: "+
		"the kubelet probes the pod's IP, and the probes tell nothing but up and ready")
	drainGrace := fs.Duration("drain-grace", defaultDrainGrace, "on SIGTERM, how long the sidecar keeps delivering what it holds to the applications "+
		"connected (it accepts no new ones, and the broker stops sending their Subscriptions' messages) before it drops the rest, counted with reason shutdown, "+
		"and exits; well inside the pod's terminationGracePeriodSeconds (30s by default)")
	finalReport := fs.Duration("final-report-timeout", defaultFinalReportTimeout, "with -operator: after the drain, how long the sidecar waits for the operator "+
		"to acknowledge its last report (what it delivered and dropped up to its end, the drain's shutdown drops included); 0 sends none")
	var xdsOpts xdsclient.Options
	fs.StringVar(&xdsOpts.Address, "operator", "", "the operator's xDS address, host:port (e.g. weighstation-xds.weighstation-system.svc:9443); the pod's configuration comes from there instead of -config")
	fs.StringVar(&xdsOpts.TokenFile, "identity-token-file", "/var/run/secrets/weighstation.io/xds/token", "with -operator: the pod's projected ServiceAccount token (audience weighstation.io/xds), re-read at every connection")
	caFile := fs.String("ca-file", "/etc/weighstation/ca/ca.crt", "with -operator: the operator's CA bundle (the mounted weighstation-ca-bundle ConfigMap), re-read so that a rotation reaches this pod")
	serverName := fs.String("operator-server-name", "", "with -operator: the name the operator's certificate must carry (default: -operator's host)")
	fs.StringVar(&xdsOpts.Pod, "pod-name", os.Getenv("POD_NAME"), "with -operator: this pod's name (downward API; default $POD_NAME)")
	fs.StringVar(&xdsOpts.Namespace, "pod-namespace", os.Getenv("POD_NAMESPACE"), "with -operator: this pod's namespace (downward API; default $POD_NAMESPACE)")
	fs.StringVar(&xdsOpts.PodUID, "pod-uid", os.Getenv("POD_UID"), "with -operator: this pod's UID (downward API; default $POD_UID); a configuration for another UID is refused, and every report names it")
	reportInterval := fs.Duration(report.IntervalFlag, report.DefaultInterval, "with -operator: how often the sidecar reports what it measured to the operator, "+
		"which writes it into the status of the Subscriptions and Topics (latency histograms of the interval, delivery, drop and publish totals, kill switches); "+
		"at least 1s; 0 sends no reports")
	showVersion := fs.Bool("version", false, "print the version and exit")
	var logOpts logflags.Options
	logOpts.BindGroup(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *showVersion {
		fmt.Println(version.String())
		return nil
	}
	if xdsOpts.Address != "" && *configPath != "" {
		return errors.New("-operator and -config are two sources of the same configuration: give one")
	}
	if err := report.CheckInterval(*reportInterval); err != nil {
		return err
	}
	if *drainGrace < 0 {
		return fmt.Errorf("-drain-grace must not be negative (0 drops at once what the sidecar holds), got %s", *drainGrace)
	}
	if *reload <= 0 {
		return fmt.Errorf("-reload-interval must be positive (how often -config is checked), got %s", *reload)
	}
	if opts.MaxConnections < 1 {
		return fmt.Errorf("-max-connections must be at least 1, got %d", opts.MaxConnections)
	}
	if opts.MemoryBudget < 1 {
		return fmt.Errorf("-memory-budget must be at least 1 byte, got %d", opts.MemoryBudget)
	}
	goMemLimitInForce, err := applyGoMemoryLimit(*goMemLimit, opts.MemoryBudget)
	if err != nil {
		return err
	}
	if *finalReport < 0 {
		return fmt.Errorf("-final-report-timeout must not be negative (0 sends no last report), got %s", *finalReport)
	}
	log := logOpts.New().WithName("sidecar")
	// The endpoints' addresses are taken first: a busy port stops the
	// sidecar here, naming its flag.
	health, err := bindEndpoint("health-listen", *healthListen)
	if err != nil {
		return err
	}
	defer health.close()
	metrics, err := bindEndpoint("metrics-listen", *metricsListen)
	if err != nil {
		return err
	}
	defer metrics.close()
	upOpts := upstream.DefaultOptions
	upOpts.URL, upOpts.Log = *brokerURL, log.WithName("broker")
	var issued *brokercred.Holder // the operator's credential; nil with a token or nkey
	switch {
	case *nkeySeedFile != "" && *tokenFile != "":
		return errors.New("-token-file and -nkey-seed-file are two broker credentials: give one")
	case *nkeySeedFile != "":
		cred, err := upstream.NkeyFromSeedFile(*nkeySeedFile)
		if err != nil {
			return fmt.Errorf("-nkey-seed-file: %w", err)
		}
		upOpts.Credentials = cred
	case *tokenFile != "" || xdsOpts.Address == "":
		token, err := tokenfile.Read(*tokenFile)
		if err != nil {
			return fmt.Errorf("%w (or give -operator, and the operator issues this sidecar its broker credential)", err)
		}
		upOpts.Credentials = upstream.Credentials{Token: token}
	default:
		issued = brokercred.New()
		upOpts.Credentials = issued.Credentials()
		upOpts.OnRefused = func(err error) { issued.Renew("the broker refused the credential: " + err.Error()) }
	}
	if *brokerTLSCA != "" {
		cfg, err := upstream.TLSFromCAFile(*brokerTLSCA)
		if err != nil {
			return fmt.Errorf("-broker-tls-ca: %w", err)
		}
		upOpts.TLS = cfg
	}
	// The broker may not be there yet (it restarts, or the cluster is
	// coming up): the connection keeps trying while the sidecar serves its
	// applications and holds their publishes, bounded.
	up, err := upstream.Dial(upOpts)
	if err != nil {
		return err
	}
	defer up.Close()
	if !up.Connected() {
		log.Info("the broker is not reachable yet; serving applications and retrying", "broker", up.URL(),
			"retryEvery", upstream.ReconnectWait.String(), "outageBufferBytes", upstream.OutageBufferBytes)
	}
	opts.Log = log
	if issued != nil {
		// The pod's inbox space comes with its credential, which the
		// broker lets subscribe under it alone: the sidecar translates its
		// applications' inboxes into it (docs/sidecar.md, "Subject
		// permissions"), and is not ready before it knows it.
		opts.InboxPrefix = func() (string, bool) {
			if _, err := issued.UserJWT(); err != nil {
				return "", false
			}
			return issued.InboxPrefix(), true
		}
	}
	s, err := sidecar.New(up, opts)
	if err != nil {
		return err
	}
	var reporter *report.Reporter // nil: no reports
	if xdsOpts.Address != "" && *reportInterval > 0 {
		reporter, err = report.New(report.Options{Source: s, PodUID: xdsOpts.PodUID, TokenFile: xdsOpts.TokenFile,
			Interval: *reportInterval, Log: log.WithName("report")})
		if err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// The connection to the operator outlives the signal: the last report
	// goes out after the drain.
	operatorCtx, stopOperator := context.WithCancel(context.Background())
	defer stopOperator()
	// Up before the configuration is read, so that /livez answers while
	// /readyz says what is missing.
	health.serve(s.HealthHandler(), log)
	switch {
	case xdsOpts.Address != "":
		// The operator's configuration: not ready until it arrives; the
		// documented defaults govern meanwhile.
		xdsOpts.Apply = s.SetConfig
		var switchBroker func()
		if issued != nil {
			// A configuration that widens the pod's subjects waits for a
			// credential that allows them, and the broker connection
			// moves to it first; a narrower one applies at once (the
			// sidecar enforces it before the broker does).
			xdsOpts.Apply = func(cfg meshconfig.PodConfig) error {
				if !issued.WaitCovers(operatorCtx, cfg, credentialWideningTimeout) {
					log.Info("applying a configuration that the broker credential does not allow yet: the broker refuses its new subjects until the credential is renewed", "timeout", credentialWideningTimeout.String())
				}
				return s.SetConfig(cfg)
			}
			switchBroker = func() { _ = up.Renew(errCredentialRenewed) } // a failure is logged; the old connection serves on
		}
		xdsOpts.Log = log.WithName("xds")
		if err := startXDS(operatorCtx, xdsOpts, *caFile, *serverName, reporter, issued, switchBroker, log); err != nil {
			return err
		}
	case *configPath == "":
		// Standalone: the documented defaults are this pod's configuration
		// by choice, so the sidecar is ready.
		if err := s.SetConfig(meshconfig.DefaultConfig(meshconfig.DefaultPolicy)); err != nil {
			return err
		}
		logStandaloneDefaults(log, meshconfig.DefaultPolicy)
	default:
		err := configfile.Watch(ctx, *configPath, *reload, func(cfg meshconfig.PodConfig) error {
			if err := s.SetConfig(cfg); err != nil {
				return err
			}
			log.Info("configuration applied", "version", cfg.Version, "topics", len(cfg.Topics), "subscriptions", len(cfg.Subscriptions))
			return nil
		}, func(err error) { log.Error(err, "configuration refused; the last good one stays in force") })
		if err != nil {
			return err
		}
	}
	if err := s.Start(); err != nil {
		return fmt.Errorf("-listen: %w", err)
	}
	if metrics != nil {
		// The Go runtime's and the process's own metrics beside the
		// sidecar's: memory, goroutines, CPU, and the allocation count
		// that make bench-sidecar-core divides by the messages.
		served := []prometheus.Collector{s.Collector(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
		if reporter != nil {
			served = append(served, reporter.Collector())
		}
		handler := withMetrics(s.Handler(), served...)
		if *pprofOn {
			mux := http.NewServeMux()
			mux.Handle("/", handler)
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			handler = mux
		}
		metrics.serve(handler, log)
	}
	log.Info("serving", "listen", s.Addr().String(), "broker", *brokerURL, "metrics", metrics.addr(), "health", health.addr(),
		"memoryBudget", opts.MemoryBudget, "goMemoryLimit", goMemLimitInForce)
	<-ctx.Done()
	stop() // a second signal stops the process at once
	log.Info("shutting down: draining what the sidecar holds", "drainGrace", drainGrace.String())
	logShutdown(log, s.Shutdown(*drainGrace))
	if reporter != nil && *finalReport > 0 {
		flushCtx, cancel := context.WithTimeout(context.Background(), *finalReport)
		err := reporter.Flush(flushCtx)
		cancel()
		if err != nil {
			log.Error(err, "the last report did not reach the operator: its status lacks the sidecar's last counts", "finalReportTimeout", finalReport.String())
		} else {
			log.Info("last report acknowledged by the operator")
		}
	}
	return nil
}

// withMetrics serves /metrics from collectors, and everything else from h.
func withMetrics(h http.Handler, collectors ...prometheus.Collector) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors...)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", h)
	return mux
}

// credentialWideningTimeout bounds how long a configuration that needs a
// wider broker credential waits for it before it applies anyway.
const credentialWideningTimeout = 10 * time.Second

// errCredentialRenewed is why the broker connection is replaced when the
// credential is renewed: nats-server reads a user's permissions and expiry
// at CONNECT only. upstream.Client.Renew moves to a new connection with an
// overlap (no message lost; possible duplicates counted).
var errCredentialRenewed = errors.New("the broker credential was renewed; moving to a connection made with the new one")

// startXDS runs the xDS client, the reporter unless it is nil, and the
// request for the broker credential (and its renewals, each followed by
// switchBroker) unless issued is nil, in the
// background, on one connection to the operator. Its trust comes from the
// CA bundle file, which may not be mounted yet when the pod starts (the
// operator publishes it into the namespace): it is retried until it is.
func startXDS(ctx context.Context, opts xdsclient.Options, caFile, serverName string, reporter *report.Reporter, issued *brokercred.Holder, switchBroker func(), log logr.Logger) error {
	if serverName == "" {
		host, _, err := net.SplitHostPort(opts.Address)
		if err != nil {
			return fmt.Errorf("-operator %q: %w", opts.Address, err)
		}
		serverName = host
	}
	// Check the rest of the options now, so that a missing flag is an
	// error at start rather than a retry loop.
	opts.Credentials = insecure.NewCredentials()
	if _, err := xdsclient.New(opts); err != nil {
		return err
	}
	go func() {
		wait := xdsclient.DefaultInitialBackoff
		for {
			pool, err := tlsreload.NewReloadingPool(caFile, tlsreload.Options{Log: log.WithName("ca")})
			if err == nil {
				opts.Credentials = credentials.NewTLS(pool.ClientConfig(serverName))
				break
			}
			log.Info("waiting for the operator's CA bundle", "caFile", caFile, "reason", err.Error())
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, 5*time.Second)
		}
		// One TLS connection per sidecar carries its xDS stream and its
		// reports; it connects lazily and reconnects by itself.
		conn, err := xdsclient.Dial(opts.Address, opts.Credentials)
		if err != nil {
			log.Error(err, "xDS client")
			return
		}
		defer conn.Close()
		opts.Conn = conn
		client, err := xdsclient.New(opts)
		if err != nil {
			log.Error(err, "xDS client")
			return
		}
		var wg sync.WaitGroup
		if issued != nil {
			wg.Go(func() {
				if err := issued.Maintain(ctx, conn, opts.TokenFile, opts.PodUID, switchBroker, log.WithName("broker-credential")); err != nil && ctx.Err() == nil {
					log.Error(err, "the broker credential")
				}
			})
		}
		if reporter != nil {
			wg.Go(func() {
				if err := reporter.Run(ctx, conn); err != nil {
					log.Error(err, "reports stopped")
				}
			})
		}
		if err := client.Run(ctx); err != nil {
			log.Error(err, "xDS client stopped")
		}
		wg.Wait()
	}()
	return nil
}
