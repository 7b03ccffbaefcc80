// Package operatorapp assembles the operator: its options (the flags of
// `weighstation operator`), their validation, and the one constructor that
// builds the manager, the reconcilers, the CA, the xDS server and what
// serves on it, the broker credentials and the injection webhook. The
// command runs it, and so do the tests that run the operator in their own
// process: they test what ships.
package operatorapp

import (
	"context"
	"flag"
	"fmt"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/weighstation/weighstation/api/v1alpha1"
	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/controllers"
	"github.com/weighstation/weighstation/controllers/brokercreds"
	"github.com/weighstation/weighstation/controllers/cabundle"
	"github.com/weighstation/weighstation/controllers/injectionproof"
	"github.com/weighstation/weighstation/controllers/leaderlabel"
	"github.com/weighstation/weighstation/controllers/pki"
	"github.com/weighstation/weighstation/controllers/reports"
	"github.com/weighstation/weighstation/controllers/webhook"
	"github.com/weighstation/weighstation/controllers/xds"
)

// Run is `weighstation operator`: it parses args, validates them, and runs
// the operator until SIGINT or SIGTERM.
func Run(args []string) error {
	fs := flag.NewFlagSet("operator", flag.ExitOnError)
	opts := NewOptions()
	opts.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts.Zap)))
	op, err := New(nil, opts, ctrl.Log.WithName("operator"))
	if err != nil {
		return err
	}
	return op.Start(ctrl.SetupSignalHandler())
}

// Operator is the assembled operator, ready to start.
type Operator struct {
	mgr       ctrl.Manager
	publisher *xds.Publisher
	reports   *reports.Store
	opts      Options
	log       logr.Logger
}

// Publisher is what the operator serves each sidecar.
func (o *Operator) Publisher() *xds.Publisher { return o.publisher }

// Reports holds the sidecars' reports as the operator merges them.
func (o *Operator) Reports() *reports.Store { return o.reports }

// Start runs the operator until ctx ends.
func (o *Operator) Start(ctx context.Context) error {
	o.log.Info("starting", "defaults", o.opts.Defaults)
	return o.mgr.Start(ctx)
}

// New builds the operator from validated options, against the apiserver
// restConfig reaches (nil: -kubeconfig, $KUBECONFIG, or the pod's
// ServiceAccount). It reads the webhook's certificate files, if any, and
// connects nowhere until Start.
func New(restConfig *rest.Config, opts Options, log logr.Logger) (*Operator, error) {
	// Read first: a wrong directory is said before any cluster is looked
	// for.
	webhookFiles, err := opts.servingFiles(log.WithName("webhook"))
	if err != nil {
		return nil, err
	}
	if restConfig == nil {
		if restConfig, err = ctrl.GetConfig(); err != nil {
			return nil, fmt.Errorf("finding the Kubernetes API (outside a cluster, set -kubeconfig or $KUBECONFIG): %w", err)
		}
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	mgrOpts := ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: opts.MetricsAddr},
		HealthProbeBindAddress:  opts.ProbeAddr,
		PprofBindAddress:        opts.PprofAddr,
		LeaderElection:          opts.LeaderElect,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: opts.leaderNamespace(),
		LeaseDuration:           &opts.LeaseDuration,
		RenewDeadline:           &opts.RenewDeadline,
		RetryPeriod:             &opts.RetryPeriod,
		// The process exits as soon as the manager stops, so a stopping
		// leader may give its Lease up at once: a rolling update fails
		// over without waiting for the Lease to expire.
		LeaderElectionReleaseOnCancel: true,
		Cache:                         controllers.CacheOptions(),
	}
	if opts.SkipControllerNameValidation {
		mgrOpts.Controller = config.Controller{SkipNameValidation: ptr.To(true)}
	}
	mgr, err := ctrl.NewManager(restConfig, mgrOpts)
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	// The CA wakes the bundle's two writers when it changes: the
	// namespaces' ConfigMaps and the webhook configuration's caBundle.
	bundleChanged, webhookBundleChanged := make(chan struct{}, 1), make(chan struct{}, 1)
	authority, err := pki.New(mgr.GetAPIReader(), mgr.GetClient(), pki.Options{
		Namespace:  opts.Namespace,
		SecretName: opts.CASecret,
		DNSNames:   pki.ServiceDNSNames(opts.XDSService, opts.Namespace),
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
		return nil, err
	}
	var registry prometheus.Registerer = metrics.Registry
	if opts.MetricsRegistry != nil {
		registry = opts.MetricsRegistry
	}
	tracker := xds.NewTracker()
	publisher := xds.NewPublisher(log.WithName("xds"), tracker)
	reportService, err := reports.New(reports.Options{
		Serving: publisher.Synced, PolicyNames: reports.PublisherPolicyNames(publisher),
		Window: opts.ReportWindow, Interval: opts.ReportInterval, Registerer: registry, Log: log.WithName("reports"),
		PodReportsPerInterval: opts.ReportPodRate, PodReportBurst: opts.ReportPodBurst, MaxBytes: opts.ReportMaxBytes,
	})
	if err != nil {
		return nil, err
	}
	// Bounds sees every pod's configuration on its way to the publisher:
	// what the pod's broker credential may allow.
	bounds := brokercreds.NewBounds(publisher)
	if err := controllers.SetupReconcilers(mgr, controllers.Setup{
		Sink: bounds, Defaults: opts.Defaults, AccessMode: opts.AccessMode, MaxTopicsPerNamespace: opts.MaxTopicsPerNamespace,
		OnSynced: publisher.MarkSynced, Tracker: tracker, Served: publisher.ChangedAt,
		Reports: reportService.Store(), ReportWriteInterval: opts.ReportWriteInterval, ReportPods: opts.ReportPods,
		NotInjected: webhook.ExcludedNamespaces(opts.Namespace),
	}); err != nil {
		return nil, err
	}
	credentialMetrics := brokercreds.NewMetrics(registry)
	keeper := &brokercreds.Keeper{
		Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(), Namespace: opts.Namespace, Pods: mgr.GetCache(), Policies: mgr.GetCache(),
		BrokerURL: opts.BrokerURL, Limits: opts.CredentialLimits, Accounts: opts.Accounts, Metrics: credentialMetrics, Log: log.WithName("broker-credentials"),
	}
	credentials := &brokercreds.Service{Keeper: keeper, Bounds: bounds, Pods: mgr.GetCache(), Metrics: credentialMetrics, Log: log.WithName("broker-credentials")}

	// Every stream's and call's token passes local checks, a cache and
	// rate limits before any TokenReview (xds.TokenGate).
	tokenGate, err := xds.NewTokenGate(xds.TokenReviewer{Client: mgr.GetClient(), Pods: mgr.GetCache(), Audience: opts.XDSAudience}, opts.ReviewLimits, nil, registry)
	if err != nil {
		return nil, err
	}
	runnables := []manager.Runnable{authority, reportService.Store(), keeper, &cabundle.Publisher{
		Client: mgr.GetClient(), Bundle: authority.Bundle, Changed: bundleChanged, Interval: opts.BundleResync, Log: log.WithName("ca-bundle"),
	}}
	// The key of the injection proof, which the webhook signs injected
	// pods with: what gets a configuration or a credential must verify
	// with it (injectionproof.VerifyPod). Loaded only with the webhook:
	// without it no pod carries a proof.
	proofKeys := opts.InjectionProofKeys
	if opts.Webhook.Configuration != "" {
		injection, err := opts.injectionConfig()
		if err != nil {
			return nil, err
		}
		// Every replica signs the pods it injects with the key in the
		// Secret weighstation-injection-key (controllers/injectionproof).
		keys := &injectionproof.Keeper{Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(), Namespace: opts.Namespace, Log: log.WithName("injection-proof")}
		proofKeys = keys
		runnables = append(runnables, keys)
		runnables = append(runnables, webhookRunnables(mgr, authority, &opts, webhookParts{
			config: injection, proofKeys: keys, files: webhookFiles, bundleChanged: webhookBundleChanged,
		}, log.WithName("webhook"))...)
	}
	var authenticator xds.Authenticator = tokenGate
	if proofKeys != nil {
		// Only the sidecars the webhook injected get a configuration, send
		// reports or get a credential, whatever labels and annotations a
		// pod acquires later.
		authenticator = &injectionproof.Authenticator{Next: tokenGate, Reader: mgr.GetAPIReader(), Keys: proofKeys}
	}
	xdsOpts := xds.Options{
		Listen:        opts.XDSListen,
		TLS:           authority.TLSConfig(),
		Authenticator: authenticator,
		Limits:        opts.XDSLimits,
		Registerer:    registry,
		Log:           log.WithName("xds"),
		// The sidecars' reports arrive, and their broker credentials leave,
		// on their xDS connection, behind the same authentication.
		Services: map[string]func(grpc.ServiceRegistrar){
			xdsv1.Reports_Stream_FullMethodName:          reportService.Register,
			xdsv1.BrokerCredentials_Issue_FullMethodName: credentials.Register,
		},
	}
	if opts.XDSWithoutTLS {
		xdsOpts.TLS = nil
	}
	runnables = append(runnables, xds.NewServer(publisher, tracker, xdsOpts))
	if opts.BrokerRoutesService != "" {
		routes, err := pki.NewRouteCertificate(authority, opts.BrokerRoutesService, log.WithName("broker-routes-tls"))
		if err != nil {
			return nil, fmt.Errorf("-broker-routes-service: %w", err)
		}
		runnables = append(runnables, routes)
	}
	if opts.PodName != "" {
		labeler := &leaderlabel.Labeler{Client: mgr.GetClient(), Pod: types.NamespacedName{Namespace: opts.Namespace, Name: opts.PodName}, Log: log.WithName("leader-label")}
		runnables = append(runnables, labeler.Unlabelled(), labeler.Labelled())
	}
	for _, r := range runnables {
		if err := mgr.Add(r); err != nil {
			return nil, fmt.Errorf("adding to the manager: %w", err)
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding the health check: %w", err)
	}
	// Every replica is ready once it serves a certificate, leader or not,
	// so that a failover keeps endpoints (the xDS stream itself tells a
	// sidecar to retry until it reaches the leader).
	if err := mgr.AddReadyzCheck("readyz", authority.ReadyCheck); err != nil {
		return nil, fmt.Errorf("adding the readiness check: %w", err)
	}
	return &Operator{mgr: mgr, publisher: publisher, reports: reportService.Store(), opts: opts, log: log}, nil
}
