//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Bounds of the revocation story.
const (
	revokeTargetReady = 3 * time.Minute
	// revocationWritten: the leader batches revocations over 200 ms, then
	// writes the account JWT into the trust ConfigMap and pushes it
	// (docs/operator.md, Broker credentials).
	revocationWritten = 60 * time.Second
	// revocationMargin: a revocation is dated a minute past the deletion
	// (RevocationMargin), so that a credential issued a moment after is
	// refused too.
	revocationMargin = time.Minute
)

// stepRevocation starts a pod whose sidecar connects to the broker with
// the credential the operator issued it, deletes the pod, and sees its
// key revoked: a new entry on the account JWT's revocation list in the
// ConfigMap weighstation-broker-trust (what every broker loads), dated
// about a minute past the deletion, and the leader's
// weighstation_operator_broker_credentials_revoked_total grown.
func stepRevocation(s *stepRun) {
	ctx, cfg := s.ctx, s.cfg
	manifest, err := s.m.Probe(RevokeTarget())
	if err != nil {
		s.fatalf("%v", err)
	}
	s.suspects = []string{PodRevokeTarget}
	if err := s.c.apply(ctx, "a pod to delete", manifest); err != nil {
		s.fatalf("%v", err)
	}
	if _, err := s.c.waitPodsReady(ctx, cfg.AppNamespace, []string{PodRevokeTarget}, revokeTargetReady); err != nil {
		s.fatalf("%v", err)
	}
	p, err := s.c.pod(ctx, cfg.AppNamespace, PodRevokeTarget)
	if err != nil {
		s.fatalf("%v", err)
	}
	// Its sidecar reached the broker: it holds an issued credential.
	if _, err := Poll(ctx, "the target's sidecar connected to the broker", revocationWritten, apiPoll, func(ctx context.Context) (bool, string) {
		m, err := s.c.metrics(ctx, p, SidecarMetricsPort)
		if err != nil {
			return false, err.Error()
		}
		v, _ := m.Sum(MetricBrokerConnected, nil)
		return v == 1, fmt.Sprintf("%s %g", MetricBrokerConnected, v)
	}); err != nil {
		s.fatalf("%v", err)
	}
	revoked0 := s.trustRevocations(ctx)
	count0, countErr := s.leaderRevokedCount(ctx)

	t0 := time.Now()
	if err := s.c.deletePod(ctx, cfg.AppNamespace, PodRevokeTarget); err != nil {
		s.fatalf("%v", err)
	}
	var fresh map[string]int64
	at, err := Poll(ctx, "a new revocation in ConfigMap "+TrustConfigMapName, revocationWritten, apiPoll, func(ctx context.Context) (bool, string) {
		cm, err := s.c.kube.CoreV1().ConfigMaps(cfg.ReleaseNamespace).Get(ctx, TrustConfigMapName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		now, err := Revocations(cm.Data)
		if err != nil {
			return false, err.Error()
		}
		fresh = NewRevocations(revoked0, now)
		return len(fresh) > 0, fmt.Sprintf("%d revocation(s), %d new", len(now), len(fresh))
	})
	if err != nil {
		s.fatalf("%v", err)
	}
	s.measure("pod delete → its key revoked in the trust ConfigMap", at.Sub(t0), 0)
	if len(fresh) != 1 {
		s.errorf("%d new revocations after deleting one pod: %v", len(fresh), fresh)
	}
	for key, unix := range fresh {
		dated := time.Unix(unix, 0).Sub(t0)
		s.note("revoked user key %s…, dated %s after the delete (the operator dates it %s past the deletion)", key[:min(len(key), 12)], dated.Round(time.Second), revocationMargin)
		if dated < 0 || dated > revocationMargin+revocationWritten {
			s.errorf("the revocation of %s is dated %s from the delete, want about %s after it", key, dated.Round(time.Second), revocationMargin)
		}
	}
	if countErr != nil {
		s.note("the leader's revocation counter was not read (%v): the ConfigMap alone shows the revocation", countErr)
		return
	}
	count1, err := s.leaderRevokedCount(ctx)
	if err != nil {
		s.errorf("reading the leader's metrics after the revocation: %v", err)
		return
	}
	if count1 <= count0 {
		s.errorf("%s did not grow (%g → %g)", MetricCredentialsRevoke, count0, count1)
	}
}

// trustRevocations reads the revocation list from the trust ConfigMap.
func (s *stepRun) trustRevocations(ctx context.Context) map[string]int64 {
	cm, err := s.c.kube.CoreV1().ConfigMaps(s.cfg.ReleaseNamespace).Get(ctx, TrustConfigMapName, metav1.GetOptions{})
	if err != nil {
		s.fatalf("reading ConfigMap %s: %v", TrustConfigMapName, err)
	}
	r, err := Revocations(cm.Data)
	if err != nil {
		s.fatalf("%v", err)
	}
	return r
}

// leaderRevokedCount reads the leader's revocation counter.
func (s *stepRun) leaderRevokedCount(ctx context.Context) (float64, error) {
	l, err := s.c.leadership(ctx)
	if err != nil {
		return 0, err
	}
	if l.Pod() == "" {
		return 0, fmt.Errorf("no single leader: %s", l)
	}
	p, err := s.c.pod(ctx, s.cfg.ReleaseNamespace, l.Pod())
	if err != nil {
		return 0, err
	}
	m, err := s.c.metrics(ctx, p, OperatorMetricsPort)
	if err != nil {
		return 0, err
	}
	v, _ := m.Sum(MetricCredentialsRevoke, nil)
	return v, nil
}
