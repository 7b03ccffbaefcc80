package podconfig

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/weighstation/weighstation/controllers/sidecarpods"
)

// syncedReader is a cache: a reader that tells when it has synced.
type syncedReader interface {
	client.Reader
	WaitForCacheSync(context.Context) bool
}

// InitialSync returns a manager runnable that computes every sidecar pod of
// cache once, then calls done: until then a sink that serves sidecars must
// not answer them (it would answer with removals).
func (r *Reconciler) InitialSync(cache syncedReader, done func(), log logr.Logger) manager.Runnable {
	return &initialSync{reader: cache, reconciler: r, done: done, log: log}
}

// initialSync computes every sidecar pod once, in this process, before the
// configuration is served. It runs when this replica becomes the leader
// (a manager Runnable needs leader election unless it says otherwise).
type initialSync struct {
	reader     syncedReader
	reconciler *Reconciler
	done       func()
	log        logr.Logger
}

var _ manager.LeaderElectionRunnable = (*initialSync)(nil)

func (s *initialSync) NeedLeaderElection() bool { return true }

func (s *initialSync) Start(ctx context.Context) error {
	if !s.reader.WaitForCacheSync(ctx) {
		return fmt.Errorf("initial pod sync: the cache did not sync: %w", ctx.Err())
	}
	pods, err := sidecarpods.List(ctx, s.reader, "")
	if err != nil {
		return fmt.Errorf("initial pod sync: %w", err)
	}
	for _, pod := range pods {
		req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}}
		if _, err := s.reconciler.Reconcile(ctx, req); err != nil {
			return fmt.Errorf("initial pod sync: %s: %w", req.NamespacedName, err)
		}
	}
	s.log.Info("every sidecar pod computed; serving configuration", "pods", len(pods))
	s.done()
	return nil
}
