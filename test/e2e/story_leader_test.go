//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

// Targets and bounds of the operator's failovers.
const (
	// gracefulFailoverTarget: from deleting the leader to a change reaching
	// the sidecars through the standby.
	gracefulFailoverTarget = 15 * time.Second
	// sigkillMargin is added to the lease duration: a killed leader's Lease
	// must expire before the standby may lead.
	sigkillMargin      = 5 * time.Second
	failoverSlack      = 30 * time.Second // past the target, to measure a miss
	podGone            = 90 * time.Second
	operatorRecovers   = 2 * time.Minute
	killCommandLimit   = 30 * time.Second
	containerRestarted = 90 * time.Second
)

// stepLeaderDelete deletes the leading operator pod gracefully (it gives
// its Lease up), engages the responder's kill switch once that pod is
// gone, and measures from the delete until the sidecars apply it (the
// requester fails fast): ≤ 15 s. The label moves to the standby, and the
// data plane, which needs no operator, loses nothing.
func stepLeaderDelete(s *stepRun) {
	ctx, cfg := s.ctx, s.cfg
	old, err := s.c.leadership(ctx)
	if err != nil || old.Pod() == "" {
		s.fatalf("no single leader to delete: %v (%v)", old, err)
	}
	leader := old.Pod()
	s.suspects = []string{PodRequester, PodResponder}
	before := s.subscriberNow(ctx)
	p, err := s.c.pod(ctx, cfg.ReleaseNamespace, leader)
	if err != nil {
		s.fatalf("%v", err)
	}
	newLeader := s.watchLeaderChange(ctx, leader, "")
	t0 := time.Now()
	if err := s.c.deletePod(ctx, cfg.ReleaseNamespace, leader); err != nil {
		s.fatalf("%v", err)
	}
	// Until it is gone the old leader may still push the change itself:
	// patching after that measures the standby.
	gone, err := s.c.waitPodGone(ctx, cfg.ReleaseNamespace, leader, p.UID, podGone)
	if err != nil {
		s.fatalf("%v", err)
	}
	s.note("the old leader %s was gone %s after the delete", leader, gone.Sub(t0).Round(time.Millisecond))
	s.failoverChange(ctx, t0, "leader delete → change seen by the sidecars", gracefulFailoverTarget, "e2e: graceful failover")
	if ch := <-newLeader; ch.err != nil {
		s.errorf("%v", ch.err)
	} else {
		s.measure("leader delete → new leader labelled", ch.at.Sub(t0), 0)
		s.note("%s leads now", ch.pod)
	}
	s.afterOperatorFault(ctx, before, t0)
}

// stepLeaderSigkill kills the leading operator's container with SIGKILL
// on its node (E2E_KILL_CONTAINER_CMD): it cannot give its Lease up, so
// the standby waits for the Lease to expire. Target: a change reaches the
// sidecars within the lease duration plus 5 s.
func stepLeaderSigkill(s *stepRun) {
	ctx, cfg := s.ctx, s.cfg
	if cfg.KillContainerCmd == "" {
		s.skipf("E2E_KILL_CONTAINER_CMD is empty: no way to SIGKILL a container on this cluster's nodes (kubectl exec cannot: the image is distroless)")
	}
	old, err := s.c.leadership(ctx)
	if err != nil || old.Pod() == "" {
		s.fatalf("no single leader to kill: %v (%v)", old, err)
	}
	leader := old.Pod()
	s.suspects = []string{PodRequester, PodResponder}
	p, err := s.c.pod(ctx, cfg.ReleaseNamespace, leader)
	if err != nil {
		s.fatalf("%v", err)
	}
	var containerID string
	var restarts int32
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == OperatorContainer {
			containerID, restarts = ContainerID(cs.ContainerID), cs.RestartCount
		}
	}
	if containerID == "" {
		s.fatalf("pod %s has no running %s container", leader, OperatorContainer)
	}
	line, err := KillCommand(cfg.KillContainerCmd, containerID)
	if err != nil {
		s.fatalf("%v", err)
	}
	before := s.subscriberNow(ctx)
	// The same pod may lead again once its container restarts, under a
	// new identity: wait for the Lease's holder to change.
	newLeader := s.watchLeaderChange(ctx, "", old.Holder)
	t0 := time.Now()
	if out, err := shell(ctx, killCommandLimit, line); err != nil {
		s.fatalf("killing the leader's container: %v\n%s", err, out)
	}
	target := s.leaseDuration + sigkillMargin
	s.failoverChange(ctx, t0, "leader SIGKILL → change seen by the sidecars", target, "e2e: failover after SIGKILL")
	if ch := <-newLeader; ch.err != nil {
		s.errorf("%v", ch.err)
	} else {
		s.measure("leader SIGKILL → new leader (Lease and label)", ch.at.Sub(t0), target)
		s.note("%s leads now (Lease %q)", ch.pod, ch.holder)
	}
	// The kill happened: the container restarted.
	if _, err := Poll(ctx, "the killed container restarted", containerRestarted, apiPoll, func(ctx context.Context) (bool, string) {
		p, err := s.c.pod(ctx, cfg.ReleaseNamespace, leader)
		if err != nil {
			return false, err.Error()
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == OperatorContainer {
				return cs.RestartCount > restarts, fmt.Sprintf("restarts %d", cs.RestartCount)
			}
		}
		return false, "no operator container"
	}); err != nil {
		s.errorf("%v", err)
	}
	s.afterOperatorFault(ctx, before, t0)
}

// failoverChange engages the responder's kill switch, measures from t0 to
// the requester's first fast failure, then releases it.
func (s *stepRun) failoverChange(ctx context.Context, t0 time.Time, name string, target time.Duration, reason string) {
	s.releaseKillSwitchAtEnd()
	patched := time.Now()
	if err := s.c.setKillSwitch(ctx, s.cfg.AppNamespace, SubscriptionRPC, true, reason); err != nil {
		s.fatalf("%v", err)
	}
	first := s.waitRequesterState(ctx, probestats.OutcomeFastFailure, patched, target+failoverSlack)
	s.measure(name, first.At().Sub(t0), target)
	s.note("from the PATCH: %s", first.At().Sub(patched).Round(time.Millisecond))
	released := time.Now()
	if err := s.c.setKillSwitch(ctx, s.cfg.AppNamespace, SubscriptionRPC, false, ""); err != nil {
		s.fatalf("%v", err)
	}
	answered := s.waitRequesterState(ctx, probestats.OutcomeOK, released, target+failoverSlack)
	s.measure("release → first answer", answered.At().Sub(released), 0)
}

// afterOperatorFault checks that the operator is whole again and that the
// stream flowed through the fault without loss.
func (s *stepRun) afterOperatorFault(ctx context.Context, before probestats.Stats, since time.Time) {
	if _, err := s.c.waitWorkloadsReady(ctx, s.cfg.ReleaseNamespace, operatorRecovers); err != nil {
		s.errorf("%v", err)
	}
	s.c.show(ctx, "get", "pods", "-n", s.cfg.ReleaseNamespace, "-l", componentSelector(ComponentOperator), "-L", LeaderLabel)
	s.checkStillFlowing(ctx, before)
	s.checkNoLossSince(ctx, since)
}

// leaderChange is the first leader seen after a fault.
type leaderChange struct {
	pod, holder string
	at          time.Time
	err         error
}

// watchLeaderChange polls, in the background, for a leader other than
// notPod (or under a Lease identity other than notHolder), and sends the
// first one seen.
func (s *stepRun) watchLeaderChange(ctx context.Context, notPod, notHolder string) <-chan leaderChange {
	out := make(chan leaderChange, 1)
	timeout := s.leaseDuration + sigkillMargin + failoverSlack + podGone
	go func() {
		pod, at, err := s.c.waitLeader(ctx, timeout, notPod, notHolder)
		ch := leaderChange{pod: pod, at: at, err: err}
		if err == nil {
			if lease, err := s.c.kube.CoordinationV1().Leases(s.cfg.ReleaseNamespace).Get(ctx, LeaseName, metav1.GetOptions{}); err == nil && lease.Spec.HolderIdentity != nil {
				ch.holder = *lease.Spec.HolderIdentity
			}
		}
		out <- ch
	}()
	return out
}
