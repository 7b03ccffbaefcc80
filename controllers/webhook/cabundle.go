package webhook

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/weighstation/weighstation/internal/keep"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The operator writes the CA bundle into its own webhook configuration,
// and no other: the rule is limited to the name the chart gives it
// (DefaultConfigurationName); a chart that changes the name must change
// this rule too.
//
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,resourceNames=weighstation-sidecar-injector,verbs=get;update;patch

// DefaultConfigurationName is the MutatingWebhookConfiguration's name (the
// operator's -webhook-configuration).
const DefaultConfigurationName = "weighstation-sidecar-injector"

// maxAttempts bounds Sync's read-modify-write loop against other writers
// (another replica, or helm upgrading the configuration).
const maxAttempts = 5

// CABundle keeps the caBundle of every webhook in the named
// MutatingWebhookConfiguration equal to the operator's CA bundle, so that
// the apiserver trusts the webhook's serving certificate, through CA
// rotations too. It is a manager.Runnable, on every replica (each serves
// the webhook, from the same CA): replicas write the same bytes, and an
// update conflict makes the loser read again.
type CABundle struct {
	// Reader reads the configuration straight from the apiserver (the
	// manager's APIReader): the RBAC rule, limited to one name, allows
	// get but no list or watch, so no cache can hold it.
	Reader client.Reader
	Writer client.Writer
	// Name is the MutatingWebhookConfiguration's.
	Name string
	// Bundle returns the CA bundle (the Authority's), nil until it has one.
	Bundle func() []byte
	// Changed is signalled when the bundle changes (the Authority's
	// OnBundleChange).
	Changed <-chan struct{}
	// Interval is how often the configuration is checked anyway: helm
	// upgrades rewrite it without a bundle.
	Interval time.Duration
	Log      logr.Logger
}

// Sync writes the bundle into every webhook of the configuration that
// lacks it. It returns whether it wrote.
func (c *CABundle) Sync(ctx context.Context) (bool, error) {
	bundle := c.Bundle()
	if len(bundle) == 0 {
		return false, fmt.Errorf("the operator's CA is not loaded yet")
	}
	var lastErr error
	for range maxAttempts {
		var cfg admissionregistrationv1.MutatingWebhookConfiguration
		if err := c.Reader.Get(ctx, types.NamespacedName{Name: c.Name}, &cfg); err != nil {
			return false, fmt.Errorf("reading the MutatingWebhookConfiguration %s (-webhook-configuration): %w", c.Name, err)
		}
		changed := false
		for i := range cfg.Webhooks {
			if !bytes.Equal(cfg.Webhooks[i].ClientConfig.CABundle, bundle) {
				cfg.Webhooks[i].ClientConfig.CABundle = bundle
				changed = true
			}
		}
		if !changed {
			return false, nil
		}
		// The resourceVersion read makes a concurrent write conflict.
		if err := c.Writer.Update(ctx, &cfg); err != nil {
			if apierrors.IsConflict(err) {
				lastErr = err
				continue
			}
			return false, fmt.Errorf("writing the CA bundle into the MutatingWebhookConfiguration %s: %w", c.Name, err)
		}
		c.Log.Info("wrote the CA bundle into the webhook configuration", "configuration", c.Name)
		return true, nil
	}
	return false, fmt.Errorf("the MutatingWebhookConfiguration %s changed under each of %d attempts: %w", c.Name, maxAttempts, lastErr)
}

// Start syncs at once, on every Changed, and every Interval, until ctx
// ends. Failures are logged and retried: the CA or the configuration may
// not exist yet.
func (c *CABundle) Start(ctx context.Context) error {
	sync := func(ctx context.Context) error { _, err := c.Sync(ctx); return err }
	return keep.Run(ctx, c.Interval, c.Changed, sync, c.Log, "the webhook's CA bundle")
}

// NeedLeaderElection is false: see CABundle.
func (c *CABundle) NeedLeaderElection() bool { return false }
