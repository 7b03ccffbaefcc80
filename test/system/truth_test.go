package system_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nats-io/nats.go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/reports"
	"github.com/weighstation/weighstation/internal/envtestsuite"
	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/loadgen"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar"
	"github.com/weighstation/weighstation/sidecar/breaker"
)

// The load of TestStatusTellsTheTruth. The slow consumers work 5 ms on each
// message (a sleep, which takes 5.5 ms or more), so each keeps up with
// about 180 messages a second; the bench sends 300 a second for 2 s, so
// that a queue of some 250 messages forms in each consuming sidecar and
// drains after the burst, well under the Subscription's queue limit
// (1,000 messages).
const (
	truthWork       = 5 * time.Millisecond
	truthRate       = 300 // messages a second
	truthBurst      = 2 * time.Second
	truthSize       = 1024 // bytes of payload, the bench's default
	truthSendBuffer = 8 << 10
	truthRecvBuffer = 4 << 10
	// truthWindow is the operator's report window: longer than the whole
	// test, so that status covers everything the consumers measured.
	truthWindow = 5 * time.Minute
)

// TestStatusTellsTheTruth is issue 12's "truth": real sidecars, broker and
// applications under open-loop load from `weighstation bench` (package
// loadgen, in this process), consumers made slow so that queueing in the
// sidecar dominates.
//
//  1. The aggregate in status equals the sidecars' merged distributions
//     (what /debug/latency serves) within one histogram bucket, and its
//     count equals the stamped messages delivered.
//  2. Against an outside measurement: the slow consumers are raw sockets
//     with a small receive buffer, behind sidecars that bound their send
//     buffer (-app-send-buffer), and time each message from the send time
//     the bench wrote into its payload. Over the same window, the status
//     p99 agrees with theirs within 5%, or 1 ms plus the time the kernel
//     buffers can hold, whichever is larger (the aggregate against both
//     consumers, each pod's line against its own).
//  3. A breaker trip shows in KILLED, in pods[] and in Degraded, and its
//     release clears it.
func TestStatusTellsTheTruth(t *testing.T) {
	ctx := background()
	ns := newNamespace(t)
	broker := natstest.StartBroker(t, nil)
	xdsAddr := natstest.FreeAddr(t)
	objects := []clientObject{
		&v1alpha1.Topic{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"},
			Spec:       v1alpha1.TopicSpec{Subject: "orders.>", Limits: v1alpha1.TopicLimits{MaxMessageBytes: 64 << 10}},
		},
		&v1alpha1.Topic{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "audits"},
			Spec:       v1alpha1.TopicSpec{Subject: "audit.>", Limits: v1alpha1.TopicLimits{MaxMessageBytes: 64 << 10}},
		},
		&v1alpha1.Subscription{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "billing"},
			Spec:       v1alpha1.SubscriptionSpec{Subject: "orders.*", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "billing"}}},
		},
		// Non-essential, with a breaker that trips at 20 waiting messages
		// and tries again after 3 s (window and cooldown are at least 1 s).
		&v1alpha1.Subscription{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "audit"},
			Spec: v1alpha1.SubscriptionSpec{
				Subject: "audit.*", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "audit"}},
				Essential: ptr.To(false),
				KillSwitch: &v1alpha1.KillSwitch{Auto: &v1alpha1.AutoKillSwitch{
					MaxPendingMessages: ptr.To[int32](20),
					Window:             &metav1.Duration{Duration: time.Second},
					Cooldown:           &metav1.Duration{Duration: 3 * time.Second},
				}},
			},
		},
	}
	for _, obj := range objects {
		if err := k8sClient.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s: %v", obj.GetName(), err)
		}
	}
	op := startOperator(t, xdsAddr, withReportWindow(truthWindow))
	bounded := func(o *sidecar.Options) { o.AppSendBuffer = truthSendBuffer }
	checkout := startPod(t, ns, "checkout-0", map[string]string{"app": "checkout"}, broker.ClientURL(), xdsAddr)
	billing := []*pod{
		startPod(t, ns, "billing-0", map[string]string{"app": "billing"}, broker.ClientURL(), xdsAddr, bounded),
		startPod(t, ns, "billing-1", map[string]string{"app": "billing"}, broker.ClientURL(), xdsAddr, bounded),
	}
	audit := []*pod{
		startPod(t, ns, "audit-0", map[string]string{"app": "audit"}, broker.ClientURL(), xdsAddr, bounded),
		startPod(t, ns, "audit-1", map[string]string{"app": "audit"}, broker.ClientURL(), xdsAddr),
	}
	for _, p := range append([]*pod{checkout}, append(billing, audit...)...) {
		waitConfigured(t, op, ns, p, "configured", func(meshconfig.PodConfig) error { return nil })
	}
	pub := checkout.app(t)
	benchConfig := func(subject string, rate float64, d time.Duration) loadgen.Config {
		cfg := loadgen.DefaultConfig
		// The bench publishes through checkout's sidecar; its own
		// subscriber listens at the broker, beside the mesh.
		cfg.URL, cfg.SubURL = "nats://"+checkout.side.Addr().String(), broker.ClientURL()
		cfg.Mode, cfg.Subject, cfg.Rate, cfg.Duration, cfg.Size, cfg.Timeout = loadgen.PubSub, subject, rate, d, truthSize, 10*time.Second
		return cfg
	}

	t.Run("status agrees with the sidecars and with the consumers", func(t *testing.T) {
		consumers := []*slowConsumer{
			startSlowConsumer(t, billing[0], "orders.*", truthRecvBuffer, truthWork),
			startSlowConsumer(t, billing[1], "orders.*", truthRecvBuffer, truthWork),
		}
		// The broker learns of both sidecars' interest asynchronously: a
		// sentinel that both receive says it has. Sentinels carry the
		// bench's payload layout, so that everything a consumer reads is
		// timed, as everything its sidecar delivers is.
		eventually(t, "both consumers receive", func() error {
			if err := pub.Publish("orders.sentinel", benchPayload(truthSize, sentinelSeq)); err != nil {
				return err
			}
			if err := pub.Flush(); err != nil {
				return err
			}
			for _, c := range consumers {
				if c.stats().got == 0 {
					return fmt.Errorf("%s received nothing yet", c.name)
				}
			}
			return nil
		})

		// Beside the mesh, at the broker, where the publishing sidecar's
		// stamp is still on the messages: how long each took from the
		// bench's send time to that stamp, where the sidecars' end-to-end
		// time begins. No sidecar sees this part of the consumers' time.
		var beforeStampMu sync.Mutex
		beforeStamp := hdrhistogram.New(1, 60_000_000, 3)
		observer := natstest.Connect(t, broker.ClientURL())
		observed, err := observer.Subscribe("orders.new", func(m *nats.Msg) {
			stamp, err := strconv.ParseInt(m.Header.Get(sidecar.StampHeader), 10, 64)
			if err != nil || len(m.Data) < 24 {
				return
			}
			sent := int64(binary.LittleEndian.Uint64(m.Data[8:]))
			beforeStampMu.Lock()
			defer beforeStampMu.Unlock()
			_ = beforeStamp.RecordValue(min(max((stamp-sent)/1e3, 1), 60_000_000))
		})
		if err == nil {
			err = observed.SetPendingLimits(-1, -1)
		}
		if err == nil {
			err = observer.Flush()
		}
		if err != nil {
			t.Fatal(err)
		}

		res, err := loadgen.Run(ctx, benchConfig("orders.new", truthRate, truthBurst))
		if err != nil {
			t.Fatal(err)
		}
		if res.Failed != 0 || res.Received != res.Sent || res.Sent == 0 {
			t.Fatalf("bench: sent %d, received %d at the broker, failed %d", res.Sent, res.Received, res.Failed)
		}
		// The consumers drain what queued in their sidecars, at their pace.
		envtestsuite.Eventually(t, 30*time.Second, 20*time.Millisecond, "the consumers read every message the bench sent", func() error {
			for _, c := range consumers {
				st := c.stats()
				if st.err != nil {
					return fmt.Errorf("%s: %v", c.name, st.err)
				}
				if st.bench != res.Sent {
					return fmt.Errorf("%s read %d of the bench's %d", c.name, st.bench, res.Sent)
				}
			}
			return nil
		})
		// Every message a sidecar delivered was read (its counts follow
		// its write a moment later): the sidecars' histograms and the
		// consumers' cover the same messages.
		stats := make([]slowConsumerStats, len(consumers))
		eventually(t, "the sidecars delivered what the consumers read, and hold nothing", func() error {
			for i, p := range billing {
				stats[i] = consumers[i].stats()
				tot := p.side.PolicyTotals()["billing"]
				var dropped uint64
				for _, d := range tot.Dropped {
					dropped += d
				}
				if tot.Delivered != uint64(stats[i].got) || tot.Pending != 0 || tot.InFlight != 0 || dropped != 0 {
					return fmt.Errorf("%s delivered %d (%d pending, %d in flight, %d dropped); its consumer read %d", p.name, tot.Delivered, tot.Pending, tot.InFlight, dropped, stats[i].got)
				}
			}
			return nil
		})
		truth, truthDwell := hdrhistogram.New(1, 60_000_000, 3), hdrhistogram.New(1, 60_000_000, 3)
		var delivered int64
		for i, p := range billing {
			if s := stats[i]; s.stamped != 0 || s.short != 0 || s.negative != 0 {
				t.Fatalf("%s's consumer: %d messages kept the sidecar's stamp, %d too short, %d read before they were sent", p.name, s.stamped, s.short, s.negative)
			}
			snap := p.side.Latency()["billing"]
			if snap[1].Negative != 0 || snap[1].TooLarge != 0 {
				t.Fatalf("%s: end-to-end out of range: %d negative, %d too large", p.name, snap[1].Negative, snap[1].TooLarge)
			}
			checkDebugLatency(t, p, "billing", snap[1].Histogram)
			truth.Merge(snap[1].Histogram)
			truthDwell.Merge(snap[0].Histogram)
			delivered += stats[i].got
		}
		if truth.TotalCount() != delivered {
			t.Fatalf("the sidecars measured %d messages end to end and delivered %d: every delivered message is stamped", truth.TotalCount(), delivered)
		}

		// 1. Status tells the sidecars' distribution, once every report
		// covering the run arrived.
		var got v1alpha1.Subscription
		eventually(t, "status tells the sidecars' distribution", func() error {
			if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "billing"}, &got); err != nil {
				return err
			}
			agg := got.Status.Aggregate
			if agg == nil {
				return fmt.Errorf("no aggregate yet")
			}
			if agg.Count != delivered || agg.Delivered != delivered || agg.Pods != 2 || got.Status.Dropped != 0 {
				return fmt.Errorf("aggregate of %d pods: %d measured, %d delivered, %d dropped; want 2 pods, %d measured and delivered, none dropped",
					agg.Pods, agg.Count, agg.Delivered, got.Status.Dropped, delivered)
			}
			if err := withinOneBucket("end-to-end", &agg.LatencySummary, truth); err != nil {
				return err
			}
			if agg.Dwell == nil {
				return fmt.Errorf("no dwell in the aggregate")
			}
			return withinOneBucket("dwell", agg.Dwell, truthDwell)
		})
		agg := got.Status.Aggregate

		// 2. Status against the consumers' own measurement, over the same
		// messages. What the kernel buffers between a sidecar and its
		// consumer hold is delivered for the sidecar and not yet read by
		// the consumer: those messages wait for the consumer's work on each
		// message ahead of them in the kernel, which no sidecar can see.
		// The tolerance is max(5% of the consumers' p99, 1 ms + the time the
		// kernel buffers hold): their capacity in messages (from getsockopt
		// and the message's size on the wire) times the consumer's time per
		// message, measured over the messages ahead of those that decide
		// the p99 (slowConsumerStats.heldAbove): a 5 ms sleep takes longer,
		// in spells, when the CPU is contended.
		ms := func(us int64) time.Duration { return time.Duration(us) * time.Microsecond }
		statusPods := map[string]v1alpha1.SubscriptionPodStatus{}
		for _, ps := range got.Status.Pods {
			statusPods[ps.Name] = ps
		}
		outside, outsideIntended := hdrhistogram.New(1, 60_000_000, 3), hdrhistogram.New(1, 60_000_000, 3)
		var read int64
		held := make([]int, len(consumers))
		wire := len(fmt.Sprintf("MSG orders.new 1 %d\r\n", truthSize)) + truthSize + len("\r\n")
		for i, c := range consumers {
			s := stats[i]
			outside.Merge(s.fromSent)
			outsideIntended.Merge(s.fromIntended)
			read += s.got
			snd, rcv, err := c.kernelBuffers(billing[i])
			if err != nil {
				t.Fatal(err)
			}
			held[i] = (snd + rcv + wire - 1) / wire
			t.Logf("%s: sidecar SO_SNDBUF %d B, consumer SO_RCVBUF %d B: the kernel holds %d messages of %d B on the wire; the consumer worked %s a message on average (asked %s)",
				c.name, snd, rcv, held[i], wire, s.work.Round(time.Microsecond), truthWork)
		}
		for i, c := range consumers {
			// The pod's own line in status against its consumer.
			s := stats[i]
			ps, ok := statusPods[c.name]
			if !ok || ps.Latency == nil {
				t.Errorf("%s: no latency in status.pods: %+v", c.name, got.Status.Pods)
				continue
			}
			kt, n := s.heldAbove(s.fromSent, 99, held[i])
			podP99, theirs := ps.Latency.P99.Duration, ms(s.fromSent.ValueAtQuantile(99))
			tol := max(theirs/20, time.Millisecond+kt)
			t.Logf("%s: p99 in status.pods %s, its consumer's %s (p50 %s, max %s), status minus consumer %s; tolerance %s = max(5%% of %s, 1ms + %d messages × %s, at most, ahead of each of its %d messages at or over the p99); %d read, %d in status",
				c.name, podP99, theirs, ms(s.fromSent.ValueAtQuantile(50)), ms(s.fromSent.Max()), podP99-theirs, tol, theirs, held[i], (kt / time.Duration(held[i])).Round(time.Microsecond), n, s.got, ps.Latency.Count)
			if d := podP99 - theirs; d > tol || -d > tol {
				t.Errorf("%s: p99 %s in status.pods and %s at its consumer differ by %s, more than %s", c.name, podP99, theirs, d, tol)
			}
			if ps.Latency.Count != s.got {
				t.Errorf("%s: status.pods counts %d, its consumer read %d", c.name, ps.Latency.Count, s.got)
			}
		}
		var kernelTime time.Duration
		for i := range consumers {
			kt, _ := stats[i].heldAbove(outside, 99, held[i])
			kernelTime = max(kernelTime, kt)
		}
		if read != agg.Count {
			t.Fatalf("the consumers read %d messages, status counts %d", read, agg.Count)
		}
		consumerP99 := ms(outside.ValueAtQuantile(99))
		statusP99 := agg.P99.Duration
		tolerance := max(consumerP99/20, time.Millisecond+kernelTime)
		diff := statusP99 - consumerP99
		t.Logf("bench: %d messages of %d B at %d/s for %s; send lag p99 %s, max %s; its own subscriber (at the broker) p99 %s",
			res.Sent, truthSize, truthRate, truthBurst, ms(res.SendLag.ValueAtQuantile(99)), ms(res.SendLag.Max()), ms(res.Uncorrected.ValueAtQuantile(99)))
		beforeStampMu.Lock()
		t.Logf("before the stamp (the bench's send time to the publishing sidecar's stamp, at the broker): %d messages, p50 %s p99 %s max %s",
			beforeStamp.TotalCount(), ms(beforeStamp.ValueAtQuantile(50)), ms(beforeStamp.ValueAtQuantile(99)), ms(beforeStamp.Max()))
		beforeStampMu.Unlock()
		t.Logf("status:    %d measured, %d delivered; end to end p50 %s p90 %s p99 %s p99.9 %s max %s; dwell p50 %s p99 %s max %s",
			agg.Count, agg.Delivered, agg.P50.Duration, agg.P90.Duration, agg.P99.Duration, agg.P999.Duration, agg.Max.Duration, agg.Dwell.P50.Duration, agg.Dwell.P99.Duration, agg.Dwell.Max.Duration)
		t.Logf("sidecars:  %d measured; end to end p50 %s p90 %s p99 %s p99.9 %s max %s",
			truth.TotalCount(), ms(truth.ValueAtQuantile(50)), ms(truth.ValueAtQuantile(90)), ms(truth.ValueAtQuantile(99)), ms(truth.ValueAtQuantile(99.9)), ms(truth.Max()))
		t.Logf("consumers: %d read; from the bench's send time p50 %s p90 %s p99 %s p99.9 %s max %s; from its intended send time p99 %s",
			outside.TotalCount(), ms(outside.ValueAtQuantile(50)), ms(outside.ValueAtQuantile(90)), consumerP99, ms(outside.ValueAtQuantile(99.9)), ms(outside.Max()), ms(outsideIntended.ValueAtQuantile(99)))
		t.Logf("p99: status %s, consumers %s, status minus consumers %s; tolerance %s = max(5%% of %s, 1ms + %s in the kernel buffers)",
			statusP99, consumerP99, diff, tolerance, consumerP99, kernelTime)
		if diff > tolerance || -diff > tolerance {
			t.Errorf("the status p99 %s and the consumers' p99 %s differ by %s, more than %s", statusP99, consumerP99, diff, tolerance)
		}
		// The point of the slow consumer: the queue formed in the sidecar,
		// where it is measured, and outweighs what the kernel held.
		if agg.Dwell.P99.Duration <= kernelTime {
			t.Errorf("dwell p99 %s is not over the %s the kernel buffers hold: queueing in the sidecar did not dominate", agg.Dwell.P99.Duration, kernelTime)
		}
	})

	t.Run("a breaker trip shows in KILLED and pods, and its release clears it", func(t *testing.T) {
		// audit-0's consumer is slow and its sidecar's send buffer
		// bounded, so its queue grows under the load until the breaker
		// trips; audit-1's is a stock nats.go application that keeps up.
		slow := startSlowConsumer(t, audit[0], "audit.*", truthRecvBuffer, truthWork)
		var fastGot atomic.Int64
		fast := audit[1].app(t)
		if _, err := fast.Subscribe("audit.*", func(*nats.Msg) { fastGot.Add(1) }); err != nil {
			t.Fatal(err)
		}
		if err := fast.Flush(); err != nil {
			t.Fatal(err)
		}
		eventually(t, "both audit consumers receive", func() error {
			if err := pub.Publish("audit.sentinel", benchPayload(truthSize, sentinelSeq)); err != nil {
				return err
			}
			if err := pub.Flush(); err != nil {
				return err
			}
			if slow.stats().got == 0 || fastGot.Load() == 0 {
				return fmt.Errorf("received %d and %d", slow.stats().got, fastGot.Load())
			}
			return nil
		})

		// Open-loop load until status shows the trip (the bench stops
		// early when its context ends).
		benchCtx, stopBench := context.WithCancel(ctx)
		type outcome struct {
			res *loadgen.Result
			err error
		}
		benchDone := make(chan outcome, 1)
		go func() {
			res, err := loadgen.Run(benchCtx, benchConfig("audit.new", 400, time.Minute))
			benchDone <- outcome{res, err}
		}()
		var benchStopped bool
		var bench outcome
		stop := func() {
			if !benchStopped {
				benchStopped = true
				stopBench()
				bench = <-benchDone
			}
		}
		defer stop()

		key := client.ObjectKey{Namespace: ns, Name: "audit"}
		var got v1alpha1.Subscription
		eventually(t, "KILLED says Auto 1/2 pods", func() error {
			if err := k8sClient.Get(ctx, key, &got); err != nil {
				return err
			}
			if got.Status.Killed != "Auto 1/2 pods" {
				return fmt.Errorf("killed %q, want %q", got.Status.Killed, "Auto 1/2 pods")
			}
			return nil
		})
		pods := map[string]v1alpha1.SubscriptionPodStatus{}
		for _, p := range got.Status.Pods {
			pods[p.Name] = p
		}
		if k := pods["audit-0"].Killed; k == nil || k.Reason != v1alpha1.KillAuto || k.Since.IsZero() {
			t.Errorf("audit-0 in pods[]: killed %+v, want reason %s with a time", k, v1alpha1.KillAuto)
		}
		if p, ok := pods["audit-1"]; !ok || p.Killed != nil {
			t.Errorf("audit-1 in pods[]: %+v (listed %v), want listed and not killed", p.Killed, ok)
		}
		if err := conditionIs(got.Status.Conditions, v1alpha1.ConditionDegraded, metav1.ConditionTrue, "the breaker tripped in 1 pod(s) (audit-0)"); err != nil {
			t.Error(err)
		}
		if table := kubectl(t, "get", "wsub", "-n", ns, "audit"); !strings.Contains(table, "Auto 1/2 pods") {
			t.Errorf("kubectl get wsub does not show KILLED Auto 1/2 pods:\n%s", table)
		}
		if ks := audit[0].side.KillSwitches()["audit"]; !ks.Auto || ks.Transitions["closed->open"] == 0 {
			t.Errorf("audit-0's kill switch: %+v, want an automatic one that tripped", ks)
		}
		t.Logf("tripped: %s; audit-0 %+v; Degraded: %s", got.Status.Killed, pods["audit-0"].Killed, degradedMessage(got.Status.Conditions))

		// The load stops; after the cooldown the breaker tries again and,
		// with nothing waiting through its trial, closes.
		stop()
		if bench.err != nil {
			t.Fatal(bench.err)
		}
		t.Logf("bench: %d messages to audit.new, %d failed", bench.res.Sent, bench.res.Failed)
		eventually(t, "KILLED clears", func() error {
			if err := k8sClient.Get(ctx, key, &got); err != nil {
				return err
			}
			if got.Status.Killed != "" {
				return fmt.Errorf("killed %q, want empty", got.Status.Killed)
			}
			for _, p := range got.Status.Pods {
				if p.Killed != nil {
					return fmt.Errorf("pod %s killed %+v", p.Name, p.Killed)
				}
			}
			if len(got.Status.Pods) != 2 {
				return fmt.Errorf("%d pods listed, want 2", len(got.Status.Pods))
			}
			return conditionIs(got.Status.Conditions, v1alpha1.ConditionDegraded, metav1.ConditionFalse, "no tripped breaker")
		})
		// Status clears as soon as delivery is restored, which is when the
		// breaker goes on trial (half-open); with nothing waiting through
		// its trial, it then closes.
		var ks sidecar.KillSwitchStatus
		eventually(t, "audit-0's breaker closes after its trial", func() error {
			ks = audit[0].side.KillSwitches()["audit"]
			if ks.Killed || ks.State != breaker.Closed || ks.Transitions["half-open->closed"] == 0 {
				return fmt.Errorf("audit-0's kill switch: %+v, want closed after a trial", ks)
			}
			return nil
		})
		if ks := audit[1].side.KillSwitches()["audit"]; len(ks.Transitions) != 0 {
			t.Errorf("audit-1's kill switch moved: %+v", ks)
		}
		if err := k8sClient.Get(ctx, key, &got); err != nil {
			t.Fatal(err)
		}
		if got.Status.Killed != "" || len(got.Status.Pods) != 2 || got.Status.Pods[0].Killed != nil || got.Status.Pods[1].Killed != nil {
			t.Errorf("with the breaker closed: killed %q, pods %+v", got.Status.Killed, got.Status.Pods)
		}
		t.Logf("released: audit-0's breaker went %v; Degraded: %s", ks.Transitions, degradedMessage(got.Status.Conditions))
	})
}

// withinOneBucket compares a status latency summary with the distribution
// it summarises: every percentile within one bucket of the operator's
// histograms, and the same count.
func withinOneBucket(what string, s *v1alpha1.LatencySummary, truth *hdrhistogram.Histogram) error {
	if s.Count != truth.TotalCount() {
		return fmt.Errorf("%s: status counts %d, the sidecars %d", what, s.Count, truth.TotalCount())
	}
	for _, p := range []struct {
		name   string
		status time.Duration
		q      float64
	}{{"p50", s.P50.Duration, 50}, {"p90", s.P90.Duration, 90}, {"p99", s.P99.Duration, 99}, {"p99.9", s.P999.Duration, 99.9}, {"p99.99", s.P9999.Duration, 99.99}, {"max", s.Max.Duration, 100}} {
		want := time.Duration(truth.ValueAtQuantile(p.q)) * time.Microsecond
		if reports.MovedMoreThanOneBucket(p.status, want) {
			return fmt.Errorf("%s %s is %s in status, %s in the sidecars: more than one bucket apart", what, p.name, p.status, want)
		}
	}
	return nil
}

// checkDebugLatency reads the pod's /debug/latency, as an operator would,
// and checks that its end-to-end section for the Subscription is the
// distribution h: the same count and maximum.
func checkDebugLatency(t *testing.T, p *pod, subscription string, h *hdrhistogram.Histogram) {
	t.Helper()
	rec := httptest.NewRecorder()
	p.side.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/latency", nil))
	if rec.Code != 200 {
		t.Fatalf("%s: /debug/latency: %d", p.name, rec.Code)
	}
	header := fmt.Sprintf("# subscription %s, end-to-end,", subscription)
	var in bool
	sc := bufio.NewScanner(strings.NewReader(rec.Body.String()))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, header):
			in = true
		case in && strings.HasPrefix(line, "#[Max"):
			// #[Max     =     1234.000, Total count    =          567]
			f := strings.FieldsFunc(line, func(r rune) bool { return r == '=' || r == ',' || r == ']' || r == ' ' })
			if len(f) != 5 {
				t.Fatalf("%s: /debug/latency: %q", p.name, line)
			}
			maxUs, err1 := strconv.ParseFloat(f[1], 64)
			count, err2 := strconv.ParseInt(f[4], 10, 64)
			if err1 != nil || err2 != nil || int64(maxUs) != h.Max() || count != h.TotalCount() {
				t.Fatalf("%s: /debug/latency says %q; the sidecar's distribution has max %d µs, %d values", p.name, line, h.Max(), h.TotalCount())
			}
			return
		}
	}
	t.Fatalf("%s: /debug/latency has no %q section:\n%s", p.name, header, rec.Body.String())
}

func degradedMessage(conds []metav1.Condition) string {
	for _, c := range conds {
		if c.Type == v1alpha1.ConditionDegraded {
			return fmt.Sprintf("%s %s %q", c.Status, c.Reason, c.Message)
		}
	}
	return "none"
}
