//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

// Bounds of the Subscription story.
const (
	configReachesSidecar = 30 * time.Second
	subscriptionReady    = 60 * time.Second
	// subscriberPause is the subscriber's pause: the step resumes it long
	// before, but one that fails midway leaves it reading again.
	subscriberPause = time.Minute
	// messagesWait bounds the wait for the paused subscriber's messages
	// to wait in its sidecar.
	messagesWait = 20 * time.Second
	// minWaiting is how many of the publisher's messages wait in the
	// sidecar when the Subscription is deleted, at least: half a second of
	// them (the filler's may wait there too).
	minWaiting = PublisherRate / 2
	// backlogDelivered bounds the wait for what waited to reach the
	// subscriber once it reads again.
	backlogDelivered = 30 * time.Second
	// metricInFlight is the sidecar's gauge of messages being written to
	// the application (sidecar/metrics.go).
	metricInFlight = "weighstation_sidecar_in_flight_messages"
)

// deliverySemantics is what README.md's "Delivery semantics" says of
// messages that wait when the Subscription covering their SUB is
// deleted, printed beside what the run counted, which the step checks
// against it.
const deliverySemantics = `README.md, Delivery semantics: "A configuration change never closes a SUB: the SUB and its ` +
	`queue stay, under the most specific Subscription that still covers its pattern or, when none does, the sidecar's ` +
	`defaults (1,000 messages, 8 MiB, DropNewest, essential; label subscription=""). The messages waiting in its queue ` +
	`stay there and are delivered; the change itself drops none [...]. The new limits apply to what arrives next [...], ` +
	`counted as overflow under the new label."`

// stepSubscriptionDelete deletes the subscriber's (essential)
// Subscription while messages wait for it in its sidecar, and checks what
// becomes of them against README's delivery semantics: the subscriber is
// paused (POST /pause, with filler that fills the sockets between it and
// its sidecar) until its sidecar's pending gauge shows the publisher's
// messages waiting; the Subscription is deleted, and the sidecar must
// count the SUB under its defaults ("") with the waiting messages moved
// there; then the subscriber reads again. Every message that waited at
// the delete must reach it, what it lost must equal what the sidecar
// counted dropped (only overflow, under the defaults' smaller limits, is
// possible here), and the sidecar's counts must balance over the two
// labels. Then the Subscription is applied again and the stream must flow
// under it. What is lost from the pause to then is inside the step's
// fault window.
func stepSubscriptionDelete(s *stepRun) {
	ctx, cfg := s.ctx, s.cfg
	ns := cfg.AppNamespace
	s.suspects = []string{PodSubscriber}
	subPod, err := s.c.pod(ctx, ns, PodSubscriber)
	if err != nil {
		s.fatalf("%v", err)
	}
	before := s.subscriberNow(ctx)
	beforeRead := time.Now()
	m0, err := s.c.metrics(ctx, subPod, SidecarMetricsPort)
	if err != nil {
		s.fatalf("%v", err)
	}
	gapBefore := time.Since(beforeRead)

	// The subscriber stops reading; what it does not read waits in its
	// sidecar once its filler fills the sockets.
	resumed := false
	defer func() { // should the step end before it resumes it
		if !resumed {
			if _, err := s.resumeStreamSubscriber(ctx, subPod); err != nil {
				say("  (resuming the subscriber: %v)", err)
			}
		}
	}()
	tp := time.Now()
	paused, err := s.pauseStreamSubscriber(ctx, subPod, subscriberPause)
	if err != nil {
		s.fatalf("%v", err)
	}
	s.note("the subscriber paused for %s at most, after %d filler message(s) (%d bytes, %s#%d-%d) to fill the sockets from its sidecar",
		subscriberPause, paused.FillLast-paused.FillFirst+1, paused.FilledBytes, paused.FillPublisher, paused.FillFirst, paused.FillLast)
	want := float64(paused.FilledMessages) + minWaiting // the filler that waits counts too
	waitedAt, err := Poll(ctx, fmt.Sprintf("at least %g message(s) waiting in the subscriber's sidecar", want), messagesWait, fastPoll, func(ctx context.Context) (bool, string) {
		m, err := s.c.metrics(ctx, subPod, SidecarMetricsPort)
		if err != nil {
			return false, err.Error()
		}
		n, _ := m.Sum(MetricPending, map[string]string{"subscription": SubscriptionStream})
		return n >= want, fmt.Sprintf("%s{subscription=%q} %g", MetricPending, SubscriptionStream, n)
	})
	if err != nil {
		s.fatalf("the paused subscriber's messages do not wait in its sidecar: %v", err)
	}
	s.measure(fmt.Sprintf("subscriber paused → %g message(s) waiting in its sidecar", want), waitedAt.Sub(tp), 0)

	// What the subscriber had read, and what was published: everything in
	// between waits (in the sidecar or, the filler, in the sockets).
	held := s.subscriberNow(ctx)
	pub, err := s.c.probeStats(ctx, ns, PodPublisher)
	if err != nil {
		s.fatalf("%v", err)
	}
	mDel, err := s.c.metrics(ctx, subPod, SidecarMetricsPort)
	if err != nil {
		s.fatalf("%v", err)
	}
	waiting, _ := mDel.Sum(MetricPending, map[string]string{"subscription": SubscriptionStream})
	readUpTo, publishedUpTo := held.Subscriber.Publishers[PodPublisher].Highest, uint64(pub.Publisher.Published)

	t0 := time.Now()
	say("$ kubectl delete subscription %s -n %s", SubscriptionStream, ns)
	if err := s.c.dyn.Resource(subscriptionsGVR).Namespace(ns).Delete(ctx, SubscriptionStream, metav1.DeleteOptions{}); err != nil {
		s.fatalf("deleting Subscription %s: %v", SubscriptionStream, err)
	}
	s.note("%g message(s) waited in the subscriber's sidecar for %s at the delete (%s); the subscriber had read %s up to #%d, which had published up to #%d",
		waiting, SubscriptionStream, MetricPending, PodPublisher, readUpTo, publishedUpTo)
	// The sidecar applied the change when its SUB counts under the
	// default policy ("") instead: it is rebound, not closed.
	unbound, err := s.waitArrivedUnder(ctx, subPod, "", mDel, t0)
	if err != nil {
		s.errorf("README says a SUB whose Subscription is deleted stays, under the sidecar's defaults: %v", err)
	} else {
		s.measure("Subscription delete → the sidecar applied it", unbound.Sub(t0), 0)
	}
	mMoved, err := s.c.metrics(ctx, subPod, SidecarMetricsPort)
	if err != nil {
		s.fatalf("%v", err)
	}
	movedOld, _ := mMoved.Sum(MetricPending, map[string]string{"subscription": SubscriptionStream})
	movedNew, _ := mMoved.Sum(MetricPending, map[string]string{"subscription": ""})
	s.note("once the sidecar applied the delete, %g message(s) waited under the defaults (subscription=\"\") and %g under %s", movedNew, movedOld, SubscriptionStream)
	if movedOld != 0 || movedNew == 0 {
		s.errorf("README says the waiting messages stay in the SUB's queue, shown under the new label: %g wait under %s, %g under \"\"", movedOld, SubscriptionStream, movedNew)
	}

	tr := time.Now()
	st, err := s.resumeStreamSubscriber(ctx, subPod)
	if err != nil {
		s.fatalf("%v", err)
	}
	resumed = true
	s.note("the subscriber reads again after a pause of %s", st.Last(time.Now()).Round(time.Millisecond))
	fill := paused.FillPublisher
	delivered, err := Poll(ctx, fmt.Sprintf("the subscriber reading past %s#%d and %s#%d", PodPublisher, publishedUpTo, fill, paused.FillLast), backlogDelivered, fastPoll, func(ctx context.Context) (bool, string) {
		st, err := s.c.probeStats(ctx, ns, PodSubscriber)
		if err != nil {
			return false, err.Error()
		}
		p, f := st.Subscriber.Publishers[PodPublisher], st.Subscriber.Publishers[fill]
		return p.Highest >= publishedUpTo, fmt.Sprintf("%s#%d, %s#%d (%s)", PodPublisher, p.Highest, fill, f.Highest, probeLine(st))
	})
	if err != nil {
		s.errorf("what waited did not reach the subscriber: %v", err)
	} else {
		s.measure("subscriber resumed → it read what waited", delivered.Sub(tr), 0)
	}
	during := s.subscriberNow(ctx)

	policy, err := s.m.Policy()
	if err != nil {
		s.fatalf("%v", err)
	}
	m1, err := s.c.metrics(ctx, subPod, SidecarMetricsPort)
	if err != nil {
		s.fatalf("%v", err)
	}
	t1 := time.Now()
	if err := s.c.apply(ctx, "the Subscriptions again", policy); err != nil {
		s.fatalf("%v", err)
	}
	s.waitSubscriptionReady(ctx, SubscriptionStream)
	rebound, err := s.waitArrivedUnder(ctx, subPod, SubscriptionStream, m1, t1)
	if err != nil {
		s.errorf("%v", err)
	} else {
		s.measure("Subscription applied again → the sidecar applied it", rebound.Sub(t1), 0)
	}
	window := s.addWindow("subscriber paused, subscription "+SubscriptionStream+" deleted and applied again", tp, time.Now().Add(lossWindowMargin))
	s.checkStillFlowing(ctx, during)
	s.checkNoLossSince(ctx, tp)

	// What the probes counted against what the sidecar counted, and
	// against README. The sidecar first: a drop before its scrape is
	// seen by the subscriber (a gap, at the next message) before its read.
	afterRead := time.Now()
	m2, err := s.c.metrics(ctx, subPod, SidecarMetricsPort)
	if err != nil {
		s.fatalf("%v", err)
	}
	after := s.subscriberNow(ctx)
	gapAfter := time.Since(afterRead)
	s.compareDeleteCounts(before, after, paused, m0, m2, readUpTo, publishedUpTo, window, gapBefore+gapAfter)
	s.note("%s", deliverySemantics)
}

// compareDeleteCounts checks what the subscriber counted from before to
// after against its sidecar's counters from m0 to m2 and against README:
// none of what waited at the delete (its publisher's messages after
// readUpTo up to publishedUpTo, and the pause's filler) lost; lost ==
// dropped, and dropped only as overflow; the sidecar's counts balanced
// over its labels; delivered == received, but for the messages in the
// sockets or in flight while the two were read (skew apart).
func (s *stepRun) compareDeleteCounts(before, after probestats.Stats, paused probestats.PauseStats, m0, m2 Samples, readUpTo, publishedUpTo uint64, window probestats.Window, skew time.Duration) {
	b, a := before.Subscriber, after.Subscriber
	fill := paused.FillPublisher
	filled := int64(paused.FillLast - paused.FillFirst + 1)
	fillReceived := a.Publishers[fill].Received - b.Publishers[fill].Received
	fillMissing := filled - fillReceived // gaps, and any at the filler's end, which no later filler reveals
	waitedLost := a.LostIn(PodPublisher, readUpTo+1, publishedUpTo) + max(fillMissing, 0)
	// Every publisher's gaps, the filler's counted by what did not arrive.
	lost := a.Lost - b.Lost - (a.Publishers[fill].Lost - b.Publishers[fill].Lost) + max(fillMissing, 0)

	delta := func(name string) float64 {
		x, _ := m2.Sum(name, nil)
		y, _ := m0.Sum(name, nil)
		return x - y
	}
	dropped := delta(MetricDropped)
	droppedBy := map[string]float64{}
	for reason, n := range m2.ByLabel(MetricDropped, "reason") {
		droppedBy[reason] = n - m0.ByLabel(MetricDropped, "reason")[reason]
	}
	arrived, deliveredCount := delta(MetricArrived), delta(MetricDelivered)
	held := delta(MetricPending) + delta(metricInFlight)
	received := float64(a.Received - b.Received)
	s.note("from before the pause to after the Subscription was back: the subscriber received %d (%d of them filler) and lost %d (%d detected in the window); its sidecar counted %g arrived, %g delivered, %g dropped (%s), waiting or in flight %+g",
		a.Received-b.Received, fillReceived, lost, a.LostBetween(window.Start, window.End), arrived, deliveredCount, dropped, dropDelta(m0, m2), held)

	if waitedLost != 0 {
		s.errorf("README says the messages waiting at the delete are delivered, but %d of them were lost (%s#%d-%d: %d; filler %s#%d-%d: %d not received)",
			waitedLost, PodPublisher, readUpTo+1, publishedUpTo, a.LostIn(PodPublisher, readUpTo+1, publishedUpTo), fill, paused.FillFirst, paused.FillLast, max(fillMissing, 0))
	}
	if float64(lost) != dropped {
		s.errorf("the subscriber lost %d message(s), its sidecar counted %g dropped (%s): every loss must be a counted drop", lost, dropped, dropDelta(m0, m2))
	}
	for reason, n := range droppedBy {
		if n > 0 && reason != "overflow" {
			s.errorf("%g message(s) dropped for reason %s: README says a delete drops nothing, and the new limits only overflow", n, reason)
		}
	}
	if arrived != deliveredCount+dropped+held {
		s.errorf("the sidecar's counts do not balance over its labels: %g arrived, %g delivered + %g dropped + %+g waiting or in flight", arrived, deliveredCount, dropped, held)
	}
	// The difference is what the sidecar delivered but the subscriber had
	// not read yet at one read and not at the other: the sockets' content
	// at each (little, as it keeps up) and what came between the scrape and
	// the probe's report.
	if bound := PublisherRate*skew.Seconds() + minWaiting; math.Abs(deliveredCount-received) > bound {
		s.errorf("the sidecar delivered %g message(s), the subscriber received %g: more apart than the %.0f the reads' %s skew explains", deliveredCount, received, bound, skew.Round(time.Millisecond))
	}
}

// pauseStreamSubscriber pauses the subscriber probe for d at most, filling the
// sockets from its sidecar (POST /pause?for=D&fill=auto).
func (s *stepRun) pauseStreamSubscriber(ctx context.Context, p *corev1.Pod, d time.Duration) (probestats.PauseStats, error) {
	say("$ curl -X POST 'http://%s:%d/pause?for=%s&fill=auto'  # the subscriber stops reading", PodSubscriber, ProbeStatsPort, d)
	st, err := s.c.probeControl(ctx, p, "/pause", url.Values{"for": {d.String()}, "fill": {"auto"}})
	if err != nil {
		return st, err
	}
	if !st.Paused || st.FilledMessages == 0 || st.FillLast < st.FillFirst {
		return st, fmt.Errorf("the subscriber's pause: %+v, want paused with filler", st)
	}
	return st, nil
}

// resumeStreamSubscriber ends the subscriber's pause (POST /resume).
func (s *stepRun) resumeStreamSubscriber(ctx context.Context, p *corev1.Pod) (probestats.PauseStats, error) {
	say("$ curl -X POST http://%s:%d/resume", PodSubscriber, ProbeStatsPort)
	st, err := s.c.probeControl(ctx, p, "/resume", nil)
	if err == nil && st.Paused {
		err = fmt.Errorf("the subscriber is still paused: %+v", st)
	}
	return st, err
}

// probeControl POSTs a probe's control (test/e2e/probe/pause.go) and
// reads the pause state it answers: at the pod's IP, or through the
// apiserver's pod proxy, as podGet reads.
func (c *cluster) probeControl(ctx context.Context, p *corev1.Pod, path string, query url.Values) (probestats.PauseStats, error) {
	var st probestats.PauseStats
	ctx, cancel := context.WithTimeout(ctx, podHTTPTimeout)
	defer cancel()
	var b []byte
	var err error
	if c.direct {
		b, err = c.directPost(ctx, p, ProbeStatsPort, path, query)
	} else {
		req := c.kube.CoreV1().RESTClient().Post().Namespace(p.Namespace).Resource("pods").
			Name(fmt.Sprintf("%s:%d", p.Name, ProbeStatsPort)).SubResource("proxy").Suffix(path)
		for k, vs := range query {
			for _, v := range vs {
				req = req.Param(k, v)
			}
		}
		if b, err = req.DoRaw(ctx); err != nil {
			err = fmt.Errorf("POST %s:%d%s of pod %s/%s through the apiserver: %w: %s", p.Name, ProbeStatsPort, path, p.Namespace, p.Name, err, b)
		}
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("POST %s of pod %s/%s: %w: %.200q", path, p.Namespace, p.Name, err, b)
	}
	return st, nil
}

func (c *cluster) directPost(ctx context.Context, p *corev1.Pod, port int, path string, query url.Values) ([]byte, error) {
	if p.Status.PodIP == "" {
		return nil, fmt.Errorf("pod %s/%s has no IP yet", p.Namespace, p.Name)
	}
	u := fmt.Sprintf("http://%s%s?%s", netJoin(p.Status.PodIP, port), path, query.Encode())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s (pod %s/%s): %w", u, p.Namespace, p.Name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("POST %s: %s: %.200s", u, resp.Status, b)
	}
	return b, nil
}

// waitArrivedUnder waits until the sidecar counts arrivals for the
// subscriber's SUB under the Subscription policy name ("" is the
// default): the configuration reached it.
func (s *stepRun) waitArrivedUnder(ctx context.Context, p *corev1.Pod, policy string, base Samples, since time.Time) (time.Time, error) {
	match := map[string]string{"subscription": policy}
	was, _ := base.Sum(MetricArrived, match)
	return Poll(ctx, fmt.Sprintf("the subscriber's sidecar counting arrivals under %q", policy), configReachesSidecar, fastPoll, func(ctx context.Context) (bool, string) {
		m, err := s.c.metrics(ctx, p, SidecarMetricsPort)
		if err != nil {
			return false, err.Error()
		}
		now, _ := m.Sum(MetricArrived, match)
		return now > was, fmt.Sprintf("%s{subscription=%q} %g (was %g)", MetricArrived, policy, now, was)
	})
}

func (s *stepRun) waitSubscriptionReady(ctx context.Context, name string) {
	_, err := Poll(ctx, "Subscription "+name+" Ready", subscriptionReady, apiPoll, func(ctx context.Context) (bool, string) {
		u, err := s.c.dyn.Resource(subscriptionsGVR).Namespace(s.cfg.AppNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		var sub v1alpha1.Subscription
		if err := fromUnstructured(u, &sub); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(sub.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil {
			return false, "no Ready condition"
		}
		return c.Status == metav1.ConditionTrue && c.ObservedGeneration == sub.Generation, fmt.Sprintf("Ready %s: %s", c.Status, c.Message)
	})
	if err != nil {
		s.errorf("%v", err)
	}
}

// dropDelta lists weighstation_sidecar_dropped_total's growth by
// subscription and reason between two scrapes.
func dropDelta(before, after Samples) string {
	key := func(x Sample) string { return x.Labels["subscription"] + "/" + x.Labels["reason"] }
	was := map[string]float64{}
	for _, x := range before {
		if x.Name == MetricDropped {
			was[key(x)] += x.Value
		}
	}
	var out []string
	for _, x := range after {
		if x.Name == MetricDropped && x.Value > was[key(x)] {
			out = append(out, fmt.Sprintf("%s %g", key(x), x.Value-was[key(x)]))
		}
	}
	if len(out) == 0 {
		return "nothing"
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
