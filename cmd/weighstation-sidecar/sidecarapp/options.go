package sidecarapp

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"

	"github.com/weighstation/weighstation/internal/logflags"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar"
	"github.com/weighstation/weighstation/sidecar/report"
	"github.com/weighstation/weighstation/sidecar/upstream"
	"github.com/weighstation/weighstation/sidecar/xdsclient"
)

// Options are a sidecar's settings: every flag's value (AddFlags binds
// them), and, below them, what only a caller in the same process sets (a
// test, a bench). NewOptions holds the flags' defaults; start from it.
type Options struct {
	// Sidecar holds -listen, -max-connections, -memory-budget,
	// -read-budget-wait, -app-send-buffer and -overlap-upstream-writes;
	// its other fields keep sidecar.DefaultOptions' values unless set in
	// process. New sets its Log, and its InboxPrefix with a credential
	// the operator issues.
	Sidecar sidecar.Options
	// BrokerURL is -broker.
	BrokerURL string
	// TokenFile (-token-file) and NkeySeedFile (-nkey-seed-file) are the
	// broker credential; with neither, and an operator, the operator
	// issues one (held in memory, Sidecar.Credential).
	TokenFile, NkeySeedFile string
	// BrokerTLSCA is -broker-tls-ca.
	BrokerTLSCA string
	// ConfigFile (-config) and ReloadInterval (-reload-interval): the
	// configuration from a file, instead of the operator's.
	ConfigFile     string
	ReloadInterval time.Duration
	// GoMemoryLimit is -go-memory-limit. Validate checks it; Run applies
	// it, since it is the process's: New, which may build many sidecars
	// in one process, leaves the limit as it is.
	GoMemoryLimit string
	// MetricsListen (-metrics-listen) and HealthListen (-health-listen)
	// are the endpoints' addresses, "" for none; DebugPprof (-debug-pprof)
	// adds Go's profiles to the metrics endpoint.
	MetricsListen, HealthListen string
	DebugPprof                  bool
	// DrainGrace (-drain-grace) and FinalReportTimeout
	// (-final-report-timeout) bound Shutdown.
	DrainGrace, FinalReportTimeout time.Duration
	// XDS holds -operator (Address), -identity-token-file (TokenFile),
	// -pod-name, -pod-namespace and -pod-uid. In process, its
	// InitialBackoff and MaxBackoff (those of the reports too), LocalAddr
	// and the other limits may be set, and Credentials secure the
	// connection to the operator instead of CAFile (insecure ones in
	// tests), or Conn is the connection (not closed by the sidecar). New
	// sets its Apply and Log.
	XDS xdsclient.Options
	// CAFile (-ca-file) and OperatorServerName (-operator-server-name)
	// verify the operator, without XDS.Credentials or XDS.Conn.
	CAFile, OperatorServerName string
	// ReportInterval is -report-interval.
	ReportInterval time.Duration
	// LogFlags are the -zap-* flags.
	LogFlags logflags.Options

	// Logger, when set, receives the sidecar's log instead of the logger
	// that LogFlags describe (a pointer, since logr.Discard() is the zero
	// Logger).
	Logger *logr.Logger
	// BrokerCredentials, when set, are presented to the broker instead of
	// TokenFile, NkeySeedFile or the operator's credential; a zero one
	// presents none (a broker without authentication).
	BrokerCredentials *upstream.Credentials
	// WrapApply, when set, wraps the function that applies each
	// configuration (from the operator, the file, or the defaults): a
	// test refuses configurations with it, a bench records them.
	WrapApply func(apply func(meshconfig.PodConfig) error) func(meshconfig.PodConfig) error
	// Unstarted leaves the sidecar.Server unstarted: no application
	// listener, no kill switch loop (Server.Start adds both), no
	// "serving" line. A swarm's simulated pods have no application, and N
	// kill switch tickers would compete with what it measures.
	Unstarted bool
	// DeferOperator has New build the connection to the operator without
	// starting it: Sidecar.Link.Start does, so that a swarm creates all
	// its sidecars before any connects.
	DeferOperator bool
}

// NewOptions returns the flags' defaults.
func NewOptions() *Options {
	return &Options{
		Sidecar:            sidecar.DefaultOptions,
		BrokerURL:          "nats://weighstation-broker:4222",
		ReloadInterval:     time.Second,
		GoMemoryLimit:      "auto",
		MetricsListen:      "127.0.0.1:9091",
		HealthListen:       ":8081",
		DrainGrace:         defaultDrainGrace,
		FinalReportTimeout: defaultFinalReportTimeout,
		XDS: xdsclient.Options{
			TokenFile: "/var/run/secrets/weighstation.io/xds/token",
			Pod:       os.Getenv("POD_NAME"),
			Namespace: os.Getenv("POD_NAMESPACE"),
			PodUID:    os.Getenv("POD_UID"),
		},
		CAFile:         "/etc/weighstation/ca/ca.crt",
		ReportInterval: report.DefaultInterval,
	}
}

// AddFlags binds the sidecar's flags to fs, with o's values as their
// defaults.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Sidecar.Listen, "listen", o.Sidecar.Listen, "where the application connects")
	fs.StringVar(&o.BrokerURL, "broker", o.BrokerURL, "the broker's URL")
	fs.StringVar(&o.TokenFile, "token-file", o.TokenFile, "file holding the broker token, for a broker run with -token-file (without it and -nkey-seed-file, a sidecar with -operator asks the operator for its own broker credential, held in memory only)")
	fs.StringVar(&o.NkeySeedFile, "nkey-seed-file", o.NkeySeedFile, "file holding the sidecar's nkey seed, instead of a token")
	fs.StringVar(&o.BrokerTLSCA, "broker-tls-ca", o.BrokerTLSCA, "PEM file of the CAs that sign the broker's TLS certificate: the connection to the broker then uses TLS, verified against them (a tls:// -broker URL, or a broker that requires TLS, uses TLS with the system's roots without it)")
	fs.StringVar(&o.ConfigFile, "config", o.ConfigFile, "pod configuration file (JSON or YAML), reloaded on change; empty: the documented defaults, and the sidecar is ready at once")
	fs.DurationVar(&o.ReloadInterval, "reload-interval", o.ReloadInterval, "how often the configuration file is checked")
	fs.IntVar(&o.Sidecar.MaxConnections, "max-connections", o.Sidecar.MaxConnections, "most application connections")
	fs.Int64Var(&o.Sidecar.MemoryBudget, "memory-budget", o.Sidecar.MemoryBudget, "bytes all pending messages, and the application connections' read buffers past their first 4 KiB each, may hold together; past it, non-essential subscriptions are shed first")
	fs.StringVar(&o.GoMemoryLimit, "go-memory-limit", o.GoMemoryLimit, "Go's soft memory limit (GOMEMLIMIT), near which the garbage collector works harder rather than let the heap grow to twice what is live: "+
		"auto, -memory-budget plus 32 MiB (unless GOMEMLIMIT is set in the environment); off, none; or a number of bytes. Keep the container's memory limit at least 16 MiB above it (docs/sidecar.md, \"Memory\")")
	fs.DurationVar(&o.Sidecar.ReadBudgetWait, "read-budget-wait", o.Sidecar.ReadBudgetWait, "how long a PUB whose body needs a larger read buffer waits for room in -memory-budget; past it, the body is skipped unread and the publish refused with a Permissions Violation, the connection kept")
	fs.IntVar(&o.Sidecar.AppSendBuffer, "app-send-buffer", o.Sidecar.AppSendBuffer, "kernel send buffer (SO_SNDBUF) of each application connection, in bytes, and the most its write batches hold; 0: the kernel's autotuning (megabytes on loopback, where queued messages escape the sidecar's limits, drop counts and latency)")
	fs.StringVar(&o.MetricsListen, "metrics-listen", o.MetricsListen, "address of /metrics (Prometheus) and /debug/latency; empty disables them. "+
		"Loopback by default, for a sidecar run by hand: in a pod, give :9091 (or $(POD_IP):9091) for Prometheus to scrape")
	fs.BoolVar(&o.Sidecar.OverlapUpstreamWrites, "overlap-upstream-writes", o.Sidecar.OverlapUpstreamWrites, "when a connection's reader is behind its application (a read filled its buffer), hand its publishes to the upstream writer goroutine so that the write to the broker overlaps the next read on another core; for machines with cores to spare (on 2 cores it costs about what it saves); at most 256 KiB wait behind a write in progress")
	fs.BoolVar(&o.DebugPprof, "debug-pprof", o.DebugPprof, "also serve Go's profiles at /debug/pprof/ on the metrics address (for benchmarking; off in production)")
	fs.StringVar(&o.HealthListen, "health-listen", o.HealthListen, "address of the probes, and nothing else: /livez (200 while the process serves) and /readyz "+
		"(200 once a configuration is in force: the operator's with -operator, the -config file's, or the defaults without either; the broker connection is listed in "+
		"/readyz?verbose but never makes it fail, since the outage buffer covers it); empty disables them. Every interface by default: "+
		"the kubelet probes the pod's IP, and the probes tell nothing but up and ready")
	fs.DurationVar(&o.DrainGrace, "drain-grace", o.DrainGrace, "on SIGTERM, how long the sidecar keeps delivering what it holds to the applications "+
		"connected (it accepts no new ones, and the broker stops sending their Subscriptions' messages) before it drops the rest, counted with reason shutdown, "+
		"and exits; well inside the pod's terminationGracePeriodSeconds (30s by default)")
	fs.DurationVar(&o.FinalReportTimeout, "final-report-timeout", o.FinalReportTimeout, "with -operator: after the drain, how long the sidecar waits for the operator "+
		"to acknowledge its last report (what it delivered and dropped up to its end, the drain's shutdown drops included); 0 sends none")
	fs.StringVar(&o.XDS.Address, "operator", o.XDS.Address, "the operator's xDS address, host:port (e.g. weighstation-xds.weighstation-system.svc:9443); the pod's configuration comes from there instead of -config")
	fs.StringVar(&o.XDS.TokenFile, "identity-token-file", o.XDS.TokenFile, "with -operator: the pod's projected ServiceAccount token (audience weighstation.io/xds), re-read at every connection")
	fs.StringVar(&o.CAFile, "ca-file", o.CAFile, "with -operator: the operator's CA bundle (the mounted weighstation-ca-bundle ConfigMap), re-read so that a rotation reaches this pod")
	fs.StringVar(&o.OperatorServerName, "operator-server-name", o.OperatorServerName, "with -operator: the name the operator's certificate must carry (default: -operator's host)")
	fs.StringVar(&o.XDS.Pod, "pod-name", o.XDS.Pod, "with -operator: this pod's name (downward API; default $POD_NAME)")
	fs.StringVar(&o.XDS.Namespace, "pod-namespace", o.XDS.Namespace, "with -operator: this pod's namespace (downward API; default $POD_NAMESPACE)")
	fs.StringVar(&o.XDS.PodUID, "pod-uid", o.XDS.PodUID, "with -operator: this pod's UID (downward API; default $POD_UID); a configuration for another UID is refused, and every report names it")
	fs.DurationVar(&o.ReportInterval, report.IntervalFlag, o.ReportInterval, "with -operator: how often the sidecar reports what it measured to the operator, "+
		"which writes it into the status of the Subscriptions and Topics (latency histograms of the interval, delivery, drop and publish totals, kill switches); "+
		"at least 1s; 0 sends no reports")
	o.LogFlags.BindGroup(fs)
}

// Validate checks the values that New cannot run with, naming their
// flags. The sidecar's packages check the rest as New builds them
// (-read-budget-wait, -app-send-buffer, the pod's identity with
// -operator).
func (o Options) Validate() error {
	if o.XDS.Address != "" && o.ConfigFile != "" {
		return errors.New("-operator and -config are two sources of the same configuration: give one")
	}
	if err := report.CheckInterval(o.ReportInterval); err != nil {
		return err
	}
	if o.DrainGrace < 0 {
		return fmt.Errorf("-drain-grace must not be negative (0 drops at once what the sidecar holds), got %s", o.DrainGrace)
	}
	if o.ReloadInterval <= 0 {
		return fmt.Errorf("-reload-interval must be positive (how often -config is checked), got %s", o.ReloadInterval)
	}
	if o.Sidecar.MaxConnections < 1 {
		return fmt.Errorf("-max-connections must be at least 1, got %d", o.Sidecar.MaxConnections)
	}
	if o.Sidecar.MemoryBudget < 1 {
		return fmt.Errorf("-memory-budget must be at least 1 byte, got %d", o.Sidecar.MemoryBudget)
	}
	if _, _, err := goMemoryLimit(o.GoMemoryLimit, o.Sidecar.MemoryBudget, os.Getenv); err != nil {
		return err
	}
	if o.FinalReportTimeout < 0 {
		return fmt.Errorf("-final-report-timeout must not be negative (0 sends no last report), got %s", o.FinalReportTimeout)
	}
	if o.NkeySeedFile != "" && o.TokenFile != "" && o.BrokerCredentials == nil {
		return errors.New("-token-file and -nkey-seed-file are two broker credentials: give one")
	}
	return nil
}
