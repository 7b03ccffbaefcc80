package controllers

import (
	"context"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LeaderLabel marks the operator Pod that is the leader; the xDS Service
// selects it, so sidecars reach the one replica that serves configuration.
const LeaderLabel = "weighstation.io/xds-leader"

// +kubebuilder:rbac:groups="",namespace=weighstation-system,resources=pods,verbs=patch

// LeaderLabeler keeps LeaderLabel on the operator's own Pod exactly while
// this replica leads. Labelled is added with leader election (it runs once
// elected); Unlabelled runs on every replica at start, so that a restarted
// former leader stops attracting sidecars. A replica that loses the lease
// exits (controller-runtime's behaviour), so there is no demotion path.
type LeaderLabeler struct {
	Client client.Client
	Pod    types.NamespacedName
	Log    logr.Logger

	once    sync.Once
	cleared chan struct{} // closed once Unlabelled has run
}

func (l *LeaderLabeler) clearedCh() chan struct{} {
	l.once.Do(func() { l.cleared = make(chan struct{}) })
	return l.cleared
}

func (l *LeaderLabeler) patch(ctx context.Context, value *string) error {
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, LeaderLabel))
	if value != nil {
		patch = []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, LeaderLabel, *value))
	}
	pod := &corev1.Pod{}
	pod.Namespace, pod.Name = l.Pod.Namespace, l.Pod.Name
	if err := l.Client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("labelling the operator's pod %s: %w", l.Pod, err)
	}
	return nil
}

// Labelled is the leader's runnable.
func (l *LeaderLabeler) Labelled() *labelRunnable {
	return &labelRunnable{l: l, leader: true}
}

// Unlabelled is every replica's runnable.
func (l *LeaderLabeler) Unlabelled() *labelRunnable {
	return &labelRunnable{l: l, leader: false}
}

type labelRunnable struct {
	l      *LeaderLabeler
	leader bool
}

func (r *labelRunnable) NeedLeaderElection() bool { return r.leader }

func (r *labelRunnable) Start(ctx context.Context) error {
	var value *string
	if r.leader {
		// The label goes on after every replica's removal at start, which
		// would otherwise race with it on an immediately elected leader.
		select {
		case <-r.l.clearedCh():
		case <-ctx.Done():
			return nil
		}
		v := "true"
		value = &v
	} else {
		defer close(r.l.clearedCh())
	}
	if err := r.l.patch(ctx, value); err != nil {
		// Sidecars still find the leader: other replicas refuse them and
		// they retry. Do not stop the operator for it.
		r.l.Log.Error(err, "the xDS Service may not select the leader")
		return nil
	}
	r.l.Log.Info("operator pod labelled", "leader", r.leader)
	return nil
}
