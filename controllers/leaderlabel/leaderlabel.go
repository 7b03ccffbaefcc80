// Package leaderlabel marks the leading operator replica's Pod, so that the
// xDS Service selects it, and holds the RBAC of leader election.
package leaderlabel

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Label marks the operator Pod that is the leader; the xDS Service
// selects it, so sidecars reach the one replica that serves configuration.
const Label = "weighstation.io/xds-leader"

// +kubebuilder:rbac:groups="",namespace=weighstation-system,resources=pods,verbs=patch

// Labeler keeps Label on the operator's own Pod exactly while
// this replica leads. Labelled is added with leader election (it runs once
// elected); Unlabelled runs on every replica at start, so that a restarted
// former leader stops attracting sidecars. A replica that loses the lease
// exits (controller-runtime's behaviour), so there is no demotion path.
//
// A leader that stops (SIGTERM: its pod deleted, a rolling update) takes
// its label off before it exits: Unlabelled does so as soon as the manager
// stops, at the same time as the xDS server closes its streams, before the
// Lease is released. The xDS Service then stops selecting the stopping pod
// at once, instead of routing the sidecars' reconnections to it, serving
// and terminating, until its process is gone, and then, until the pod is
// deleted, to an IP where nothing answers (a dial that waits out its
// timeout).
type Labeler struct {
	Client client.Client
	Pod    types.NamespacedName
	Log    logr.Logger
	// StopTimeout bounds the removal of the label when the operator stops
	// (DefaultStopTimeout when zero), well inside the manager's
	// graceful shutdown (30 s) and the pod's terminationGracePeriodSeconds.
	StopTimeout time.Duration

	once    sync.Once
	cleared chan struct{} // closed once Unlabelled has run
	// stop ends when the operator stops: it cancels a PATCH of Labelled
	// still under way, which unlabelOnStop waits for.
	stop    context.Context
	stopNow context.CancelFunc

	mu sync.Mutex
	// labelled is set once Labelled has patched (or tried to) the label
	// on; stopping once the label is coming off for good, after which
	// Labelled puts nothing on.
	labelled, stopping bool
}

// DefaultStopTimeout bounds the removal of the leader label when the
// operator stops: one PATCH of the operator's own Pod.
const DefaultStopTimeout = 5 * time.Second

func (l *Labeler) init() {
	l.once.Do(func() {
		l.cleared = make(chan struct{})
		l.stop, l.stopNow = context.WithCancel(context.Background())
	})
}

func (l *Labeler) clearedCh() chan struct{} {
	l.init()
	return l.cleared
}

func (l *Labeler) patch(ctx context.Context, value *string) error {
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, Label))
	if value != nil {
		patch = []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, Label, *value))
	}
	pod := &corev1.Pod{}
	pod.Namespace, pod.Name = l.Pod.Namespace, l.Pod.Name
	if err := l.Client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("labelling the operator's pod %s: %w", l.Pod, err)
	}
	return nil
}

// Labelled is the leader's runnable.
func (l *Labeler) Labelled() *labelRunnable {
	return &labelRunnable{l: l, leader: true}
}

// Unlabelled is every replica's runnable: it clears the label at start,
// and takes it off again when the operator stops, if this replica put it
// on.
func (l *Labeler) Unlabelled() *labelRunnable {
	return &labelRunnable{l: l, leader: false}
}

type labelRunnable struct {
	l      *Labeler
	leader bool
}

func (r *labelRunnable) NeedLeaderElection() bool { return r.leader }

func (r *labelRunnable) Start(ctx context.Context) error {
	if r.leader {
		r.l.label(ctx)
		return nil
	}
	func() {
		defer close(r.l.clearedCh())
		if err := r.l.patch(ctx, nil); err != nil {
			r.l.Log.Error(err, "a restarted former leader may still attract sidecars")
			return
		}
		r.l.Log.Info("operator pod labelled", "leader", false)
	}()
	// Unlabelled runs without leader election, so it is stopped first,
	// with the xDS server, while the leader's runnables still run and the
	// Lease is still held.
	<-ctx.Done()
	r.l.unlabelOnStop()
	return nil
}

// label puts the label on, once every replica's removal at start has run,
// which would otherwise race with it on an immediately elected leader.
func (l *Labeler) label(ctx context.Context) {
	select {
	case <-l.clearedCh():
	case <-ctx.Done():
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopping {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(l.stop, cancel)()
	l.labelled = true // a failed PATCH may still have landed
	v := "true"
	if err := l.patch(ctx, &v); err != nil {
		if l.stop.Err() != nil {
			return // the operator stops, and unlabelOnStop takes over
		}
		// Sidecars still find the leader: other replicas refuse them and
		// they retry. Do not stop the operator for it.
		l.Log.Error(err, "the xDS Service may not select the leader")
		return
	}
	l.Log.Info("operator pod labelled", "leader", true)
}

// unlabelOnStop takes the label off a stopping leader's pod, within
// StopTimeout, and keeps Labelled from putting it on afterwards.
func (l *Labeler) unlabelOnStop() {
	l.init()
	l.stopNow() // a PATCH of Labelled under way gives up, and lets go of mu
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopping = true
	if !l.labelled {
		return
	}
	timeout := l.StopTimeout
	if timeout <= 0 {
		timeout = DefaultStopTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := l.patch(ctx, nil); err != nil {
		l.Log.Error(err, "the xDS Service may route sidecars to this stopping replica until its pod is gone", "timeout", timeout.String())
		return
	}
	l.labelled = false
	l.Log.Info("leader label removed: the xDS Service no longer selects this stopping replica")
}
