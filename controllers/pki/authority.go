package pki

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/weighstation/weighstation/internal/keep"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The operator reads, creates and updates its CA Secret, in its own
// namespace only. The namespace below is a placeholder: controller-gen
// makes these rules a Role in weighstation-system, and the chart must put
// that Role (and its RoleBinding) in the release namespace. get and update
// are limited to the Secret's name, so the operator cannot read the other
// Secrets of its namespace (Helm's release Secrets, for one). create cannot
// be limited by name, because RBAC does not know the name of a POSTed
// object. A chart that creates the Secret empty can drop the create rule.
//
// +kubebuilder:rbac:groups="",namespace=weighstation-system,resources=secrets,verbs=create
// +kubebuilder:rbac:groups="",namespace=weighstation-system,resources=secrets,resourceNames=weighstation-ca,verbs=get;update

// Defaults of Options.
const (
	// DefaultSecretName is the CA Secret's name. The RBAC markers name it,
	// so a chart that changes it must change the Role too.
	DefaultSecretName = "weighstation-ca"
	// DefaultCALifetime with DefaultCARotateAt rotates a CA after 8
	// months. The old CA is then still trusted for 4 months, which is
	// time enough for every pod to receive the new bundle.
	DefaultCALifetime = 365 * 24 * time.Hour
	DefaultCARotateAt = 2.0 / 3
	// DefaultLeafLifetime with DefaultLeafRenewAt renews a serving
	// certificate after 20 days. The 10 days left cover a long operator
	// outage. A leaf is cheap to renew, since it is never stored.
	DefaultLeafLifetime = 30 * 24 * time.Hour
	DefaultLeafRenewAt  = 2.0 / 3
	// DefaultSigningDelay is how long a new CA is only trusted before it
	// signs. It has to cover the caller publishing the bundle (retries
	// included), the kubelet refreshing the mounted ConfigMap (its sync
	// period plus its ConfigMap cache TTL, a minute each by default), and
	// tlsreload's MaxAge.
	DefaultSigningDelay = 10 * time.Minute
	// DefaultCheckInterval bounds how late a rotation or a switch of signer
	// happens. The cost is one GET of one Secret per replica per interval.
	DefaultCheckInterval = time.Minute
)

// maxAttempts bounds Ensure's read-decide-write loop. Each extra attempt
// means that another replica wrote the Secret in between, and that write
// already did what this one would have done. So a second attempt almost
// always ends the loop, and five means something else is writing.
const maxAttempts = 5

// Options configure an Authority. Zero values take the defaults.
type Options struct {
	// Namespace is the operator's own namespace, where the Secret lives.
	// It is required.
	Namespace string
	// SecretName is the CA Secret's name (DefaultSecretName).
	SecretName string
	// DNSNames and IPAddresses are what the serving certificate names. At
	// least one name or address is required. ServiceDNSNames gives the
	// names of a Service.
	DNSNames    []string
	IPAddresses []net.IP
	// CALifetime is how long a CA is valid. The CA is rotated once the
	// fraction CARotateAt (between 0 and 1) of it has passed.
	CALifetime time.Duration
	CARotateAt float64
	// LeafLifetime is how long a serving certificate is valid, and never
	// longer than its CA. It is renewed once LeafRenewAt of it has passed.
	LeafLifetime time.Duration
	LeafRenewAt  float64
	// SigningDelay is how long a new CA waits in the bundle before it
	// signs the serving certificate. Until then the CA it replaced signs.
	// Within this delay, every replica must see the rotation (one
	// CheckInterval), the caller must publish the bundle, and the kubelet
	// must refresh the mounted ConfigMap.
	SigningDelay time.Duration
	// CheckInterval is how often Start calls Ensure.
	CheckInterval time.Duration
	// Now is the clock for every decision about validity (time.Now). Tests
	// inject one to rotate without waiting. Timers use the real clock.
	Now func() time.Time
	Log logr.Logger
	// OnBundleChange, if set, is called by Ensure with the new bundle when
	// the bundle changes, the first load included. It runs while Ensure
	// holds its lock, so it must not block and must not call Ensure. A
	// caller would typically queue a republish of the ConfigMaps from it.
	OnBundleChange func(bundle []byte)
}

// ServiceDNSNames returns the names by which a Service is reached from a
// pod: <svc>, <svc>.<ns>, <svc>.<ns>.svc and <svc>.<ns>.svc.cluster.local.
// The last one assumes the default cluster domain.
func ServiceDNSNames(service, namespace string) []string {
	return []string{
		service,
		service + "." + namespace,
		service + "." + namespace + ".svc",
		service + "." + namespace + ".svc.cluster.local",
	}
}

func (o *Options) setDefaults() {
	if o.SecretName == "" {
		o.SecretName = DefaultSecretName
	}
	if o.CALifetime == 0 {
		o.CALifetime = DefaultCALifetime
	}
	if o.CARotateAt == 0 {
		o.CARotateAt = DefaultCARotateAt
	}
	if o.LeafLifetime == 0 {
		o.LeafLifetime = DefaultLeafLifetime
	}
	if o.LeafRenewAt == 0 {
		o.LeafRenewAt = DefaultLeafRenewAt
	}
	if o.SigningDelay == 0 {
		o.SigningDelay = DefaultSigningDelay
	}
	if o.CheckInterval == 0 {
		o.CheckInterval = DefaultCheckInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

func (o *Options) validate() error {
	overlap := time.Duration((1 - o.CARotateAt) * float64(o.CALifetime))
	renewWindow := time.Duration((1 - o.LeafRenewAt) * float64(o.LeafLifetime))
	switch {
	case o.Namespace == "":
		return errors.New("the operator's namespace is required")
	case len(o.DNSNames) == 0 && len(o.IPAddresses) == 0:
		return errors.New("the serving certificate needs at least one DNS name or IP address")
	case o.CALifetime < 0 || o.LeafLifetime < 0 || o.SigningDelay < 0 || o.CheckInterval < 0:
		return errors.New("lifetimes, delays and intervals must not be negative")
	case o.CARotateAt <= 0 || o.CARotateAt >= 1 || o.LeafRenewAt <= 0 || o.LeafRenewAt >= 1:
		return fmt.Errorf("the rotation fractions must be between 0 and 1, not %v and %v", o.CARotateAt, o.LeafRenewAt)
	// The old CA must still be valid when the new one starts to sign.
	// Otherwise a leaf signed by the new CA would reach sidecars that do not
	// trust it yet.
	case overlap <= o.SigningDelay:
		return fmt.Errorf("the CA's overlap (%s, after rotation) must be longer than the signing delay (%s)", overlap, o.SigningDelay)
	// Every replica, the one that publishes the bundle included, learns of
	// a rotation at its next check. That has to happen before the new CA
	// signs.
	case o.SigningDelay <= o.CheckInterval:
		return fmt.Errorf("the signing delay (%s) must be longer than the check interval (%s)", o.SigningDelay, o.CheckInterval)
	// A leaf must be checked at least once between its renewal point and
	// its expiry.
	case renewWindow <= o.CheckInterval:
		return fmt.Errorf("the serving certificate's renewal window (%s) must be longer than the check interval (%s)", renewWindow, o.CheckInterval)
	}
	return nil
}

// Authority keeps the operator's CA and its serving certificate. Use New.
type Authority struct {
	reader client.Reader
	writer client.Writer
	opts   Options
	key    types.NamespacedName
	rot    rotation
	leaf   leafRequest
	log    logr.Logger

	// ensureMu serializes Ensure: one read-decide-write at a time, and one
	// leaf issued per decision.
	ensureMu sync.Mutex
	// served is what GetCertificate and Bundle hand out. It is swapped
	// whole, so a handshake never waits on Ensure.
	served atomic.Pointer[served]
}

type served struct {
	cert   *tls.Certificate
	signer *x509.Certificate // the CA that signed cert
	// signing is signer with its key: the brokers' route certificate
	// (RouteCertificate) is signed by the same CA as cert.
	signing *keyPair
	bundle  []byte
}

// New returns an Authority. reader must read through the API server (the
// manager's GetAPIReader()), not through the cache. writer creates and
// updates the Secret (the manager's client).
func New(reader client.Reader, writer client.Writer, opts Options) (*Authority, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("certificate authority options: %w", err)
	}
	return &Authority{
		reader: reader,
		writer: writer,
		opts:   opts,
		key:    types.NamespacedName{Namespace: opts.Namespace, Name: opts.SecretName},
		rot:    rotation{lifetime: opts.CALifetime, rotateAt: opts.CARotateAt, signingDelay: opts.SigningDelay},
		leaf:   leafRequest{dnsNames: opts.DNSNames, ips: opts.IPAddresses},
		log:    opts.Log.WithValues("secret", opts.Namespace+"/"+opts.SecretName),
	}, nil
}

// Ensure brings the CA Secret up to date: it creates the first CA, rotates
// a CA that is due, and drops expired CAs from the bundle. It then renews
// the serving certificate if that is due, or if its signer changed. It is
// safe to call from several goroutines and from several replicas.
func (a *Authority) Ensure(ctx context.Context) error {
	a.ensureMu.Lock()
	defer a.ensureMu.Unlock()
	set, err := a.syncSecret(ctx)
	if err != nil {
		return err
	}
	return a.install(set)
}

// syncSecret reads the Secret, computes what it should hold, and writes it
// if that differs. When another replica wins a race, the loop reads the
// Secret again and adopts what that replica wrote, instead of overwriting
// it.
func (a *Authority) syncSecret(ctx context.Context) (caSet, error) {
	var lastErr error
	for range maxAttempts {
		var secret corev1.Secret
		err := a.reader.Get(ctx, a.key, &secret)
		found := err == nil
		if err != nil && !apierrors.IsNotFound(err) {
			return caSet{}, fmt.Errorf("reading the CA Secret %s: %w", a.key, err)
		}
		stored, err := parseSecret(secret.Data)
		if err != nil {
			return caSet{}, fmt.Errorf("the CA Secret %s: %w: %w", a.key, ErrInvalidSecret, err)
		}
		next, err := a.rot.next(stored, a.opts.Now())
		if err != nil {
			return caSet{}, fmt.Errorf("renewing the CA of %s: %w", a.key, err)
		}
		data, err := next.secretData()
		if err != nil {
			return caSet{}, err
		}
		switch {
		case !found:
			secret = newTLSSecret(a.key, data)
			if err := a.writer.Create(ctx, &secret); err != nil {
				if apierrors.IsAlreadyExists(err) {
					lastErr = err // another replica created it first
					continue
				}
				return caSet{}, fmt.Errorf("creating the CA Secret %s: %w", a.key, err)
			}
		case !sameOwnedData(secret.Data, data):
			merged := maps.Clone(secret.Data)
			if merged == nil {
				merged = map[string][]byte{}
			}
			for _, k := range secretKeys {
				if v, ok := data[k]; ok {
					merged[k] = v
				} else {
					delete(merged, k)
				}
			}
			secret.Data = merged
			// The update carries the resourceVersion that was read, so a
			// replica that decided on stale data gets a conflict.
			if err := a.writer.Update(ctx, &secret); err != nil {
				if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
					lastErr = err
					continue
				}
				return caSet{}, fmt.Errorf("updating the CA Secret %s: %w", a.key, err)
			}
		default:
			return next, nil
		}
		a.logChange(stored, next)
		return next, nil
	}
	return caSet{}, fmt.Errorf("the CA Secret %s changed under each of %d attempts: %w", a.key, maxAttempts, lastErr)
}

func (a *Authority) logChange(stored, next caSet) {
	kv := []any{"ca", next.current.cert.Subject.CommonName, "notAfter", next.current.cert.NotAfter, "trusted", len(next.trusted)}
	switch {
	case stored.current == nil:
		a.log.Info("created the CA", kv...)
	case !stored.current.cert.Equal(next.current.cert):
		a.log.Info("rotated the CA; the old one stays trusted until it expires", append(kv, "old", stored.current.cert.Subject.CommonName, "oldNotAfter", stored.current.cert.NotAfter)...)
	default:
		a.log.Info("dropped expired CAs or a retired signing key", kv...)
	}
}

// install makes set the one that GetCertificate and Bundle serve, and
// issues a serving certificate if the one in use is due or has a different
// signer.
func (a *Authority) install(set caSet) error {
	now := a.opts.Now()
	bundle := encodeCerts(set.trusted)
	signer := a.rot.signer(set, now)
	old := a.served.Load()
	var cert *tls.Certificate
	if old != nil && old.signer.Equal(signer.cert) && now.Before(fractionOf(old.cert.Leaf, a.opts.LeafRenewAt)) {
		cert = old.cert
	} else {
		var err error
		if cert, err = newLeaf(signer, a.leaf, now, a.opts.LeafLifetime); err != nil {
			return err
		}
		a.log.Info("issued the serving certificate", "ca", signer.cert.Subject.CommonName, "notAfter", cert.Leaf.NotAfter)
	}
	a.served.Store(&served{cert: cert, signer: signer.cert, signing: signer, bundle: bundle})
	if (old == nil || !bytes.Equal(old.bundle, bundle)) && a.opts.OnBundleChange != nil {
		a.opts.OnBundleChange(bytes.Clone(bundle))
	}
	return nil
}

// Start calls Ensure at once and then every CheckInterval, until ctx ends.
// It retries sooner after a failure. It is a manager.Runnable, so add it
// with mgr.Add. Failures are logged and retried rather than returned,
// because a transient API error must not stop the operator. ReadyCheck
// reports whether a certificate is being served.
func (a *Authority) Start(ctx context.Context) error {
	return keep.Run(ctx, a.opts.CheckInterval, nil, a.Ensure, a.log, "the CA and the serving certificate")
}

// NeedLeaderElection is false: every replica serves, so every replica
// needs its serving certificate.
func (a *Authority) NeedLeaderElection() bool { return false }

// GetCertificate returns the current serving certificate, for
// tls.Config.GetCertificate. A running server thus uses a renewed
// certificate from its next handshake on.
func (a *Authority) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s := a.served.Load()
	if s == nil {
		return nil, ErrNotReady
	}
	return s.cert, nil
}

// TLSConfig returns a server tls.Config that serves the current
// certificate. It requires TLS 1.3, since every client of it is the mesh's
// own code or a current Kubernetes API server.
func (a *Authority) TLSConfig() *tls.Config {
	return &tls.Config{GetCertificate: a.GetCertificate, MinVersion: tls.VersionTLS13}
}

// Bundle returns the PEM of every CA that is trusted now, newest first. It
// is nil until the first Ensure has succeeded. Replicas that read the same
// Secret return the same bytes.
func (a *Authority) Bundle() []byte {
	s := a.served.Load()
	if s == nil {
		return nil
	}
	return bytes.Clone(s.bundle)
}

// ReadyCheck is a healthz.Checker. It fails until a serving certificate
// exists.
func (a *Authority) ReadyCheck(*http.Request) error {
	if a.served.Load() == nil {
		return ErrNotReady
	}
	return nil
}

// newTLSSecret is a new Secret of the operator's certificates (a CA's, the
// brokers' routes'), labelled as the operator's.
func newTLSSecret(key types.NamespacedName, data map[string][]byte) corev1.Secret {
	return corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: key.Namespace,
			Name:      key.Name,
			Labels:    map[string]string{"app.kubernetes.io/managed-by": FieldManager},
		},
		Type: corev1.SecretTypeTLS,
		Data: data,
	}
}
