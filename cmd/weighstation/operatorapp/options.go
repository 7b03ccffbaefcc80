package operatorapp

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/leaderelection"
	kubeconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/brokercreds"
	"github.com/weighstation/weighstation/controllers/desired"
	"github.com/weighstation/weighstation/controllers/injectionproof"
	"github.com/weighstation/weighstation/controllers/leaderlabel"
	"github.com/weighstation/weighstation/controllers/pki"
	"github.com/weighstation/weighstation/controllers/reports"
	"github.com/weighstation/weighstation/controllers/reportstatus"
	"github.com/weighstation/weighstation/controllers/topic"
	"github.com/weighstation/weighstation/controllers/webhook"
	"github.com/weighstation/weighstation/controllers/xds"
	"github.com/weighstation/weighstation/meshconfig"
)

// LeaderElectionID names the operator's leader election lease.
const LeaderElectionID = "weighstation-operator.weighstation.io"

// DefaultXDSAudience is the audience of the tokens sidecars present to the
// xDS server: a token for the apiserver is refused, so a stolen sidecar
// token is useless against the apiserver and the reverse.
const DefaultXDSAudience = "weighstation.io/xds"

// Options are everything the operator is told: one field per flag of
// `weighstation operator`, and below them the few settings that only a
// program embedding the operator (the system tests) may change.
type Options struct {
	MetricsAddr, ProbeAddr, PprofAddr string

	LeaderElect     bool
	LeaderNamespace string
	LeaseDuration   time.Duration
	RenewDeadline   time.Duration
	RetryPeriod     time.Duration

	// Namespace is the operator's own: its CA Secret, its Lease, its
	// injection key.
	Namespace string
	PodName   string
	CASecret  string

	XDSListen, XDSService, XDSAudience string
	XDSLimits                          xds.Limits
	ReviewLimits                       xds.ReviewLimits

	BrokerRoutesService, BrokerURL string
	CredentialLimits               brokercreds.Limits
	Accounts                       brokercreds.AccountSettings

	BundleResync time.Duration

	ReportWindow, ReportInterval time.Duration
	ReportPods                   int
	ReportPodRate                int
	ReportPodBurst               int
	ReportMaxBytes               int64
	ReportWriteInterval          time.Duration

	Webhook WebhookOptions

	MaxTopicsPerNamespace int
	AccessMode            string
	Defaults              meshconfig.Defaults

	Zap zap.Options

	// Not flags: for a program that runs the operator in its own process.

	// InjectionProofKeys, when set, are the keys the injection proofs are
	// checked with although no webhook is served: the sidecars of pods
	// without a proof made with them get nothing. Nil: the keys in the
	// Secret weighstation-injection-key, with the webhook only.
	InjectionProofKeys injectionproof.KeySource
	// XDSWithoutTLS serves xDS in plain text (a process that dials it
	// from the same host). No flag sets it.
	XDSWithoutTLS bool
	// MetricsRegistry takes the operator's metrics; nil:
	// controller-runtime's, which -metrics-bind-address serves. A process
	// that starts the operator twice gives each its own.
	MetricsRegistry prometheus.Registerer
	// SkipControllerNameValidation lets one process start the operator
	// again after stopping it (controller-runtime refuses a controller
	// name it has seen).
	SkipControllerNameValidation bool
}

// WebhookOptions are the flags of the sidecar-injection webhook.
type WebhookOptions struct {
	Configuration, Listen, Service string
	// CertDir holds the serving certificate when another issuer
	// (cert-manager) keeps it; empty: the operator's CA.
	CertDir string

	SidecarImage, SidecarBroker, SidecarOperator string
	TokenExpiration                              time.Duration
	Resources                                    webhook.Resources
	PrometheusAnnotations                        bool
	RunAsUser                                    int64
}

// NewOptions returns the operator's defaults, those its flags show.
func NewOptions() Options {
	return Options{
		MetricsAddr: ":8080", ProbeAddr: ":8081",
		LeaderElect: true, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: time.Second,
		Namespace: defaultNamespace(), PodName: os.Getenv("POD_NAME"), CASecret: pki.DefaultSecretName,
		XDSListen: ":9443", XDSService: "weighstation-xds", XDSAudience: DefaultXDSAudience,
		XDSLimits: xds.DefaultLimits, ReviewLimits: xds.DefaultReviewLimits,
		CredentialLimits: brokercreds.DefaultLimits, Accounts: brokercreds.DefaultAccountSettings,
		BundleResync: 10 * time.Second,
		ReportWindow: reports.DefaultWindow, ReportInterval: reports.DefaultInterval, ReportPods: reportstatus.DefaultPods,
		ReportPodRate: reports.DefaultPodReportsPerInterval, ReportPodBurst: reports.DefaultPodReportBurst,
		ReportWriteInterval: reportstatus.DefaultWriteInterval,
		Webhook: WebhookOptions{
			Listen: ":9444", Service: "weighstation-sidecar-injector", TokenExpiration: time.Hour,
			Resources: webhook.DefaultResources(), PrometheusAnnotations: true, RunAsUser: webhook.DefaultRunAsUser,
		},
		MaxTopicsPerNamespace: desired.DefaultMaxTopicsPerNamespace,
		AccessMode:            meshconfig.AccessEnforce,
		Defaults:              meshconfig.DefaultPolicy,
	}
}

// AddFlags binds every option that is a flag to fs, with the option's
// current value as the flag's default.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", o.MetricsAddr, "address of the Prometheus metrics endpoint (0 disables it)")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", o.ProbeAddr, "address of the /healthz and /readyz probes")
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", o.PprofAddr, "address of Go's /debug/pprof endpoints, for profiling CPU and memory (empty: off; they expose internals, so bind to localhost)")
	kubeconfig.RegisterFlags(fs) // -kubeconfig, read by ctrl.GetConfig
	fs.Lookup(kubeconfig.KubeconfigFlagName).Usage = "path of a kubeconfig file; outside a cluster, this or $KUBECONFIG (default: in a cluster, the pod's ServiceAccount; else ~/.kube/config)"
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "elect a leader, so that only one replica reconciles at a time")
	fs.StringVar(&o.LeaderNamespace, "leader-election-namespace", o.LeaderNamespace, "namespace of the leader election Lease (default: -namespace)")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", o.LeaseDuration, "how long a leader's Lease holds without renewal: the longest a crashed leader's replacement waits")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", o.RenewDeadline, "how long the leader retries renewing its Lease before it gives up leading (and exits)")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", o.RetryPeriod, "how often replicas try to acquire or renew the Lease (a standby takes over the lease duration after it last saw the Lease change, which lags the last renewal by up to 1.2 times this)")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "the operator's own namespace, where its CA Secret and its leader election Lease live (default: $POD_NAMESPACE, else the in-cluster ServiceAccount's namespace)")
	fs.StringVar(&o.XDSListen, "xds-listen", o.XDSListen, "address of the xDS server that sidecars connect to (TLS, from the operator's CA)")
	fs.StringVar(&o.XDSService, "xds-service", o.XDSService, "name of the Service in front of the xDS server; its DNS names go into the serving certificate")
	fs.StringVar(&o.XDSAudience, "xds-audience", o.XDSAudience, "audience of the projected ServiceAccount tokens that sidecars present")
	fs.StringVar(&o.BrokerRoutesService, "broker-routes-service", o.BrokerRoutesService, "name of the brokers' headless Service, in -namespace: the operator keeps the Secret "+pki.RouteSecretName+" there, a route certificate from its CA for every broker behind it (weighstation broker -cluster-tls-*); empty: no such Secret")
	fs.StringVar(&o.BrokerURL, "broker-url", o.BrokerURL, "the brokers' client URL (e.g. nats://weighstation-broker:4222): the operator connects there as the system account's user and pushes the account JWT, whose revocation list revokes the broker credentials of deleted pods at once; "+
		"empty: the brokers learn revocations from the "+brokercreds.TrustConfigMapName+" ConfigMap at their next start only")
	fs.DurationVar(&o.CredentialLimits.Lifetime, "broker-credential-lifetime", o.CredentialLimits.Lifetime, fmt.Sprintf("how long a sidecar's broker credential is valid (at least %s); sidecars renew at two thirds of it, and a revocation is kept this long", brokercreds.MinLifetime))
	fs.IntVar(&o.CredentialLimits.MaxEntries, "broker-max-revocations", o.CredentialLimits.MaxEntries, fmt.Sprintf("the most revocations kept over all namespaces (at most %d: they must fit in a ConfigMap); past it a namespace's oldest are folded into one revocation of every older credential of the namespace, whose sidecars then renew", brokercreds.MaxEntriesLimit))
	fs.Int64Var(&o.Accounts.MaxConnections, "broker-account-max-connections", o.Accounts.MaxConnections, "the most broker connections of one namespace's sidecars (its account's limit)")
	fs.Int64Var(&o.Accounts.UserMaxSubscriptions, "broker-user-max-subscriptions", o.Accounts.UserMaxSubscriptions, "the most subscriptions one sidecar's broker credential may hold at the broker")
	// What a sidecar, or anything that reaches the xDS port, can make the
	// operator hold or ask the apiserver (controllers/xds).
	o.XDSLimits.RegisterFlags(fs)
	o.ReviewLimits.RegisterFlags(fs)
	fs.StringVar(&o.CASecret, "ca-secret", o.CASecret, "name of the Secret, in -namespace, that holds the operator's CA")
	fs.StringVar(&o.PodName, "pod-name", o.PodName, "the operator's own Pod (default $POD_NAME): the leader labels it "+leaderlabel.Label+" for the xDS Service; empty: no label")
	fs.DurationVar(&o.BundleResync, "ca-bundle-resync", o.BundleResync, "how often the CA bundle ConfigMap is checked in every namespace with sidecar pods (a new namespace's first pod waits at most this long for it)")
	fs.DurationVar(&o.ReportWindow, "report-window", o.ReportWindow, "the sliding window over which the sidecars' reports are merged into status (latency, drops, pods)")
	fs.DurationVar(&o.ReportInterval, "report-interval", o.ReportInterval, "the sidecars' -report-interval: a pod that misses two is marked stale")
	fs.IntVar(&o.ReportPods, "report-pods", o.ReportPods, fmt.Sprintf("how many pods, the worst by p99, a Subscription's status.pods lists (at most %d)", v1alpha1.MaxReportedPods))
	fs.IntVar(&o.ReportPodRate, "report-pod-rate", o.ReportPodRate, "the most reports one pod may send per -report-interval (a sidecar sends one); a faster pod's report stream is ended RESOURCE_EXHAUSTED and it resends later")
	fs.IntVar(&o.ReportPodBurst, "report-pod-burst", o.ReportPodBurst, "the burst of -report-pod-rate: a sidecar that reconnects resends the reports it queued (6 at most)")
	fs.Int64Var(&o.ReportMaxBytes, "report-max-bytes", o.ReportMaxBytes, "the reports' memory cap in bytes: past it the sidecars' latency histograms are shed (counters and kill states kept), past it by a quarter more reports are refused; 0: a quarter of GOMEMLIMIT, or 1 GiB without one")
	fs.DurationVar(&o.ReportWriteInterval, "report-write-interval", o.ReportWriteInterval, "the least time between two report writes of one object's status (each write is also a material change)")
	w := &o.Webhook
	fs.StringVar(&w.Configuration, "webhook-configuration", w.Configuration, "name of the MutatingWebhookConfiguration of the sidecar-injection webhook ("+webhook.Name+"): the operator serves it on -webhook-listen and, unless -webhook-cert-dir is set, writes its CA bundle into this configuration (the RBAC rule allows "+webhook.DefaultConfigurationName+" only); empty: no webhook")
	fs.StringVar(&w.Listen, "webhook-listen", w.Listen, "address of the sidecar-injection webhook (TLS, from the operator's CA or -webhook-cert-dir)")
	fs.StringVar(&w.Service, "webhook-service", w.Service, "name of the Service in front of the webhook, in -namespace; its DNS names go into the webhook's serving certificate (with -webhook-cert-dir, that certificate must carry them)")
	fs.StringVar(&w.CertDir, "webhook-cert-dir", w.CertDir, "a directory holding the webhook's serving certificate as "+corev1.TLSCertKey+" and "+corev1.TLSPrivateKeyKey+" (a mounted kubernetes.io/tls Secret, e.g. cert-manager's), read again when they change: the operator then neither issues the webhook's certificate from its CA nor writes the configuration's caBundle (the certificate's issuer does, e.g. cert-manager's cainjector); empty: the operator's CA")
	fs.StringVar(&w.SidecarImage, "sidecar-image", w.SidecarImage, "the image injected sidecars run "+webhook.SidecarBinary+" from: the operator's own image (required with -webhook-configuration)")
	fs.StringVar(&w.SidecarBroker, "sidecar-broker", w.SidecarBroker, "the injected sidecars' -broker URL, e.g. nats://weighstation-broker.weighstation-system.svc:4222 (required with -webhook-configuration)")
	fs.StringVar(&w.SidecarOperator, "sidecar-operator-address", w.SidecarOperator, "the injected sidecars' -operator address (default: -xds-service's DNS name in -namespace, with -xds-listen's port)")
	fs.DurationVar(&w.TokenExpiration, "sidecar-token-expiration", w.TokenExpiration, "lifetime of the injected sidecars' projected identity tokens (at least 10m; the kubelet renews them at 80%)")
	fs.BoolVar(&w.PrometheusAnnotations, "sidecar-prometheus-annotations", w.PrometheusAnnotations, "add "+webhook.PrometheusScrapeAnnotation+": \"true\", "+webhook.PrometheusPortAnnotation+" (the sidecar's metrics port) and "+webhook.PrometheusPathAnnotation+": /metrics to the pods the webhook injects, for a Prometheus that discovers pods by them; a pod that has a prometheus.io/scrape, /port, /path or /scheme annotation of its own keeps its own and gets none (one port per pod: its application's metrics win)")
	w.Resources.RegisterFlags(fs)
	fs.Int64Var(&w.RunAsUser, "sidecar-run-as-user", w.RunAsUser, "the UID and GID the injected sidecar runs as, whatever the pod's securityContext says: a user of its own (not 0, not 65532, the distroless nonroot user); the webhook refuses pods whose other containers run as it (their runAsUser, or the pod's)")
	fs.IntVar(&o.MaxTopicsPerNamespace, "max-topics-per-namespace", o.MaxTopicsPerNamespace, "the most Topics in force in one namespace: each sidecar of a namespace holds all of them; past it the Topics created last are in force nowhere and report Valid=False (reason "+topic.ReasonOverTopicLimit+") until others are deleted; -1: no limit")
	fs.StringVar(&o.AccessMode, "access-mode", o.AccessMode, "the access mode of the pods of namespaces without the "+v1alpha1.AccessModeLabel+" label: "+meshconfig.AccessEnforce+" (refuse what their Topics and Subscriptions do not allow) or "+meshconfig.AccessAudit+" (allow, count and log it)")
	d := &o.Defaults
	fs.Int64Var(&d.MaxMessageBytes, "default-max-message-bytes", d.MaxMessageBytes, "largest message on subjects no Topic governs")
	fs.Int64Var(&d.PublishRate.MessagesPerSecond, "default-messages-per-second", d.PublishRate.MessagesPerSecond, "per-pod publish rate on subjects no Topic governs")
	fs.Int64Var(&d.PublishRate.MessagesBurst, "default-messages-burst", d.PublishRate.MessagesBurst, "per-pod publish burst, in messages, on subjects no Topic governs")
	fs.Int64Var(&d.PublishRate.BytesPerSecond, "default-bytes-per-second", d.PublishRate.BytesPerSecond, "per-pod publish rate, in bytes, on subjects no Topic governs")
	fs.Int64Var(&d.PublishRate.BytesBurst, "default-bytes-burst", d.PublishRate.BytesBurst, "per-pod publish burst, in bytes, on subjects no Topic governs")
	o.Zap.BindFlags(fs)
}

// Validate refuses options that cannot work, naming their flags; it reads
// no file and looks for no cluster, so a bad flag is said at once.
func (o *Options) Validate() error {
	if o.Defaults.PublishRate.BytesBurst < o.Defaults.MaxMessageBytes {
		return fmt.Errorf("-default-bytes-burst (%d) must be at least -default-max-message-bytes (%d), or the largest messages are refused forever",
			o.Defaults.PublishRate.BytesBurst, o.Defaults.MaxMessageBytes)
	}
	if err := checkReportFlags(o.ReportWindow, o.ReportInterval, o.ReportPods, o.ReportWriteInterval); err != nil {
		return err
	}
	if o.AccessMode != meshconfig.AccessEnforce && o.AccessMode != meshconfig.AccessAudit {
		return fmt.Errorf("-access-mode must be %q or %q, got %q", meshconfig.AccessEnforce, meshconfig.AccessAudit, o.AccessMode)
	}
	if o.ReportMaxBytes < 0 {
		return fmt.Errorf("-report-max-bytes must be 0 (a quarter of GOMEMLIMIT) or positive; got %d", o.ReportMaxBytes)
	}
	if o.MaxTopicsPerNamespace == 0 || o.MaxTopicsPerNamespace < -1 {
		return fmt.Errorf("-max-topics-per-namespace must be positive, or -1 for no limit; got %d", o.MaxTopicsPerNamespace)
	}
	if err := o.Accounts.Validate(); err != nil {
		return err
	}
	if err := o.CredentialLimits.Validate(); err != nil {
		return err
	}
	if err := errors.Join(o.XDSLimits.Validate(), o.ReviewLimits.Validate()); err != nil {
		return err
	}
	if o.ReportPodRate < 1 || o.ReportPodBurst < 1 {
		return fmt.Errorf("-report-pod-rate (%d) and -report-pod-burst (%d) must be at least 1", o.ReportPodRate, o.ReportPodBurst)
	}
	if o.Webhook.Configuration != "" {
		if _, err := o.injectionConfig(); err != nil {
			return err
		}
	} else if o.Webhook.CertDir != "" {
		return errors.New("-webhook-cert-dir is set but -webhook-configuration is empty: the operator serves no webhook without it; set both, or neither")
	}
	if o.Namespace == "" {
		return errors.New("-namespace is required outside a cluster (default: $POD_NAMESPACE): the operator keeps its CA Secret there, and its leader election Lease unless -leader-election-namespace names another")
	}
	return checkLeaseTimings(o.LeaseDuration, o.RenewDeadline, o.RetryPeriod)
}

// leaderNamespace is where the Lease lives: -leader-election-namespace,
// else -namespace.
func (o *Options) leaderNamespace() string {
	if o.LeaderNamespace != "" {
		return o.LeaderNamespace
	}
	return o.Namespace
}

// InClusterNamespaceFile holds the namespace of a pod's ServiceAccount.
const InClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// defaultNamespace is the operator's own namespace: $POD_NAMESPACE (the
// downward API), else its ServiceAccount's namespace in a cluster, else
// none.
func defaultNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile(InClusterNamespaceFile); err == nil {
		return strings.TrimSpace(string(b))
	}
	return ""
}

// checkLeaseTimings refuses leader election timings that client-go's
// leader elector would refuse later, naming the flags.
func checkLeaseTimings(lease, renew, retry time.Duration) error {
	switch {
	case lease <= 0 || renew <= 0 || retry <= 0:
		return fmt.Errorf("-leader-elect-lease-duration (%s), -leader-elect-renew-deadline (%s) and -leader-elect-retry-period (%s) must be positive", lease, renew, retry)
	case renew >= lease:
		return fmt.Errorf("-leader-elect-renew-deadline (%s) must be shorter than -leader-elect-lease-duration (%s): a leader gives up before its Lease expires", renew, lease)
	case float64(renew) <= leaderelection.JitterFactor*float64(retry):
		return fmt.Errorf("-leader-elect-renew-deadline (%s) must be longer than %.1f times -leader-elect-retry-period (%s), so that a leader retries renewing", renew, leaderelection.JitterFactor, retry)
	}
	return nil
}

// checkReportFlags refuses report flags that cannot work together.
func checkReportFlags(window, interval time.Duration, pods int, write time.Duration) error {
	switch {
	case interval <= 0:
		return fmt.Errorf("-report-interval must be positive (the sidecars' -report-interval, e.g. 10s), got %s", interval)
	case window < 2*interval:
		return fmt.Errorf("-report-window (%s) must be at least twice -report-interval (%s): a pod is stale after two missed reports, and must still be in the window to be reported so", window, interval)
	case pods < 1 || pods > v1alpha1.MaxReportedPods:
		return fmt.Errorf("-report-pods must be between 1 and %d (the CRD's bound on status.pods), got %d", v1alpha1.MaxReportedPods, pods)
	case write <= 0:
		return fmt.Errorf("-report-write-interval must be positive (e.g. 10s), got %s", write)
	}
	return nil
}
