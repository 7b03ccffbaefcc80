package main

import (
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/weighstation/weighstation/controllers/injectionproof"
	"github.com/weighstation/weighstation/controllers/pki"
	"github.com/weighstation/weighstation/controllers/webhook"
	"github.com/weighstation/weighstation/internal/tlsreload"
	"github.com/weighstation/weighstation/internal/version"
)

// webhookFlags are the operator's flags for the sidecar-injection webhook.
type webhookFlags struct {
	configuration, listen, service, namespace string
	image, broker, operator                   string
	xdsService, xdsListen, audience           string
	tokenExpiration                           time.Duration
	resources                                 webhook.Resources
	// prometheusAnnotations: -sidecar-prometheus-annotations.
	prometheusAnnotations bool
	// certDir holds the serving certificate when another issuer
	// (cert-manager) keeps it; empty: the operator's CA.
	certDir string
	// runAsUser: -sidecar-run-as-user.
	runAsUser int64
	// proofKeys signs the injection proof (the injectionproof.Keeper).
	proofKeys injectionproof.KeySource
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
		PrometheusAnnotations:  f.prometheusAnnotations,
		RunAsUser:              f.runAsUser,
	}
	if err := cfg.Validate(); err != nil {
		return webhook.Config{}, fmt.Errorf("the sidecar-injection webhook: %w", err)
	}
	return cfg, nil
}

// servingFiles reads the webhook's serving certificate from -webhook-cert-dir
// (nil when it is empty). The files are those of a mounted
// kubernetes.io/tls Secret, which the kubelet updates in place when
// cert-manager renews the certificate; they are read again at the next
// handshake after a change. A directory without a usable pair stops the
// operator at start: in a pod the kubelet mounts the Secret before the
// container starts, so a missing pair is a wrong flag.
func (f webhookFlags) servingFiles(log logr.Logger) (*tlsreload.KeyPair, error) {
	if f.configuration == "" || f.certDir == "" {
		return nil, nil
	}
	pair, err := tlsreload.NewKeyPair("the webhook's serving certificate",
		filepath.Join(f.certDir, corev1.TLSCertKey), filepath.Join(f.certDir, corev1.TLSPrivateKeyKey), tlsreload.Options{Log: log})
	if err != nil {
		return nil, fmt.Errorf("-webhook-cert-dir %s: %w", f.certDir, err)
	}
	// The apiserver calls the webhook at its Service's name: a certificate
	// without it fails every call (and every pod that opted in, with
	// failurePolicy Fail). Said, not refused: the issuer may be fixing it,
	// and the next certificate is read without a restart.
	name := f.service + "." + f.namespace + ".svc"
	if err := pair.Certificate().Leaf.VerifyHostname(name); err != nil {
		log.Error(err, "the webhook's serving certificate does not name its Service (-webhook-service in -namespace): the apiserver's calls will fail", "want", name)
	}
	return pair, nil
}

// webhookRunnables returns the webhook's server and, when the certificate
// comes from the operator's CA, its caBundle writer. With files (from
// -webhook-cert-dir) the server serves them, and nothing writes the
// caBundle: the certificate's issuer owns it (cert-manager's cainjector,
// from the chart's cert-manager.io/inject-ca-from annotation), and two
// writers would undo each other's bundle every few seconds.
func webhookRunnables(mgr ctrl.Manager, authority *pki.Authority, f webhookFlags, cfg webhook.Config, files *tlsreload.KeyPair, log logr.Logger) []manager.Runnable {
	server := &webhook.Server{
		Listen: f.listen,
		Injector: &webhook.Injector{
			Config: cfg,
			Keys:   f.proofKeys,
			// The manager's cache: Namespace metadata only, watched.
			Namespaces: mgr.GetCache(),
			APIReader:  mgr.GetAPIReader(),
			Excluded:   webhook.ExcludedNamespaces(f.namespace),
		},
		Log: log,
	}
	if files != nil {
		server.GetCertificate = files.GetCertificate
		return []manager.Runnable{server}
	}
	// The apiserver reaches the webhook by its Service; 127.0.0.1 and
	// localhost are for a webhook registered by URL (tests, and an
	// operator run outside the cluster).
	cert := authority.NewServingCertificate(
		append(pki.ServiceDNSNames(f.service, f.namespace), "localhost"), []net.IP{net.IPv4(127, 0, 0, 1)})
	server.GetCertificate = cert.GetCertificate
	bundle := &webhook.CABundle{
		Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(), Name: f.configuration, Bundle: authority.Bundle,
		Changed: webhookBundleChanged, Interval: webhookCABundleInterval, Log: log.WithName("ca-bundle"),
	}
	return []manager.Runnable{server, bundle}
}
