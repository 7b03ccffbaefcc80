// Package cabundle publishes the operator's CA bundle to the namespaces that
// run sidecars.
package cabundle

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/controllers/pki"
	"github.com/weighstation/weighstation/controllers/sidecarpods"
)

// Publisher keeps the operator's CA bundle in a ConfigMap of every
// namespace that has sidecar pods, which the sidecars mount and re-read, so
// that a CA rotation reaches running pods. It republishes when the bundle
// changes and every Interval (a namespace's first sidecar pod waits at most
// that long; its sidecar retries until the bundle is there).
type Publisher struct {
	Client   client.Client
	Bundle   func() []byte
	Changed  <-chan struct{}
	Interval time.Duration
	Log      logr.Logger
}

// NeedLeaderElection is true: one replica writes.
func (b *Publisher) NeedLeaderElection() bool { return true }

// Start publishes until ctx ends.
func (b *Publisher) Start(ctx context.Context) error {
	ticker := time.NewTicker(b.Interval)
	defer ticker.Stop()
	for {
		if err := b.publish(ctx); err != nil && ctx.Err() == nil {
			b.Log.Error(err, "publishing the CA bundle; retrying")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		case <-b.Changed:
		}
	}
}

func (b *Publisher) publish(ctx context.Context) error {
	bundle := b.Bundle()
	if bundle == nil {
		return nil // no CA yet; the change signal comes when there is
	}
	pods, err := sidecarpods.List(ctx, b.Client, "")
	if err != nil {
		return err
	}
	namespaces := map[string]bool{}
	for _, p := range pods {
		namespaces[p.Namespace] = true
	}
	for ns := range namespaces {
		if err := pki.PublishBundle(ctx, b.Client, ns, bundle); err != nil {
			return err
		}
	}
	return nil
}
