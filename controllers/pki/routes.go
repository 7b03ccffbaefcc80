package pki

import (
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"github.com/weighstation/weighstation/internal/keep"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// The operator keeps the brokers' route certificate Secret, in its own
// namespace, next to the CA Secret. get and update are limited to its name
// as they are for the CA Secret; create is the CA Secret's rule above.
//
// +kubebuilder:rbac:groups="",namespace=weighstation-system,resources=secrets,resourceNames=weighstation-broker-routes-tls,verbs=get;update

// RouteSecretName is the Secret of the brokers' route certificate. The
// RBAC markers name it, so it is not an option.
const RouteSecretName = "weighstation-broker-routes-tls"

// RouteCertificate keeps the Secret that the brokers mount for TLS between
// themselves (weighstation broker -cluster-tls-*): a kubernetes.io/tls
// Secret whose tls.crt and tls.key every broker presents, as server and as
// client, and whose ca.crt is the CA bundle they verify each other with.
//
// One certificate serves every broker: it names every pod behind the
// brokers' headless Service by a wildcard, and the brokers run from one
// pod template. It is signed by the Authority's current signer and renewed
// like the serving certificate (LeafRenewAt of LeafLifetime), or at once
// when the signer changes. ca.crt follows the bundle, so a new CA reaches
// the brokers SigningDelay before any certificate it signs, as it reaches
// the sidecars.
//
// Like the Authority, it runs on every replica (the Secret matters before
// a leader is elected), reads through the API server, and resolves races
// between replicas with create and update conflicts: the loser reads again
// and finds nothing left to do.
type RouteCertificate struct {
	authority *Authority
	key       types.NamespacedName
	dnsNames  []string
	log       logr.Logger
}

// NewRouteCertificate returns a RouteCertificate for the brokers behind
// the headless Service named service, in the Authority's namespace.
func NewRouteCertificate(a *Authority, service string, log logr.Logger) (*RouteCertificate, error) {
	if service == "" {
		return nil, errors.New("the brokers' headless Service name is required")
	}
	ns := a.opts.Namespace
	return &RouteCertificate{
		authority: a,
		key:       types.NamespacedName{Namespace: ns, Name: RouteSecretName},
		// The route URLs name pods as <pod>.<service>.<ns>.svc; the longer
		// form is there for URLs written with the cluster domain.
		dnsNames: []string{"*." + service + "." + ns + ".svc", "*." + service + "." + ns + ".svc.cluster.local"},
		log:      log.WithValues("secret", ns+"/"+RouteSecretName),
	}, nil
}

// Ensure brings the Secret up to date with the CA Secret: it first has the
// Authority read the CA Secret, so that every replica decides from the
// same CA, then issues a certificate if the stored one is missing, due,
// for other names, or from another signer, and copies the bundle.
func (r *RouteCertificate) Ensure(ctx context.Context) error {
	if err := r.authority.Ensure(ctx); err != nil {
		return err
	}
	s := r.authority.served.Load()
	var lastErr error
	for range maxAttempts {
		var secret corev1.Secret
		err := r.authority.reader.Get(ctx, r.key, &secret)
		found := err == nil
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading the route certificate Secret %s: %w", r.key, err)
		}
		data, why, err := r.desired(secret.Data, s)
		if err != nil {
			return err
		}
		switch {
		case why == "":
			return nil
		case !found:
			secret = newTLSSecret(r.key, data)
			if err := r.authority.writer.Create(ctx, &secret); err != nil {
				if apierrors.IsAlreadyExists(err) {
					lastErr = err // another replica created it first
					continue
				}
				return fmt.Errorf("creating the route certificate Secret %s: %w", r.key, err)
			}
		default:
			merged := maps.Clone(secret.Data)
			if merged == nil {
				merged = map[string][]byte{}
			}
			maps.Copy(merged, data)
			secret.Data = merged
			// The resourceVersion read makes a stale decision conflict.
			if err := r.authority.writer.Update(ctx, &secret); err != nil {
				if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
					lastErr = err
					continue
				}
				return fmt.Errorf("updating the route certificate Secret %s: %w", r.key, err)
			}
		}
		r.log.Info("updated the brokers' route certificate", "why", why, "ca", s.signer.Subject.CommonName)
		return nil
	}
	return fmt.Errorf("the route certificate Secret %s changed under each of %d attempts: %w", r.key, maxAttempts, lastErr)
}

// desired returns what the Secret's keys should hold, and why they must
// change ("" when they need not).
func (r *RouteCertificate) desired(stored map[string][]byte, s *served) (map[string][]byte, string, error) {
	now := r.authority.opts.Now()
	why := r.renewal(stored, s, now)
	data := map[string][]byte{
		corev1.TLSCertKey:       stored[corev1.TLSCertKey],
		corev1.TLSPrivateKeyKey: stored[corev1.TLSPrivateKeyKey],
		SecretBundleKey:         s.bundle,
	}
	if why != "" {
		cert, err := newLeaf(s.signing, leafRequest{dnsNames: r.dnsNames, usages: routeUsages}, now, r.authority.opts.LeafLifetime)
		if err != nil {
			return nil, "", fmt.Errorf("issuing the route certificate: %w", err)
		}
		keyPEM, err := encodeKey(cert.PrivateKey.(crypto.Signer))
		if err != nil {
			return nil, "", err
		}
		data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey] = encodeCert(cert.Leaf), keyPEM
		return data, why, nil
	}
	if !bytes.Equal(stored[SecretBundleKey], s.bundle) {
		return data, "the CA bundle changed", nil
	}
	return data, "", nil
}

// routeUsages: each broker is the server of the routes it accepts and the
// client of those it dials, with the one certificate.
var routeUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}

// renewal says why the stored certificate must be replaced, or "".
func (r *RouteCertificate) renewal(stored map[string][]byte, s *served, now time.Time) string {
	pair, err := tls.X509KeyPair(stored[corev1.TLSCertKey], stored[corev1.TLSPrivateKeyKey])
	switch {
	case len(stored[corev1.TLSCertKey]) == 0:
		return "none yet"
	case err != nil:
		return "unusable: " + err.Error()
	case pair.Leaf.CheckSignatureFrom(s.signing.cert) != nil:
		return "the signing CA changed"
	case !now.Before(fractionOf(pair.Leaf, r.authority.opts.LeafRenewAt)):
		return "due for renewal"
	case !slices.Equal(pair.Leaf.DNSNames, r.dnsNames):
		return "the headless Service changed"
	case !slices.Equal(pair.Leaf.ExtKeyUsage, routeUsages):
		return "the key usages changed"
	}
	return ""
}

// Start calls Ensure at once and then every CheckInterval of the
// Authority, until ctx ends, retrying sooner after a failure (the
// Authority's first load included). It is a manager.Runnable.
func (r *RouteCertificate) Start(ctx context.Context) error {
	return keep.Run(ctx, r.authority.opts.CheckInterval, nil, r.Ensure, r.log, "the brokers' route certificate")
}

// NeedLeaderElection is false: replicas agree through the Secret, and the
// brokers need their certificate whether or not a leader is elected.
func (r *RouteCertificate) NeedLeaderElection() bool { return false }
