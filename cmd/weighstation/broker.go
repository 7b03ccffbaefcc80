package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/weighstation/weighstation/broker"
	"github.com/weighstation/weighstation/internal/logflags"
	"github.com/weighstation/weighstation/internal/tokenfile"
)

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

func runBroker(args []string) error {
	fs := flag.NewFlagSet("broker", flag.ExitOnError)
	o := broker.DefaultOptions
	fs.StringVar(&o.Listen, "listen", o.Listen, "client address")
	trustDir := fs.String("trust-dir", "", "directory holding the operator's "+broker.TrustOperatorFile+" and "+broker.TrustSystemAccountFile+
		" (the mounted weighstation-broker-trust ConfigMap): sidecars present the credential the operator issued them, in their namespace's account, which the operator pushes over the system account with its revocations; instead of -token-file and -sidecar-nkeys")
	fs.StringVar(&o.AccountDir, "account-dir", "", "with -trust-dir: the directory where the broker keeps the namespaces' account JWTs it learned (an emptyDir is enough: the operator and the other brokers give them back)")
	tokenFile := fs.String("token-file", "", "file holding the token every sidecar must present")
	nkeysFlag := fs.String("sidecar-nkeys", "", "comma-separated public nkeys of the sidecars allowed in (instead of a token)")
	maxPayload := fs.Int("max-payload", int(o.MaxPayload), "largest message, in bytes")
	fs.Int64Var(&o.MaxPending, "max-pending", o.MaxPending, "most bytes buffered for one client before it is a slow consumer")
	fs.IntVar(&o.MaxConnections, "max-connections", o.MaxConnections, "most client connections")
	fs.StringVar(&o.ClusterName, "cluster-name", o.ClusterName, "cluster name")
	fs.StringVar(&o.ClusterListen, "cluster-listen", "", "route address, host:port (empty: no clustering)")
	routes := fs.String("routes", "", "comma-separated route URLs of the other brokers")
	var routeTLS broker.RouteTLS
	fs.StringVar(&routeTLS.CertFile, "cluster-tls-cert", "", "PEM certificate this broker presents on routes, as server and as client (with -cluster-tls-key and -cluster-tls-ca: mutual TLS between brokers; read again when it changes)")
	fs.StringVar(&routeTLS.KeyFile, "cluster-tls-key", "", "PEM private key of -cluster-tls-cert")
	fs.StringVar(&routeTLS.CAFile, "cluster-tls-ca", "", "PEM CA bundle that the other brokers' route certificates must chain to")
	metricsListen := fs.String("metrics-listen", "", "address of /metrics (Prometheus) and /healthz, e.g. 127.0.0.1:9092; empty: none (the chart serves them on the pod's address)")
	var logOpts logflags.Options
	logOpts.BindGroup(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := logOpts.New().WithName("broker")
	switch {
	case *trustDir != "" && (*nkeysFlag != "" || *tokenFile != ""):
		return errors.New("-trust-dir, -token-file and -sidecar-nkeys are three ways to admit sidecars: give one")
	case *trustDir != "":
		trust, err := broker.ReadTrust(*trustDir)
		if err != nil {
			return err
		}
		o.Trust = trust
	case *nkeysFlag != "":
		o.SidecarNkeys = strings.Split(*nkeysFlag, ",")
	default:
		token, err := tokenfile.Read(*tokenFile)
		if err != nil {
			return err
		}
		o.Token = token
	}
	o.MaxPayload = int32(*maxPayload)
	rt, err := routeTLSOptions(routeTLS, o.ClusterListen)
	if err != nil {
		return err
	}
	if rt != nil {
		rt.Log = log.WithName("route-tls")
		o.RouteTLS = rt
	}
	if *routes != "" {
		o.Routes = strings.Split(*routes, ",")
	}
	s, err := broker.New(o)
	if err != nil {
		return err
	}
	// nats-server's own logger would exit the process on a fatal error; it
	// comes here instead, and the command stops with it.
	fatal := make(chan error, 1)
	broker.NewLogger(log.WithName("nats"), func(err error) {
		select {
		case fatal <- err:
		default: // the first one stops the broker
		}
	}).Configure(s)
	ctx, stop := signalContext()
	defer stop()
	go s.Start()
	ready := make(chan bool, 1)
	go func() { ready <- s.ReadyForConnections(30 * time.Second) }()
	select {
	case err := <-fatal:
		s.Shutdown()
		return fmt.Errorf("the broker could not start: %w", err)
	case ok := <-ready:
		if !ok {
			s.Shutdown()
			return errors.New("the broker did not become ready within 30s")
		}
	}
	if o.Trust != nil {
		log.Info("admitting sidecars with the operator's credentials, one account per namespace", "operator", o.Trust.Operator.Subject, "accountDir", o.AccountDir)
	}
	var metricsDone <-chan error
	if *metricsListen != "" {
		addr, done, err := broker.NewMetrics(s).Serve(ctx, *metricsListen)
		if err != nil {
			s.Shutdown()
			return err
		}
		metricsDone = done
		log.Info("serving metrics", "address", addr.String())
	}
	log.Info("serving", "listen", s.ClientURL())
	select {
	case <-ctx.Done():
	case err := <-fatal:
		s.Shutdown()
		return fmt.Errorf("the broker stopped: %w", err)
	case err := <-metricsDone:
		s.Shutdown()
		return fmt.Errorf("the broker's metrics server stopped: %w", err)
	}
	s.Shutdown()
	s.WaitForShutdown()
	return nil
}

// routeTLSOptions checks the -cluster-tls-* flags: all three or none, and
// only with -cluster-listen. A partial set is refused rather than run as
// plaintext routes that look encrypted in the pod spec.
func routeTLSOptions(rt broker.RouteTLS, clusterListen string) (*broker.RouteTLS, error) {
	given := 0
	for _, f := range []string{rt.CertFile, rt.KeyFile, rt.CAFile} {
		if f != "" {
			given++
		}
	}
	switch {
	case given == 0:
		return nil, nil
	case given < 3:
		return nil, errors.New("-cluster-tls-cert, -cluster-tls-key and -cluster-tls-ca go together: give all three for TLS between brokers, or none")
	case clusterListen == "":
		return nil, errors.New("-cluster-tls-cert, -cluster-tls-key and -cluster-tls-ca need -cluster-listen: without a cluster there are no routes to encrypt")
	}
	return &rt, nil
}
