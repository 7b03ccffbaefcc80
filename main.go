// Command weighstation is the whole mesh in one binary. Subcommands:
//
//	weighstation operator   the Kubernetes operator
//	weighstation sidecar    the NATS-protocol proxy beside each application
//	weighstation broker     the embedded NATS broker
//	weighstation bench      the open-loop load generator
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers"
	"github.com/weighstation/weighstation/controllers/pki"
	"github.com/weighstation/weighstation/controllers/xds"
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

const usage = `usage: weighstation <command> [flags]

commands:
  operator   run the Kubernetes operator
  sidecar    run the sidecar beside an application
  broker     run the embedded NATS broker
  bench      generate open-loop load against a sidecar or a broker

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
		err = runSidecar(os.Args[2:])
	case "broker":
		err = runBroker(os.Args[2:])
	case "bench":
		err = runBench(os.Args[2:])
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
	leaderElect := fs.Bool("leader-elect", true, "elect a leader, so that only one replica reconciles at a time")
	leaderNamespace := fs.String("leader-election-namespace", "", "namespace of the leader election lease (default: the pod's own, in a cluster)")
	namespace := fs.String("namespace", os.Getenv("POD_NAMESPACE"), "the operator's own namespace, where its CA Secret lives (default: $POD_NAMESPACE)")
	xdsListen := fs.String("xds-listen", ":9443", "address of the xDS server that sidecars connect to (TLS, from the operator's CA)")
	xdsService := fs.String("xds-service", "weighstation-xds", "name of the Service in front of the xDS server; its DNS names go into the serving certificate")
	xdsAudience := fs.String("xds-audience", DefaultXDSAudience, "audience of the projected ServiceAccount tokens that sidecars present")
	caSecret := fs.String("ca-secret", pki.DefaultSecretName, "name of the Secret, in -namespace, that holds the operator's CA")
	podName := fs.String("pod-name", os.Getenv("POD_NAME"), "the operator's own Pod (default $POD_NAME): the leader labels it "+controllers.LeaderLabel+" for the xDS Service; empty: no label")
	bundleResync := fs.Duration("ca-bundle-resync", 10*time.Second, "how often the CA bundle ConfigMap is checked in every namespace with sidecar pods (a new namespace's first pod waits at most this long for it)")
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
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))

	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("finding the Kubernetes API: %w", err)
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress:  *probeAddr,
		LeaderElection:          *leaderElect,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: *leaderNamespace,
		Cache:                   controllers.CacheOptions(),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if *namespace == "" {
		return errors.New("-namespace (or $POD_NAMESPACE) is required: the operator keeps its CA in a Secret there")
	}
	log := ctrl.Log.WithName("operator")
	authority, err := pki.New(mgr.GetAPIReader(), mgr.GetClient(), pki.Options{
		Namespace:  *namespace,
		SecretName: *caSecret,
		DNSNames:   pki.ServiceDNSNames(*xdsService, *namespace),
		Log:        log.WithName("ca"),
		OnBundleChange: func([]byte) {
			select {
			case bundleChanged <- struct{}{}:
			default: // a republish is already due
			}
		},
	})
	if err != nil {
		return err
	}
	tracker := xds.NewTracker()
	publisher := xds.NewPublisher(log.WithName("xds"), tracker)
	if err := controllers.SetupReconcilers(mgr, controllers.Setup{Sink: publisher, Defaults: defaults, OnSynced: publisher.MarkSynced, Tracker: tracker}); err != nil {
		return err
	}
	xdsServer := xds.NewServer(publisher, tracker, xds.Options{
		Listen:        *xdsListen,
		TLS:           authority.TLSConfig(),
		Authenticator: xds.TokenReviewer{Client: mgr.GetClient(), Pods: mgr.GetCache(), Audience: *xdsAudience},
		Registerer:    metrics.Registry,
		Log:           log.WithName("xds"),
	})
	runnables := []manager.Runnable{authority, xdsServer, &controllers.BundlePublisher{
		Client: mgr.GetClient(), Bundle: authority.Bundle, Changed: bundleChanged, Interval: *bundleResync, Log: log.WithName("ca-bundle"),
	}}
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
