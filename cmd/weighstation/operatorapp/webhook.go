package operatorapp

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

// webhookCABundleInterval is how often the webhook configuration's
// caBundle is checked besides CA changes: a helm upgrade rewrites the
// configuration without it, and pods are refused (failurePolicy Fail)
// until it is back.
const webhookCABundleInterval = 10 * time.Second

// injectionConfig checks the webhook's flags and returns what every
// sidecar gets.
func (o *Options) injectionConfig() (webhook.Config, error) {
	w := o.Webhook
	operator := w.SidecarOperator
	if operator == "" {
		_, port, err := net.SplitHostPort(o.XDSListen)
		if err != nil {
			return webhook.Config{}, fmt.Errorf("-xds-listen %q: %w", o.XDSListen, err)
		}
		operator = net.JoinHostPort(o.XDSService+"."+o.Namespace+".svc", port)
	}
	cfg := webhook.Config{
		Image:                  w.SidecarImage,
		Operator:               operator,
		Broker:                 w.SidecarBroker,
		Audience:               o.XDSAudience,
		TokenExpirationSeconds: int64(w.TokenExpiration / time.Second),
		Version:                version.String(),
		Resources:              w.Resources,
		HealthPort:             webhook.DefaultHealthPort,
		MetricsPort:            webhook.DefaultMetricsPort,
		PrometheusAnnotations:  w.PrometheusAnnotations,
		RunAsUser:              w.RunAsUser,
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
func (o *Options) servingFiles(log logr.Logger) (*tlsreload.KeyPair, error) {
	w := o.Webhook
	if w.Configuration == "" || w.CertDir == "" {
		return nil, nil
	}
	pair, err := tlsreload.NewKeyPair("the webhook's serving certificate",
		filepath.Join(w.CertDir, corev1.TLSCertKey), filepath.Join(w.CertDir, corev1.TLSPrivateKeyKey), tlsreload.Options{Log: log})
	if err != nil {
		return nil, fmt.Errorf("-webhook-cert-dir %s: %w", w.CertDir, err)
	}
	// The apiserver calls the webhook at its Service's name: a certificate
	// without it fails every call (and every pod that opted in, with
	// failurePolicy Fail). Said, not refused: the issuer may be fixing it,
	// and the next certificate is read without a restart.
	name := w.Service + "." + o.Namespace + ".svc"
	if err := pair.Certificate().Leaf.VerifyHostname(name); err != nil {
		log.Error(err, "the webhook's serving certificate does not name its Service (-webhook-service in -namespace): the apiserver's calls will fail", "want", name)
	}
	return pair, nil
}

// webhookParts is what the webhook's runnables need besides the options.
type webhookParts struct {
	config    webhook.Config
	proofKeys injectionproof.KeySource
	// files: the serving certificate from -webhook-cert-dir; nil: the
	// operator's CA.
	files *tlsreload.KeyPair
	// bundleChanged wakes the caBundle writer when the CA changes.
	bundleChanged chan struct{}
}

// webhookRunnables returns the webhook's server and, when the certificate
// comes from the operator's CA, its caBundle writer. With files (from
// -webhook-cert-dir) the server serves them, and nothing writes the
// caBundle: the certificate's issuer owns it (cert-manager's cainjector,
// from the chart's cert-manager.io/inject-ca-from annotation), and two
// writers would undo each other's bundle every few seconds.
func webhookRunnables(mgr ctrl.Manager, authority *pki.Authority, o *Options, parts webhookParts, log logr.Logger) []manager.Runnable {
	server := &webhook.Server{
		Listen: o.Webhook.Listen,
		Injector: &webhook.Injector{
			Config: parts.config,
			Keys:   parts.proofKeys,
			// The manager's cache: Namespace metadata only, watched.
			Namespaces: mgr.GetCache(),
			APIReader:  mgr.GetAPIReader(),
			Excluded:   webhook.ExcludedNamespaces(o.Namespace),
		},
		Log: log,
	}
	if parts.files != nil {
		server.GetCertificate = parts.files.GetCertificate
		return []manager.Runnable{server}
	}
	// The apiserver reaches the webhook by its Service; 127.0.0.1 and
	// localhost are for a webhook registered by URL (tests, and an
	// operator run outside the cluster).
	cert := authority.NewServingCertificate(
		append(pki.ServiceDNSNames(o.Webhook.Service, o.Namespace), "localhost"), []net.IP{net.IPv4(127, 0, 0, 1)})
	server.GetCertificate = cert.GetCertificate
	bundle := &webhook.CABundle{
		Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(), Name: o.Webhook.Configuration, Bundle: authority.Bundle,
		Changed: parts.bundleChanged, Interval: webhookCABundleInterval, Log: log.WithName("ca-bundle"),
	}
	return []manager.Runnable{server, bundle}
}
