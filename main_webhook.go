package main

import (
	"fmt"
	"net"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/weighstation/weighstation/controllers/pki"
	"github.com/weighstation/weighstation/controllers/webhook"
	"github.com/weighstation/weighstation/internal/version"
)

// webhookFlags are the operator's flags for the sidecar-injection webhook.
type webhookFlags struct {
	configuration, listen, service, namespace string
	image, broker, operator                   string
	xdsService, xdsListen, audience           string
	tokenExpiration                           time.Duration
	resources                                 webhook.Resources
}

// webhookCABundleInterval is how often the webhook configuration's
// caBundle is checked besides CA changes: a helm upgrade rewrites the
// configuration without it, and pods are refused (failurePolicy Fail)
// until it is back.
const webhookCABundleInterval = 10 * time.Second

// config checks the flags and returns what every sidecar gets. It runs
// before the operator looks for a cluster, so a bad flag is said at once.
func (f webhookFlags) config() (webhook.Config, error) {
	operator := f.operator
	if operator == "" {
		_, port, err := net.SplitHostPort(f.xdsListen)
		if err != nil {
			return webhook.Config{}, fmt.Errorf("-xds-listen %q: %w", f.xdsListen, err)
		}
		operator = net.JoinHostPort(f.xdsService+"."+f.namespace+".svc", port)
	}
	cfg := webhook.Config{
		Image:                  f.image,
		Operator:               operator,
		Broker:                 f.broker,
		Audience:               f.audience,
		TokenExpirationSeconds: int64(f.tokenExpiration / time.Second),
		Version:                version.String(),
		Resources:              f.resources,
		HealthPort:             webhook.DefaultHealthPort,
		MetricsPort:            webhook.DefaultMetricsPort,
	}
	if err := cfg.Validate(); err != nil {
		return webhook.Config{}, fmt.Errorf("the sidecar-injection webhook: %w", err)
	}
	return cfg, nil
}

// webhookRunnables returns the webhook's server and its caBundle writer.
func webhookRunnables(mgr ctrl.Manager, authority *pki.Authority, f webhookFlags, cfg webhook.Config, log logr.Logger) []manager.Runnable {
	// The apiserver reaches the webhook by its Service; 127.0.0.1 and
	// localhost are for a webhook registered by URL (tests, and an
	// operator run outside the cluster).
	cert := authority.NewServingCertificate(
		append(pki.ServiceDNSNames(f.service, f.namespace), "localhost"), []net.IP{net.IPv4(127, 0, 0, 1)})
	server := &webhook.Server{
		Listen:         f.listen,
		GetCertificate: cert.GetCertificate,
		Injector: &webhook.Injector{
			Config: cfg,
			// The manager's cache: Namespace metadata only, watched.
			Namespaces: mgr.GetCache(),
			APIReader:  mgr.GetAPIReader(),
			Excluded:   webhook.ExcludedNamespaces(f.namespace),
		},
		Log: log,
	}
	bundle := &webhook.CABundle{
		Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(), Name: f.configuration, Bundle: authority.Bundle,
		Changed: webhookBundleChanged, Interval: webhookCABundleInterval, Log: log.WithName("ca-bundle"),
	}
	return []manager.Runnable{server, bundle}
}
