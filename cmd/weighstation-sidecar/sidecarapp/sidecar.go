package sidecarapp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/weighstation/weighstation/internal/tokenfile"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar"
	"github.com/weighstation/weighstation/sidecar/brokercred"
	"github.com/weighstation/weighstation/sidecar/configfile"
	"github.com/weighstation/weighstation/sidecar/report"
	"github.com/weighstation/weighstation/sidecar/upstream"
	"github.com/weighstation/weighstation/sidecar/xdsclient"
)

// Sidecar is an assembled, serving sidecar.
type Sidecar struct {
	// Server is the application-facing server.
	Server *sidecar.Server
	// Upstream is the connection to the broker.
	Upstream *upstream.Client
	// Credential is the broker credential the operator issues; nil with
	// a token, an nkey or Options.BrokerCredentials.
	Credential *brokercred.Holder
	// Link is the connection to the operator (the xDS client, the
	// reports, the credential's upkeep); nil without an operator. XDS
	// and Reporter are its (Reporter nil when no reports are sent).
	Link     *OperatorLink
	XDS      *xdsclient.Client
	Reporter *report.Reporter

	opts            Options
	log             logr.Logger
	health, metrics *endpoint
	stopServing     context.CancelFunc // the configuration file's watch
	operatorCtx     context.Context
	stopOperator    context.CancelFunc
	closeOnce       sync.Once
}

// New assembles a sidecar from opts and starts it: the endpoints are bound
// first (a busy port is an error naming its flag), then the broker
// connection (which keeps trying while the sidecar serves), the server,
// the reports, the probes, the configuration (the operator's, the file's
// until ctx ends, or the defaults), the application listener and the
// metrics; then it logs "serving". Close, or Shutdown, stops it; the
// connection to the operator lasts until then, past ctx, so that the last
// report goes out after the drain.
func New(ctx context.Context, opts Options) (_ *Sidecar, err error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	var log logr.Logger
	if opts.Logger != nil {
		log = *opts.Logger
	} else {
		log = opts.LogFlags.New()
	}
	log = log.WithName("sidecar")
	s := &Sidecar{opts: opts, log: log}
	// The connection to the operator outlives ctx (the last report goes
	// out after the drain), until Close.
	s.operatorCtx, s.stopOperator = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	// The endpoints' addresses are taken first: a busy port stops the
	// sidecar here, naming its flag.
	if s.health, err = bindEndpoint("health-listen", opts.HealthListen); err != nil {
		return nil, err
	}
	if s.metrics, err = bindEndpoint("metrics-listen", opts.MetricsListen); err != nil {
		return nil, err
	}
	upOpts, err := s.upstreamOptions()
	if err != nil {
		return nil, err
	}
	// The broker may not be there yet (it restarts, or the cluster is
	// coming up): the connection keeps trying while the sidecar serves its
	// applications and holds their publishes, bounded.
	if s.Upstream, err = upstream.Dial(upOpts); err != nil {
		return nil, err
	}
	if !s.Upstream.Connected() {
		log.Info("the broker is not reachable yet; serving applications and retrying", "broker", s.Upstream.URL(),
			"retryEvery", upstream.ReconnectWait.String(), "outageBufferBytes", upstream.OutageBufferBytes)
	}
	sideOpts := opts.Sidecar
	sideOpts.Log = log
	if issued := s.Credential; issued != nil {
		// The pod's inbox space comes with its credential, which the
		// broker lets subscribe under it alone: the sidecar translates its
		// applications' inboxes into it (docs/sidecar.md, "Subject
		// permissions"), and is not ready before it knows it.
		sideOpts.InboxPrefix = func() (string, bool) {
			if _, err := issued.UserJWT(); err != nil {
				return "", false
			}
			return issued.InboxPrefix(), true
		}
	}
	if s.Server, err = sidecar.New(s.Upstream, sideOpts); err != nil {
		return nil, err
	}
	if opts.XDS.Address != "" {
		if err := s.newLink(); err != nil {
			return nil, err
		}
	}
	// The file's and the defaults' apply (the operator's is the link's).
	apply := s.Server.SetConfig
	if opts.WrapApply != nil {
		apply = opts.WrapApply(apply)
	}
	// Up before the configuration is read, so that /livez answers while
	// /readyz says what is missing.
	s.health.serve(s.Server.HealthHandler(), log)
	var serveCtx context.Context
	serveCtx, s.stopServing = context.WithCancel(ctx)
	switch {
	case s.Link != nil:
		// The operator's configuration: not ready until it arrives; the
		// documented defaults govern meanwhile.
		if !opts.DeferOperator {
			s.Link.Start(s.operatorCtx)
		}
	case opts.ConfigFile == "":
		// Standalone: the documented defaults are this pod's configuration
		// by choice, so the sidecar is ready.
		if err := apply(meshconfig.DefaultConfig(meshconfig.DefaultPolicy)); err != nil {
			return nil, err
		}
		logStandaloneDefaults(log, meshconfig.DefaultPolicy)
	default:
		err := configfile.Watch(serveCtx, opts.ConfigFile, opts.ReloadInterval, func(cfg meshconfig.PodConfig) error {
			if err := apply(cfg); err != nil {
				return err
			}
			log.Info("configuration applied", "version", cfg.Version, "topics", len(cfg.Topics), "subscriptions", len(cfg.Subscriptions))
			return nil
		}, func(err error) { log.Error(err, "configuration refused; the last good one stays in force") })
		if err != nil {
			return nil, err
		}
	}
	if !opts.Unstarted {
		if err := s.Server.Start(); err != nil {
			return nil, fmt.Errorf("-listen: %w", err)
		}
	}
	if s.metrics != nil {
		// The Go runtime's and the process's own metrics beside the
		// sidecar's: memory, goroutines, CPU, and the allocation count
		// that make bench-sidecar-core divides by the messages.
		served := []prometheus.Collector{s.Server.Collector(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
		if s.Reporter != nil {
			served = append(served, s.Reporter.Collector())
		}
		handler := withMetrics(s.Server.Handler(), served...)
		if opts.DebugPprof {
			mux := http.NewServeMux()
			mux.Handle("/", handler)
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			handler = mux
		}
		s.metrics.serve(handler, log)
	}
	if !opts.Unstarted {
		log.Info("serving", "listen", s.Server.Addr().String(), "broker", opts.BrokerURL, "metrics", s.metrics.addr(), "health", s.health.addr(),
			"memoryBudget", opts.Sidecar.MemoryBudget, "goMemoryLimit", goMemoryLimitInForce())
	}
	return s, nil
}

// upstreamOptions are the broker connection's, with its credential: the
// token, the nkey, or, with neither and an operator, the one the operator
// issues (s.Credential).
func (s *Sidecar) upstreamOptions() (upstream.Options, error) {
	o := s.opts
	upOpts := upstream.DefaultOptions
	upOpts.URL, upOpts.Log = o.BrokerURL, s.log.WithName("broker")
	switch {
	case o.BrokerCredentials != nil:
		upOpts.Credentials = *o.BrokerCredentials
	case o.NkeySeedFile != "" && o.TokenFile != "":
		return upOpts, errors.New("-token-file and -nkey-seed-file are two broker credentials: give one")
	case o.NkeySeedFile != "":
		cred, err := upstream.NkeyFromSeedFile(o.NkeySeedFile)
		if err != nil {
			return upOpts, fmt.Errorf("-nkey-seed-file: %w", err)
		}
		upOpts.Credentials = cred
	case o.TokenFile != "" || o.XDS.Address == "":
		token, err := tokenfile.Read(o.TokenFile)
		if err != nil {
			return upOpts, fmt.Errorf("%w (or give -operator, and the operator issues this sidecar its broker credential)", err)
		}
		upOpts.Credentials = upstream.Credentials{Token: token}
	default:
		issued := brokercred.New()
		s.Credential = issued
		upOpts.Credentials = issued.Credentials()
		upOpts.OnRefused = func(err error) { issued.Renew("the broker refused the credential: " + err.Error()) }
	}
	if o.BrokerTLSCA != "" {
		cfg, err := upstream.TLSFromCAFile(o.BrokerTLSCA)
		if err != nil {
			return upOpts, fmt.Errorf("-broker-tls-ca: %w", err)
		}
		upOpts.TLS = cfg
	}
	return upOpts, nil
}

// newLink builds the connection to the operator: the reports (built now,
// as the sidecar starts, when the first report's interval begins), the
// xDS client applying to the server, and the credential's upkeep.
func (s *Sidecar) newLink() error {
	o, log := s.opts, s.log
	linkOpts := LinkOptions{XDS: o.XDS, CAFile: o.CAFile, ServerName: o.OperatorServerName, Credential: s.Credential, Log: log}
	var reporter *report.Reporter
	if o.ReportInterval > 0 {
		var err error
		reporter, err = newReporter(linkOpts, report.Options{Source: s.Server, Interval: o.ReportInterval, Log: log.WithName("report")})
		if err != nil {
			return err
		}
	}
	apply := s.Server.SetConfig
	if issued := s.Credential; issued != nil {
		// A configuration that widens the pod's subjects waits for a
		// credential that allows them, and the broker connection moves
		// to it first; a narrower one applies at once (the sidecar
		// enforces it before the broker does).
		apply = func(cfg meshconfig.PodConfig) error {
			if !issued.WaitCovers(s.operatorCtx, cfg, credentialWideningTimeout) {
				log.Info("applying a configuration that the broker credential does not allow yet: the broker refuses its new subjects until the credential is renewed", "timeout", credentialWideningTimeout.String())
			}
			return s.Server.SetConfig(cfg)
		}
		up := s.Upstream
		linkOpts.SwitchBroker = func() { _ = up.Renew(errCredentialRenewed) } // a failure is logged; the old connection serves on
	}
	if o.WrapApply != nil {
		apply = o.WrapApply(apply)
	}
	linkOpts.XDS.Apply = apply
	linkOpts.XDS.Log = log.WithName("xds")
	link, err := newLink(linkOpts, reporter)
	if err != nil {
		return err
	}
	s.Link, s.XDS, s.Reporter = link, link.XDS, reporter
	return nil
}

// Run waits until ctx ends, then stops the sidecar with Shutdown.
func (s *Sidecar) Run(ctx context.Context) error {
	<-ctx.Done()
	s.Shutdown()
	return nil
}

// Shutdown stops the sidecar as SIGTERM does: it delivers what it holds
// for up to DrainGrace (accepting no new connections), logs what the drain
// did, sends the last report (waiting up to FinalReportTimeout for its
// acknowledgement), and closes everything.
func (s *Sidecar) Shutdown() sidecar.ShutdownSummary {
	s.log.Info("shutting down: draining what the sidecar holds", "drainGrace", s.opts.DrainGrace.String())
	sum := s.Server.Shutdown(s.opts.DrainGrace)
	logShutdown(s.log, sum)
	if s.Reporter != nil && s.opts.FinalReportTimeout > 0 {
		flushCtx, cancel := context.WithTimeout(context.Background(), s.opts.FinalReportTimeout)
		err := s.Reporter.Flush(flushCtx)
		cancel()
		if err != nil {
			s.log.Error(err, "the last report did not reach the operator: its status lacks the sidecar's last counts", "finalReportTimeout", s.opts.FinalReportTimeout.String())
		} else {
			s.log.Info("last report acknowledged by the operator")
		}
	}
	s.Close()
	return sum
}

// StopReports stops the reports alone (a sidecar whose reports no longer
// arrive); nothing without an operator.
func (s *Sidecar) StopReports() {
	if s.Link != nil {
		s.Link.StopReports()
	}
}

// HealthAddr is the probes' bound address (-health-listen; a test gives
// port 0), "" when disabled.
func (s *Sidecar) HealthAddr() string { return s.health.addr() }

// MetricsAddr is the metrics' bound address (-metrics-listen), "" when
// disabled.
func (s *Sidecar) MetricsAddr() string { return s.metrics.addr() }

// Close stops everything at once, without a drain: the connection to the
// operator (waiting until it stopped), the server, the broker connection
// and the endpoints. It may be called again, and after Shutdown.
func (s *Sidecar) Close() {
	s.closeOnce.Do(func() {
		if s.stopServing != nil {
			s.stopServing()
		}
		s.stopOperator()
		if s.Link != nil {
			s.Link.Close()
		}
		if s.Server != nil {
			s.Server.Close()
		}
		if s.Upstream != nil {
			s.Upstream.Close()
		}
		s.metrics.close()
		s.health.close()
	})
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
