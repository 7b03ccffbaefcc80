//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Target and bounds of the broker story.
const (
	// reconnectTarget: from a broker pod's delete until every sidecar that
	// was connected to it is connected to a broker again.
	reconnectTarget = 2 * time.Second
	// reconnectObservation is how long the sidecars' metrics are watched
	// after the delete: who reconnects, and when. It is a measurement
	// window, not a wait for something to have happened: every sidecar
	// must be connected at its end, and the reconnections within it are
	// timed.
	reconnectObservation = 10 * time.Second
	metricsPoll          = 100 * time.Millisecond
	brokersRecover       = 3 * time.Minute
)

// sidecarState is one sidecar's broker connection, from its metrics.
type sidecarState struct {
	connected   bool
	reconnects  float64
	inDoubt     float64
	err         error
	reconnected time.Time // first seen reconnected after the delete
	disconnect  time.Time // first seen disconnected after the delete
}

// stepBrokerDelete deletes the broker pod that holds the most
// connections, and measures from the sidecars' metrics
// (weighstation_sidecar_broker_connected and _reconnects_total) how long
// each of its sidecars took to reconnect to another broker: ≤ 2 s. Losses
// the subscriber counts in the window (the delete, to the last
// reconnection plus 5 s) are reported beside the sidecars'
// weighstation_sidecar_broker_in_doubt_total; a loss outside it fails.
func stepBrokerDelete(s *stepRun) {
	ctx, cfg := s.ctx, s.cfg
	victim, connections := s.busiestBroker(ctx)
	sidecars := s.sidecarPods(ctx)
	base := s.scrapeSidecars(ctx, sidecars)
	for name, st := range base {
		if st.err != nil || !st.connected {
			s.fatalf("before the delete, sidecar of %s: connected %v (%v)", name, st.connected, st.err)
		}
	}
	pub0, err := s.c.probeStats(ctx, cfg.AppNamespace, PodPublisher)
	if err != nil {
		s.fatalf("%v", err)
	}
	before := s.subscriberNow(ctx)
	since := time.Now()

	t0 := time.Now()
	if err := s.c.deletePod(ctx, cfg.ReleaseNamespace, victim.Name); err != nil {
		s.fatalf("%v", err)
	}
	states := s.observeReconnections(ctx, sidecars, base, t0)

	var last time.Time
	var reconnected, notConnected []string
	for name, st := range states {
		switch {
		case st.err != nil || !st.connected:
			notConnected = append(notConnected, fmt.Sprintf("%s (%v)", name, st.err))
		case !st.reconnected.IsZero():
			reconnected = append(reconnected, fmt.Sprintf("%s in %s", name, st.reconnected.Sub(t0).Round(time.Millisecond)))
			if st.reconnected.After(last) {
				last = st.reconnected
			}
		}
	}
	sort.Strings(reconnected)
	s.note("broker %s held %g connection(s); sidecars reconnected: %s", victim.Name, connections, orNone(strings.Join(reconnected, ", ")))
	if len(notConnected) > 0 {
		sort.Strings(notConnected)
		s.errorf("%s after the delete, sidecars not connected to a broker: %s", reconnectObservation, strings.Join(notConnected, ", "))
	}
	end := t0.Add(reconnectObservation)
	if len(reconnected) == 0 {
		s.errorf("broker %s held %g connection(s), but no sidecar reconnected within %s", victim.Name, connections, reconnectObservation)
	} else {
		s.measure("broker delete → every sidecar reconnected", last.Sub(t0), reconnectTarget)
		end = last
	}
	window := s.addWindow("broker "+victim.Name+" deleted", t0, end.Add(lossWindowMargin))

	if _, err := s.c.waitWorkloadsReady(ctx, cfg.ReleaseNamespace, brokersRecover); err != nil {
		s.errorf("%v", err)
	}
	s.checkStillFlowing(ctx, before)
	s.checkNoLossSince(ctx, since)
	after := s.subscriberNow(ctx)
	pub1, err := s.c.probeStats(ctx, cfg.AppNamespace, PodPublisher)
	if err != nil {
		s.fatalf("%v", err)
	}
	var inDoubt float64
	for name, st := range s.scrapeSidecars(ctx, sidecars) {
		inDoubt += st.inDoubt - base[name].inDoubt
	}
	s.note("in the window (%s): the subscriber lost %d message(s); weighstation_sidecar_broker_in_doubt_total grew by %g; the publisher had %d publish error(s) and %d refusal(s)",
		window.End.Sub(window.Start).Round(time.Millisecond), after.Subscriber.LostBetween(window.Start, window.End), inDoubt,
		pub1.Publisher.PublishErrors-pub0.Publisher.PublishErrors, pub1.Publisher.Refusals-pub0.Publisher.Refusals)
}

// busiestBroker is the broker pod with the most connections
// (weighstation_broker_connections), so that the delete moves sidecars.
func (s *stepRun) busiestBroker(ctx context.Context) (corev1.Pod, float64) {
	brokers, err := s.c.kube.CoreV1().Pods(s.cfg.ReleaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: componentSelector(ComponentBroker)})
	if err != nil || len(brokers.Items) == 0 {
		s.fatalf("listing the brokers: %v (%d)", err, len(brokers.Items))
	}
	sort.Slice(brokers.Items, func(i, j int) bool { return brokers.Items[i].Name < brokers.Items[j].Name })
	best, most := brokers.Items[0], -1.0
	var seen []string
	for _, b := range brokers.Items {
		m, err := s.c.metrics(ctx, &b, BrokerMetricsPort)
		if err != nil {
			s.fatalf("%v", err)
		}
		n, _ := m.Sum(MetricBrokerConnections, nil)
		seen = append(seen, fmt.Sprintf("%s %g", b.Name, n))
		if n > most {
			best, most = b, n
		}
	}
	s.note("connections per broker: %s", strings.Join(seen, ", "))
	return best, most
}

// sidecarPods are the applications' pods that run the sidecar.
func (s *stepRun) sidecarPods(ctx context.Context) []corev1.Pod {
	pods, err := s.c.kube.CoreV1().Pods(s.cfg.AppNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		s.fatalf("listing the applications' pods: %v", err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if Injected(&p) && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		s.fatalf("no application pod runs the sidecar")
	}
	return out
}

// scrapeSidecars reads every sidecar's broker metrics at once.
func (s *stepRun) scrapeSidecars(ctx context.Context, pods []corev1.Pod) map[string]sidecarState {
	out := make(map[string]sidecarState, len(pods))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range pods {
		wg.Go(func() {
			st := sidecarState{}
			m, err := s.c.metrics(ctx, &pods[i], SidecarMetricsPort)
			if err == nil {
				connected, ok1 := m.Sum(MetricBrokerConnected, nil)
				st.reconnects, _ = m.Sum(MetricBrokerReconnects, nil)
				st.inDoubt, _ = m.Sum(MetricBrokerInDoubt, nil)
				st.connected = connected == 1
				if !ok1 {
					err = fmt.Errorf("no %s in its metrics", MetricBrokerConnected)
				}
			}
			st.err = err
			mu.Lock()
			out[pods[i].Name] = st
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// observeReconnections scrapes the sidecars every metricsPoll for
// reconnectObservation after t0, and records when each was first seen
// disconnected and reconnected (its reconnection count grown and
// connected again).
func (s *stepRun) observeReconnections(ctx context.Context, pods []corev1.Pod, base map[string]sidecarState, t0 time.Time) map[string]sidecarState {
	states := map[string]sidecarState{}
	tick := time.NewTicker(metricsPoll)
	defer tick.Stop()
	deadline := t0.Add(reconnectObservation)
	for {
		now := time.Now()
		for name, st := range s.scrapeSidecars(ctx, pods) {
			prev := states[name]
			st.disconnect, st.reconnected = prev.disconnect, prev.reconnected
			if st.err == nil && !st.connected && st.disconnect.IsZero() {
				st.disconnect = now
			}
			if st.err == nil && st.connected && st.reconnects > base[name].reconnects && st.reconnected.IsZero() {
				st.reconnected = now
			}
			states[name] = st
		}
		if now.After(deadline) {
			return states
		}
		select {
		case <-ctx.Done():
			return states
		case <-tick.C:
		}
	}
}
