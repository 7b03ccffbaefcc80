package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/weighstation/weighstation/broker"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar"
	"github.com/weighstation/weighstation/sidecar/configfile"
	"github.com/weighstation/weighstation/sidecar/upstream"
)

// readToken reads a credential from a file, so that it never shows in a
// process listing.
func readToken(path string) (string, error) {
	if path == "" {
		return "", errors.New("-token-file is required (or nkeys: -sidecar-nkeys for the broker, -nkey-seed-file for the sidecar): the broker admits sidecars only")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the token: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return token, nil
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

func runBroker(args []string) error {
	fs := flag.NewFlagSet("broker", flag.ExitOnError)
	o := broker.DefaultOptions
	fs.StringVar(&o.Listen, "listen", o.Listen, "client address")
	tokenFile := fs.String("token-file", "", "file holding the token every sidecar must present")
	nkeysFlag := fs.String("sidecar-nkeys", "", "comma-separated public nkeys of the sidecars allowed in (instead of a token)")
	maxPayload := fs.Int("max-payload", int(o.MaxPayload), "largest message, in bytes")
	fs.Int64Var(&o.MaxPending, "max-pending", o.MaxPending, "most bytes buffered for one client before it is a slow consumer")
	fs.IntVar(&o.MaxConnections, "max-connections", o.MaxConnections, "most client connections")
	fs.StringVar(&o.ClusterName, "cluster-name", o.ClusterName, "cluster name")
	fs.StringVar(&o.ClusterListen, "cluster-listen", "", "route address, host:port (empty: no clustering)")
	routes := fs.String("routes", "", "comma-separated route URLs of the other brokers")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *nkeysFlag != "" {
		o.SidecarNkeys = strings.Split(*nkeysFlag, ",")
	} else {
		token, err := readToken(*tokenFile)
		if err != nil {
			return err
		}
		o.Token = token
	}
	o.MaxPayload = int32(*maxPayload)
	if *routes != "" {
		o.Routes = strings.Split(*routes, ",")
	}
	s, err := broker.New(o)
	if err != nil {
		return err
	}
	s.ConfigureLogger()
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		return errors.New("the broker did not become ready within 30s")
	}
	ctx, stop := signalContext()
	defer stop()
	<-ctx.Done()
	s.Shutdown()
	s.WaitForShutdown()
	return nil
}

func runSidecar(args []string) error {
	fs := flag.NewFlagSet("sidecar", flag.ExitOnError)
	opts := sidecar.DefaultOptions
	fs.StringVar(&opts.Listen, "listen", opts.Listen, "where the application connects")
	brokerURL := fs.String("broker", "nats://weighstation-broker:4222", "the broker's URL")
	tokenFile := fs.String("token-file", "", "file holding the broker token (the application never sees it)")
	nkeySeedFile := fs.String("nkey-seed-file", "", "file holding the sidecar's nkey seed, instead of a token")
	configPath := fs.String("config", "", "pod configuration file (JSON or YAML), reloaded on change; empty: the documented defaults")
	reload := fs.Duration("reload-interval", time.Second, "how often the configuration file is checked")
	fs.IntVar(&opts.MaxConnections, "max-connections", opts.MaxConnections, "most application connections")
	fs.Int64Var(&opts.MemoryBudget, "memory-budget", opts.MemoryBudget, "bytes all pending messages may hold together; past it, non-essential subscriptions are shed first")
	metricsListen := fs.String("metrics-listen", ":9091", "address of /metrics (Prometheus) and /debug/latency; empty disables them")
	pprofOn := fs.Bool("debug-pprof", false, "also serve Go's profiles at /debug/pprof/ on the metrics address (for benchmarking; off in production)")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("sidecar")
	var credentials nats.Option
	if *nkeySeedFile != "" {
		opt, err := nats.NkeyOptionFromSeed(*nkeySeedFile)
		if err != nil {
			return fmt.Errorf("reading the nkey seed: %w", err)
		}
		credentials = opt
	} else {
		token, err := readToken(*tokenFile)
		if err != nil {
			return err
		}
		credentials = nats.Token(token)
	}
	nc, err := nats.Connect(*brokerURL, append(upstream.ConnectOptions(), credentials)...)
	if err != nil {
		return fmt.Errorf("connecting to the broker %s: %w", *brokerURL, err)
	}
	defer nc.Close()
	opts.Log = log
	s, err := sidecar.New(nc, opts)
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	if *configPath != "" {
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
		return err
	}
	if *metricsListen != "" {
		handler := s.Handler()
		if *pprofOn {
			mux := http.NewServeMux()
			mux.Handle("/", handler)
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			handler = mux
		}
		metrics := &http.Server{Addr: *metricsListen, Handler: handler, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := metrics.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error(err, "metrics endpoint stopped")
			}
		}()
		defer metrics.Close()
	}
	log.Info("serving", "listen", s.Addr().String(), "broker", *brokerURL, "metrics", *metricsListen)
	<-ctx.Done()
	s.Close()
	return nil
}
