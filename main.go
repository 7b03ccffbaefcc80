// Command weighstation is the operator, the broker and the load generator
// in one binary, and the sidecar for standalone use. Subcommands:
//
//	weighstation operator   the Kubernetes operator
//	weighstation sidecar    the NATS-protocol proxy beside each application
//	weighstation broker     the embedded NATS broker
//	weighstation bench      the open-loop load generator
//	weighstation version    the version
//
// In pods the sidecar runs as its own binary, cmd/weighstation-sidecar,
// which runs the same code (internal/sidecarcmd) without the Kubernetes
// libraries this one links for the operator: their package inits cost a
// sidecar inside this binary about three times the idle memory.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/leaderelection"
	ctrl "sigs.k8s.io/controller-runtime"
	kubeconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers"
	"github.com/weighstation/weighstation/controllers/brokercreds"
	"github.com/weighstation/weighstation/controllers/desired"
	"github.com/weighstation/weighstation/controllers/injectionproof"
	"github.com/weighstation/weighstation/controllers/pki"
	"github.com/weighstation/weighstation/controllers/reports"
	"github.com/weighstation/weighstation/controllers/webhook"
	"github.com/weighstation/weighstation/controllers/xds"
	"github.com/weighstation/weighstation/internal/sidecarcmd"
	"github.com/weighstation/weighstation/internal/version"
	"github.com/weighstation/weighstation/meshconfig"
)

// LeaderElectionID names the operator's leader election lease.
const LeaderElectionID = "weighstation-operator.weighstation.io"

// DefaultXDSAudience is the audience of the tokens sidecars present to the
// xDS server: a token for the apiserver is refused, so a stolen sidecar
// token is useless against the apiserver and the reverse.
const DefaultXDSAudience = "weighstation.io/xds"

// bundleChanged wakes the CA bundle publisher when the CA changes.
var bundleChanged = make(chan struct{}, 1)

// webhookBundleChanged wakes the webhook's caBundle writer when the CA
// changes.
var webhookBundleChanged = make(chan struct{}, 1)

const usage = `usage: weighstation <command> [flags]

commands:
  operator   run the Kubernetes operator
  sidecar    run the sidecar beside an application
  broker     run the embedded NATS broker
  bench      generate open-loop load against a sidecar or a broker
  version    print the version

In a pod, prefer the weighstation-sidecar binary (the same flags as
weighstation sidecar, without the Kubernetes libraries: a third of the
memory).

weighstation <command> -h lists a command's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "operator":
		err = runOperator(os.Args[2:])
	case "sidecar":
		err = sidecarcmd.Run(os.Args[2:])
	case "broker":
		err = runBroker(os.Args[2:])
	case "bench":
		err = runBench(os.Args[2:])
	case "version", "-version", "--version":
		fmt.Println(version.String())
		return
	case "-h", "-help", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "weighstation: unknown command %q\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "weighstation %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func runOperator(args []string) error {
	fs := flag.NewFlagSet("operator", flag.ExitOnError)
	metricsAddr := fs.String("metrics-bind-address", ":8080", "address of the Prometheus metrics endpoint (0 disables it)")
	probeAddr := fs.String("health-probe-bind-address", ":8081", "address of the /healthz and /readyz probes")
	pprofAddr := fs.String("pprof-bind-address", "", "address of Go's /debug/pprof endpoints, for profiling CPU and memory (empty: off; they expose internals, so bind to localhost)")
	kubeconfig.RegisterFlags(fs) // -kubeconfig, read by ctrl.GetConfig
	fs.Lookup(kubeconfig.KubeconfigFlagName).Usage = "path of a kubeconfig file; outside a cluster, this or $KUBECONFIG (default: in a cluster, the pod's ServiceAccount; else ~/.kube/config)"
	leaderElect := fs.Bool("leader-elect", true, "elect a leader, so that only one replica reconciles at a time")
	leaderNamespace := fs.String("leader-election-namespace", "", "namespace of the leader election Lease (default: -namespace)")
	leaseDuration := fs.Duration("leader-elect-lease-duration", 15*time.Second, "how long a leader's Lease holds without renewal: the longest a crashed leader's replacement waits")
	renewDeadline := fs.Duration("leader-elect-renew-deadline", 10*time.Second, "how long the leader retries renewing its Lease before it gives up leading (and exits)")
	retryPeriod := fs.Duration("leader-elect-retry-period", time.Second, "how often replicas try to acquire or renew the Lease (a standby takes over the lease duration after it last saw the Lease change, which lags the last renewal by up to 1.2 times this)")
	namespace := fs.String("namespace", defaultNamespace(), "the operator's own namespace, where its CA Secret and its leader election Lease live (default: $POD_NAMESPACE, else the in-cluster ServiceAccount's namespace)")
	xdsListen := fs.String("xds-listen", ":9443", "address of the xDS server that sidecars connect to (TLS, from the operator's CA)")
	xdsService := fs.String("xds-service", "weighstation-xds", "name of the Service in front of the xDS server; its DNS names go into the serving certificate")
	xdsAudience := fs.String("xds-audience", DefaultXDSAudience, "audience of the projected ServiceAccount tokens that sidecars present")
	brokerRoutesService := fs.String("broker-routes-service", "", "name of the brokers' headless Service, in -namespace: the operator keeps the Secret "+pki.RouteSecretName+" there, a route certificate from its CA for every broker behind it (weighstation broker -cluster-tls-*); empty: no such Secret")
	brokerURL := fs.String("broker-url", "", "the brokers' client URL (e.g. nats://weighstation-broker:4222): the operator connects there as the system account's user and pushes the account JWT, whose revocation list revokes the broker credentials of deleted pods at once; "+
		"empty: the brokers learn revocations from the "+brokercreds.TrustConfigMapName+" ConfigMap at their next start only")
	revocationLimits := brokercreds.DefaultLimits
	fs.DurationVar(&revocationLimits.Lifetime, "broker-credential-lifetime", revocationLimits.Lifetime, fmt.Sprintf("how long a sidecar's broker credential is valid (at least %s); sidecars renew at two thirds of it, and a revocation is kept this long", brokercreds.MinLifetime))
	fs.IntVar(&revocationLimits.MaxEntries, "broker-max-revocations", revocationLimits.MaxEntries, fmt.Sprintf("the most revocations kept over all namespaces (at most %d: they must fit in a ConfigMap); past it a namespace's oldest are folded into one revocation of every older credential of the namespace, whose sidecars then renew", brokercreds.MaxEntriesLimit))
	accountSettings := brokercreds.DefaultAccountSettings
	fs.Int64Var(&accountSettings.MaxConnections, "broker-account-max-connections", accountSettings.MaxConnections, "the most broker connections of one namespace's sidecars (its account's limit)")
	fs.Int64Var(&accountSettings.UserMaxSubscriptions, "broker-user-max-subscriptions", accountSettings.UserMaxSubscriptions, "the most subscriptions one sidecar's broker credential may hold at the broker")
	// What a sidecar, or anything that reaches the xDS port, can make the
	// operator hold or ask the apiserver (controllers/xds).
	xdsLimits := xds.DefaultLimits
	xdsLimits.RegisterFlags(fs)
	reviewLimits := xds.DefaultReviewLimits
	reviewLimits.RegisterFlags(fs)
	caSecret := fs.String("ca-secret", pki.DefaultSecretName, "name of the Secret, in -namespace, that holds the operator's CA")
	podName := fs.String("pod-name", os.Getenv("POD_NAME"), "the operator's own Pod (default $POD_NAME): the leader labels it "+controllers.LeaderLabel+" for the xDS Service; empty: no label")
	bundleResync := fs.Duration("ca-bundle-resync", 10*time.Second, "how often the CA bundle ConfigMap is checked in every namespace with sidecar pods (a new namespace's first pod waits at most this long for it)")
	reportWindow := fs.Duration("report-window", reports.DefaultWindow, "the sliding window over which the sidecars' reports are merged into status (latency, drops, pods)")
	reportInterval := fs.Duration("report-interval", reports.DefaultInterval, "the sidecars' -report-interval: a pod that misses two is marked stale")
	reportPods := fs.Int("report-pods", controllers.DefaultReportPods, fmt.Sprintf("how many pods, the worst by p99, a Subscription's status.pods lists (at most %d)", v1alpha1.MaxReportedPods))
	reportPodRate := fs.Int("report-pod-rate", reports.DefaultPodReportsPerInterval, "the most reports one pod may send per -report-interval (a sidecar sends one); a faster pod's report stream is ended RESOURCE_EXHAUSTED and it resends later")
	reportPodBurst := fs.Int("report-pod-burst", reports.DefaultPodReportBurst, "the burst of -report-pod-rate: a sidecar that reconnects resends the reports it queued (6 at most)")
	reportMaxBytes := fs.Int64("report-max-bytes", 0, "the reports' memory cap in bytes: past it the sidecars' latency histograms are shed (counters and kill states kept), past it by a quarter more reports are refused; 0: a quarter of GOMEMLIMIT, or 1 GiB without one")
	reportWrite := fs.Duration("report-write-interval", controllers.DefaultReportWriteInterval, "the least time between two report writes of one object's status (each write is also a material change)")
	webhookCfg := fs.String("webhook-configuration", "", "name of the MutatingWebhookConfiguration of the sidecar-injection webhook ("+webhook.Name+"): the operator serves it on -webhook-listen and, unless -webhook-cert-dir is set, writes its CA bundle into this configuration (the RBAC rule allows "+webhook.DefaultConfigurationName+" only); empty: no webhook")
	webhookListen := fs.String("webhook-listen", ":9444", "address of the sidecar-injection webhook (TLS, from the operator's CA or -webhook-cert-dir)")
	webhookService := fs.String("webhook-service", "weighstation-sidecar-injector", "name of the Service in front of the webhook, in -namespace; its DNS names go into the webhook's serving certificate (with -webhook-cert-dir, that certificate must carry them)")
	webhookCertDir := fs.String("webhook-cert-dir", "", "a directory holding the webhook's serving certificate as "+corev1.TLSCertKey+" and "+corev1.TLSPrivateKeyKey+" (a mounted kubernetes.io/tls Secret, e.g. cert-manager's), read again when they change: the operator then neither issues the webhook's certificate from its CA nor writes the configuration's caBundle (the certificate's issuer does, e.g. cert-manager's cainjector); empty: the operator's CA")
	sidecarImage := fs.String("sidecar-image", "", "the image injected sidecars run "+webhook.SidecarBinary+" from: the operator's own image (required with -webhook-configuration)")
	sidecarBroker := fs.String("sidecar-broker", "", "the injected sidecars' -broker URL, e.g. nats://weighstation-broker.weighstation-system.svc:4222 (required with -webhook-configuration)")
	sidecarOperator := fs.String("sidecar-operator-address", "", "the injected sidecars' -operator address (default: -xds-service's DNS name in -namespace, with -xds-listen's port)")
	sidecarTokenExpiration := fs.Duration("sidecar-token-expiration", time.Hour, "lifetime of the injected sidecars' projected identity tokens (at least 10m; the kubelet renews them at 80%)")
	sidecarScrape := fs.Bool("sidecar-prometheus-annotations", true, "add "+webhook.PrometheusScrapeAnnotation+": \"true\", "+webhook.PrometheusPortAnnotation+" (the sidecar's metrics port) and "+webhook.PrometheusPathAnnotation+": /metrics to the pods the webhook injects, for a Prometheus that discovers pods by them; a pod that has a prometheus.io/scrape, /port, /path or /scheme annotation of its own keeps its own and gets none (one port per pod: its application's metrics win)")
	sidecarResources := webhook.DefaultResources()
	sidecarResources.RegisterFlags(fs)
	sidecarRunAsUser := fs.Int64("sidecar-run-as-user", webhook.DefaultRunAsUser, "the UID and GID the injected sidecar runs as, whatever the pod's securityContext says: a user of its own (not 0, not 65532, the distroless nonroot user); the webhook refuses pods whose other containers run as it (their runAsUser, or the pod's)")
	maxTopics := fs.Int("max-topics-per-namespace", desired.DefaultMaxTopicsPerNamespace, "the most Topics in force in one namespace: each sidecar of a namespace holds all of them; past it the Topics created last are in force nowhere and report Valid=False (reason "+controllers.ReasonOverTopicLimit+") until others are deleted; -1: no limit")
	accessMode := fs.String("access-mode", meshconfig.AccessEnforce, "the access mode of the pods of namespaces without the "+v1alpha1.AccessModeLabel+" label: "+meshconfig.AccessEnforce+" (refuse what their Topics and Subscriptions do not allow) or "+meshconfig.AccessAudit+" (allow, count and log it)")
	defaults := meshconfig.DefaultPolicy
	fs.Int64Var(&defaults.MaxMessageBytes, "default-max-message-bytes", defaults.MaxMessageBytes, "largest message on subjects no Topic governs")
	fs.Int64Var(&defaults.PublishRate.MessagesPerSecond, "default-messages-per-second", defaults.PublishRate.MessagesPerSecond, "per-pod publish rate on subjects no Topic governs")
	fs.Int64Var(&defaults.PublishRate.MessagesBurst, "default-messages-burst", defaults.PublishRate.MessagesBurst, "per-pod publish burst, in messages, on subjects no Topic governs")
	fs.Int64Var(&defaults.PublishRate.BytesPerSecond, "default-bytes-per-second", defaults.PublishRate.BytesPerSecond, "per-pod publish rate, in bytes, on subjects no Topic governs")
	fs.Int64Var(&defaults.PublishRate.BytesBurst, "default-bytes-burst", defaults.PublishRate.BytesBurst, "per-pod publish burst, in bytes, on subjects no Topic governs")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if defaults.PublishRate.BytesBurst < defaults.MaxMessageBytes {
		return fmt.Errorf("-default-bytes-burst (%d) must be at least -default-max-message-bytes (%d), or the largest messages are refused forever",
			defaults.PublishRate.BytesBurst, defaults.MaxMessageBytes)
	}
	if err := checkReportFlags(*reportWindow, *reportInterval, *reportPods, *reportWrite); err != nil {
		return err
	}
	if *accessMode != meshconfig.AccessEnforce && *accessMode != meshconfig.AccessAudit {
		return fmt.Errorf("-access-mode must be %q or %q, got %q", meshconfig.AccessEnforce, meshconfig.AccessAudit, *accessMode)
	}
	if *reportMaxBytes < 0 {
		return fmt.Errorf("-report-max-bytes must be 0 (a quarter of GOMEMLIMIT) or positive; got %d", *reportMaxBytes)
	}
	if *maxTopics == 0 || *maxTopics < -1 {
		return fmt.Errorf("-max-topics-per-namespace must be positive, or -1 for no limit; got %d", *maxTopics)
	}
	if err := accountSettings.Validate(); err != nil {
		return err
	}
	if err := revocationLimits.Validate(); err != nil {
		return err
	}
	if err := errors.Join(xdsLimits.Validate(), reviewLimits.Validate()); err != nil {
		return err
	}
	if *reportPodRate < 1 || *reportPodBurst < 1 {
		return fmt.Errorf("-report-pod-rate (%d) and -report-pod-burst (%d) must be at least 1", *reportPodRate, *reportPodBurst)
	}
	injectionFlags := webhookFlags{
		configuration: *webhookCfg, listen: *webhookListen, service: *webhookService, namespace: *namespace, certDir: *webhookCertDir,
		image: *sidecarImage, broker: *sidecarBroker, operator: *sidecarOperator, xdsService: *xdsService, xdsListen: *xdsListen,
		audience: *xdsAudience, tokenExpiration: *sidecarTokenExpiration, resources: sidecarResources, prometheusAnnotations: *sidecarScrape,
		runAsUser: *sidecarRunAsUser,
	}
	var injectionConfig webhook.Config
	if *webhookCfg != "" {
		var err error
		if injectionConfig, err = injectionFlags.config(); err != nil {
			return err
		}
	} else if *webhookCertDir != "" {
		return errors.New("-webhook-cert-dir is set but -webhook-configuration is empty: the operator serves no webhook without it; set both, or neither")
	}
	if *namespace == "" {
		return errors.New("-namespace is required outside a cluster (default: $POD_NAMESPACE): the operator keeps its CA Secret there, and its leader election Lease unless -leader-election-namespace names another")
	}
	if *leaderNamespace == "" {
		*leaderNamespace = *namespace
	}
	if err := checkLeaseTimings(*leaseDuration, *renewDeadline, *retryPeriod); err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("operator")
	// Read here, once logging is set up and before any cluster is looked
	// for: a wrong directory is said at once.
	webhookFiles, err := injectionFlags.servingFiles(log.WithName("webhook"))
	if err != nil {
		return err
	}

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))

	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("finding the Kubernetes API (outside a cluster, set -kubeconfig or $KUBECONFIG): %w", err)
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress:  *probeAddr,
		PprofBindAddress:        *pprofAddr,
		LeaderElection:          *leaderElect,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: *leaderNamespace,
		LeaseDuration:           leaseDuration,
		RenewDeadline:           renewDeadline,
		RetryPeriod:             retryPeriod,
		// The process exits as soon as the manager stops, so a stopping
		// leader may give its Lease up at once: a rolling update fails
		// over without waiting for the Lease to expire.
		LeaderElectionReleaseOnCancel: true,
		Cache:                         controllers.CacheOptions(),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	authority, err := pki.New(mgr.GetAPIReader(), mgr.GetClient(), pki.Options{
		Namespace:  *namespace,
		SecretName: *caSecret,
		DNSNames:   pki.ServiceDNSNames(*xdsService, *namespace),
		Log:        log.WithName("ca"),
		OnBundleChange: func([]byte) {
			for _, ch := range []chan struct{}{bundleChanged, webhookBundleChanged} {
				select {
				case ch <- struct{}{}:
				default: // a republish is already due
				}
			}
		},
	})
	if err != nil {
		return err
	}
	tracker := xds.NewTracker()
	publisher := xds.NewPublisher(log.WithName("xds"), tracker)
	reportService, err := reports.New(reports.Options{
		Serving: publisher.Synced, PolicyNames: reports.PublisherPolicyNames(publisher),
		Window: *reportWindow, Interval: *reportInterval, Registerer: metrics.Registry, Log: log.WithName("reports"),
		PodReportsPerInterval: *reportPodRate, PodReportBurst: *reportPodBurst, MaxBytes: *reportMaxBytes,
	})
	if err != nil {
		return err
	}
	// Bounds sees every pod's configuration on its way to the publisher:
	// what the pod's broker credential may allow.
	bounds := brokercreds.NewBounds(publisher)
	if err := controllers.SetupReconcilers(mgr, controllers.Setup{
		Sink: bounds, Defaults: defaults, AccessMode: *accessMode, MaxTopicsPerNamespace: *maxTopics, OnSynced: publisher.MarkSynced, Tracker: tracker, Served: publisher.ChangedAt,
		Reports: reportService.Store(), ReportWriteInterval: *reportWrite, ReportPods: *reportPods,
		NotInjected: webhook.ExcludedNamespaces(*namespace),
	}); err != nil {
		return err
	}
	// The key of the injection proof, which the webhook signs injected pods
	// with: what gets a configuration or a credential must verify with it
	// (injectionproof.VerifyPod). Run (and so loaded) only with the
	// webhook: without it no pod carries a proof.
	proofKeys := &injectionproof.Keeper{Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(), Namespace: *namespace, Log: log.WithName("injection-proof")}
	credentialMetrics := brokercreds.NewMetrics(metrics.Registry)
	keeper := &brokercreds.Keeper{
		Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(), Namespace: *namespace, Pods: mgr.GetCache(), Policies: mgr.GetCache(),
		BrokerURL: *brokerURL, Limits: revocationLimits, Accounts: accountSettings, Metrics: credentialMetrics, Log: log.WithName("broker-credentials"),
	}
	credentials := &brokercreds.Service{Keeper: keeper, Bounds: bounds, Pods: mgr.GetCache(), Metrics: credentialMetrics, Log: log.WithName("broker-credentials")}

	// Every stream's and call's token passes local checks, a cache and
	// rate limits before any TokenReview (xds.TokenGate).
	tokenGate, err := xds.NewTokenGate(xds.TokenReviewer{Client: mgr.GetClient(), Pods: mgr.GetCache(), Audience: *xdsAudience}, reviewLimits, nil, metrics.Registry)
	if err != nil {
		return err
	}
	var authenticator xds.Authenticator = tokenGate
	if *webhookCfg != "" {
		// Only the sidecars the webhook injected get a configuration, send
		// reports or get a credential, whatever labels and annotations a
		// pod acquires later.
		authenticator = &injectionproof.Authenticator{Next: tokenGate, Reader: mgr.GetAPIReader(), Keys: proofKeys}
	}
	xdsServer := xds.NewServer(publisher, tracker, xds.Options{
		Listen:        *xdsListen,
		TLS:           authority.TLSConfig(),
		Authenticator: authenticator,
		Limits:        xdsLimits,
		Registerer:    metrics.Registry,
		Log:           log.WithName("xds"),
		// The sidecars' reports arrive, and their broker credentials leave,
		// on their xDS connection, behind the same authentication.
		Services: map[string]func(grpc.ServiceRegistrar){
			xdsv1.Reports_Stream_FullMethodName:          reportService.Register,
			xdsv1.BrokerCredentials_Issue_FullMethodName: credentials.Register,
		},
	})
	runnables := []manager.Runnable{authority, xdsServer, reportService.Store(), keeper, &controllers.BundlePublisher{
		Client: mgr.GetClient(), Bundle: authority.Bundle, Changed: bundleChanged, Interval: *bundleResync, Log: log.WithName("ca-bundle"),
	}}
	if *brokerRoutesService != "" {
		routes, err := pki.NewRouteCertificate(authority, *brokerRoutesService, log.WithName("broker-routes-tls"))
		if err != nil {
			return fmt.Errorf("-broker-routes-service: %w", err)
		}
		runnables = append(runnables, routes)
	}
	if *webhookCfg != "" {
		// Every replica signs the pods it injects with the key in the
		// Secret weighstation-injection-key (controllers/injectionproof).
		injectionFlags.proofKeys = proofKeys
		runnables = append(runnables, proofKeys)
		runnables = append(runnables, webhookRunnables(mgr, authority, injectionFlags, injectionConfig, webhookFiles, log.WithName("webhook"))...)
	}
	if *podName != "" {
		labeler := &controllers.LeaderLabeler{Client: mgr.GetClient(), Pod: types.NamespacedName{Namespace: *namespace, Name: *podName}, Log: log.WithName("leader-label")}
		runnables = append(runnables, labeler.Unlabelled(), labeler.Labelled())
	}
	for _, r := range runnables {
		if err := mgr.Add(r); err != nil {
			return fmt.Errorf("adding to the manager: %w", err)
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	// Every replica is ready once it serves a certificate, leader or not,
	// so that a failover keeps endpoints (the xDS stream itself tells a
	// sidecar to retry until it reaches the leader).
	if err := mgr.AddReadyzCheck("readyz", authority.ReadyCheck); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}
	ctrl.Log.WithName("operator").Info("starting", "defaults", defaults)
	return mgr.Start(ctrl.SetupSignalHandler())
}

// inClusterNamespaceFile holds the namespace of a pod's ServiceAccount.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// defaultNamespace is the operator's own namespace: $POD_NAMESPACE (the
// downward API), else its ServiceAccount's namespace in a cluster, else
// none.
func defaultNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile(inClusterNamespaceFile); err == nil {
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
