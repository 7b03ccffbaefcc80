package sidecar

import (
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/weighstation/weighstation/sidecar/breaker"
	"github.com/weighstation/weighstation/sidecar/pending"
	"github.com/weighstation/weighstation/sidecar/upstream"
)

// Prometheus metrics, read from the sidecar's own accounting at scrape time
// (no second set of counters to drift from the first). Labels are
// Subscription and Topic policy names, bounded by the configuration, never
// subjects or sids.
var (
	descArrived = prometheus.NewDesc("weighstation_sidecar_arrived_total",
		"Messages that arrived from the broker for local subscriptions.", []string{"subscription"}, nil)
	descDelivered = prometheus.NewDesc("weighstation_sidecar_delivered_total",
		"Messages written to the application's socket.", []string{"subscription"}, nil)
	descDropped = prometheus.NewDesc("weighstation_sidecar_dropped_total",
		"Messages dropped before delivery, by reason.", []string{"subscription", "reason"}, nil)
	descPending = prometheus.NewDesc("weighstation_sidecar_pending_messages",
		"Messages waiting in the sidecar for the application.", []string{"subscription"}, nil)
	descInFlight = prometheus.NewDesc("weighstation_sidecar_in_flight_messages",
		"Messages taken from a queue and being written to the application's socket.", []string{"subscription"}, nil)
	descUnrouted = prometheus.NewDesc("weighstation_sidecar_unrouted_total",
		"Messages from the broker for interest no local subscription held any more (between an UNSUB and the broker learning of it).", nil, nil)
	descBrokerInDoubt = prometheus.NewDesc("weighstation_sidecar_broker_in_doubt_total",
		"Publishes written to a connection to the broker that was lost before the broker confirmed them: they may or may not have arrived.", nil, nil)
	descWrites = prometheus.NewDesc("weighstation_sidecar_app_writes_total",
		"Writes to applications' sockets, by who wrote: the upstream reader inline (the application kept up) or the connection's writer goroutine (control replies, a full socket, a busy writer).", []string{"by"}, nil)
	descBrokerWrites = prometheus.NewDesc("weighstation_sidecar_broker_writes_total",
		"Writes to the broker's socket, by who wrote: an application connection's reader (publishes written inline, before it reads again) or the upstream writer goroutine (control lines, confirmations, and publishes handed over by -overlap-upstream-writes).", []string{"by"}, nil)
	descPublishHandoffs = prometheus.NewDesc("weighstation_sidecar_publish_handoffs_total",
		"Times an application connection's reader, behind its application, handed its queued publishes to the upstream writer goroutine instead of writing them itself (-overlap-upstream-writes).", nil, nil)
	descPublishHandoffsHeld = prometheus.NewDesc("weighstation_sidecar_publish_handoffs_held_total",
		fmt.Sprintf("Handoffs that found the handoff backlog (%d KiB by default) already waiting behind a write to the broker, so the reader waited for that write, or wrote itself, before it read on.", upstream.HandoffBacklogBytes>>10), nil, nil)
	descBrokerConnected = prometheus.NewDesc("weighstation_sidecar_broker_connected",
		"1 while the connection to the broker is up. Without it the sidecar still serves its applications: publishes wait in the bounded outage buffer.", nil, nil)
	descBrokerReconnects = prometheus.NewDesc("weighstation_sidecar_broker_reconnects_total",
		"Times the connection to the broker came back after it was lost (the subscriptions were renewed each time).", nil, nil)
	descBrokerRenewalDuplicates = prometheus.NewDesc("weighstation_sidecar_broker_renewal_duplicates_total",
		"Messages that arrived on the old connection to the broker while a credential renewal's new connection was subscribed too: each may have been delivered twice.", nil, nil)
	descBrokerUnsent = prometheus.NewDesc("weighstation_sidecar_broker_unsent_total",
		"Publishes accepted before the broker was first reached that never left: the broker refused them when it was reached (over its max_payload), or the sidecar stopped first.", nil, nil)
	descEchoSuppressed = prometheus.NewDesc("weighstation_sidecar_echo_suppressed_total",
		"Messages not delivered back to the connection that published them, because it asked for echo:false.", nil, nil)
	descKilled = prometheus.NewDesc("weighstation_sidecar_killed",
		"1 while the Subscription's kill switch is engaged or tripped (delivery stopped, upstream interest withdrawn).", []string{"subscription"}, nil)
	descBreakerState = prometheus.NewDesc("weighstation_sidecar_kill_switch_state",
		"The automatic kill switch's state: 1 for the current one of closed, open and half-open.", []string{"subscription", "state"}, nil)
	descBreakerTransitions = prometheus.NewDesc("weighstation_sidecar_kill_switch_transitions_total",
		"The automatic kill switch's transitions.", []string{"subscription", "from", "to"}, nil)
	descNoResponders = prometheus.NewDesc("weighstation_sidecar_no_responders_total",
		"No-responders answers: received by the pod's requests; sent by this sidecar for queue-group requests it dropped as killed; and unsent, when the broker was away.", []string{"direction"}, nil)
	descAccess = prometheus.NewDesc("weighstation_sidecar_access_denied_total",
		"Operations an ACL rule refused (mode enforce) or would have refused (mode audit).", []string{"operation", "rule", "mode"}, nil)
	descRepliesAllowed = prometheus.NewDesc("weighstation_sidecar_access_replies_allowed_total",
		"Publishes the ACL allowed only as the one reply to a request the pod received.", nil, nil)
	descRepliesOutsideInbox = prometheus.NewDesc("weighstation_sidecar_access_replies_outside_inbox_total",
		"Replies to a request the pod received that the one-reply allowance did not cover, because their reply subject lay outside every inbox space (_INBOX.<token>.…): the publish rules judged them (weighstation_sidecar_access_denied_total counts those they refused).", nil, nil)
	descSubsRefused = prometheus.NewDesc("weighstation_sidecar_subscriptions_refused_total",
		"SUBs refused by a bound, by reason: max_subscriptions (a connection's 10,000), memory_budget (what a SUB holds is charged to -memory-budget).", []string{"reason"}, nil)
	descInboxPending = prometheus.NewDesc("weighstation_sidecar_inbox_pending_total",
		"Requests refused because the pod's inbox space was not known yet (its broker credential had not arrived from the operator); inbox SUBs wait for it instead.", nil, nil)
	descUntracked = prometheus.NewDesc("weighstation_sidecar_requests_untracked_total",
		fmt.Sprintf("Requests delivered to the application while %d already awaited replies: their replies are not timed and get no ACL reply allowance.", maxAnswerable), nil, nil)
	descUntimed = prometheus.NewDesc("weighstation_sidecar_requests_untimed_total",
		fmt.Sprintf("The application's requests not timed for weighstation_sidecar_request_latency_seconds because their connection already timed %d awaiting replies.", maxOutstandingRequests), nil, nil)
	descInvalid = prometheus.NewDesc("weighstation_sidecar_invalid_total",
		"PUBs and SUBs refused for an invalid subject, pattern or header block.", nil, nil)
	descBudget = prometheus.NewDesc("weighstation_sidecar_pending_bytes",
		"Bytes charged to the memory budget: what all pending messages hold, and the read buffers past their first 4 KiB (weighstation_sidecar_read_buffer_bytes).", nil, nil)
	descBudgetMax = prometheus.NewDesc("weighstation_sidecar_memory_budget_bytes",
		"The memory budget for pending messages and the application connections' read buffers (-memory-budget).", nil, nil)
	descReadBuffers = prometheus.NewDesc("weighstation_sidecar_read_buffer_bytes",
		"Bytes the application connections' read buffers hold past their first 4 KiB each, charged to the memory budget (weighstation_sidecar_pending_bytes includes them).", nil, nil)
	descReadWaiting = prometheus.NewDesc("weighstation_sidecar_read_budget_waiting",
		"Application connections whose next body waits now for room in the memory budget.", nil, nil)
	descReadWaits = prometheus.NewDesc("weighstation_sidecar_read_budget_waits_total",
		"PUB and HPUB bodies that waited for room in the memory budget before they were read.", nil, nil)
	descBodiesRefused = prometheus.NewDesc("weighstation_sidecar_bodies_refused_total",
		"PUB and HPUB bodies skipped unread and refused because the memory budget had no room for them within -read-budget-wait (the connection is kept).", nil, nil)
	descPublish = prometheus.NewDesc("weighstation_sidecar_publish_total",
		"Publish attempts by governing Topic and outcome.", []string{"topic", "outcome"}, nil)
	descRequests = prometheus.NewDesc("weighstation_sidecar_request_latency_seconds",
		"The application's requests, from their arrival in the sidecar to the write of the reply, from HdrHistogram. The sum is mean times count.", nil, nil)
	descLatency = prometheus.NewDesc("weighstation_sidecar_latency_seconds",
		"Response time from HdrHistogram, by kind (dwell: arrival in this sidecar to the write; end_to_end: the publishing sidecar's stamp to the write). The sum is mean times count.",
		[]string{"subscription", "kind"}, nil)
)

// latencyQuantiles are the percentiles exported (the full distribution is
// at /debug/latency).
var latencyQuantiles = []float64{0.5, 0.9, 0.99, 0.999, 0.9999}

type collector struct{ s *Server }

// Collector returns a Prometheus collector for the sidecar.
func (s *Server) Collector() prometheus.Collector { return collector{s} }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descArrived, descDelivered, descDropped, descPending, descInFlight, descBudget, descBudgetMax, descReadBuffers, descReadWaiting, descReadWaits, descBodiesRefused, descPublish, descLatency, descRequests, descInvalid, descUnrouted, descBrokerInDoubt, descWrites, descBrokerWrites, descPublishHandoffs, descPublishHandoffsHeld, descBrokerConnected, descBrokerReconnects, descBrokerRenewalDuplicates, descBrokerUnsent, descEchoSuppressed, descKilled, descBreakerState, descBreakerTransitions, descNoResponders, descAccess, descRepliesAllowed, descRepliesOutsideInbox, descSubsRefused, descInboxPending, descUntracked, descUntimed} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for name, t := range c.s.PolicyTotals() {
		ch <- prometheus.MustNewConstMetric(descArrived, prometheus.CounterValue, float64(t.Arrived), name)
		ch <- prometheus.MustNewConstMetric(descDelivered, prometheus.CounterValue, float64(t.Delivered), name)
		for r := range t.Dropped {
			ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(t.Dropped[r]), name, pending.Reason(r).String())
		}
		ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(t.Pending), name)
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(t.InFlight), name)
	}
	ch <- prometheus.MustNewConstMetric(descInvalid, prometheus.CounterValue, float64(c.s.Invalid()))
	ch <- prometheus.MustNewConstMetric(descUnrouted, prometheus.CounterValue, float64(c.s.Unrouted()))
	ch <- prometheus.MustNewConstMetric(descBrokerInDoubt, prometheus.CounterValue, float64(c.s.up.InDoubt()))
	inline, byWriter := c.s.AppWrites()
	ch <- prometheus.MustNewConstMetric(descWrites, prometheus.CounterValue, float64(inline), "inline")
	ch <- prometheus.MustNewConstMetric(descWrites, prometheus.CounterValue, float64(byWriter), "writer")
	byReader, byUpstreamWriter := c.s.BrokerWrites()
	ch <- prometheus.MustNewConstMetric(descBrokerWrites, prometheus.CounterValue, float64(byReader), "reader")
	ch <- prometheus.MustNewConstMetric(descBrokerWrites, prometheus.CounterValue, float64(byUpstreamWriter), "writer")
	handoffs, held := c.s.PublishHandoffs()
	ch <- prometheus.MustNewConstMetric(descPublishHandoffs, prometheus.CounterValue, float64(handoffs))
	ch <- prometheus.MustNewConstMetric(descPublishHandoffsHeld, prometheus.CounterValue, float64(held))
	ch <- prometheus.MustNewConstMetric(descBrokerConnected, prometheus.GaugeValue, boolGauge(c.s.BrokerConnected()))
	ch <- prometheus.MustNewConstMetric(descBrokerReconnects, prometheus.CounterValue, float64(c.s.BrokerReconnects()))
	ch <- prometheus.MustNewConstMetric(descBrokerRenewalDuplicates, prometheus.CounterValue, float64(c.s.up.Duplicates()))
	ch <- prometheus.MustNewConstMetric(descBrokerUnsent, prometheus.CounterValue, float64(c.s.up.Unsent()))
	ch <- prometheus.MustNewConstMetric(descEchoSuppressed, prometheus.CounterValue, float64(c.s.EchoSuppressed()))
	for name, ks := range c.s.KillSwitches() {
		ch <- prometheus.MustNewConstMetric(descKilled, prometheus.GaugeValue, boolGauge(ks.Killed), name)
		if !ks.Auto {
			continue
		}
		for _, st := range []breaker.State{breaker.Closed, breaker.Open, breaker.HalfOpen} {
			ch <- prometheus.MustNewConstMetric(descBreakerState, prometheus.GaugeValue, boolGauge(ks.State == st), name, st.String())
		}
		for tr, n := range ks.Transitions {
			from, to, _ := strings.Cut(tr, "->")
			ch <- prometheus.MustNewConstMetric(descBreakerTransitions, prometheus.CounterValue, float64(n), name, from, to)
		}
	}
	for k, n := range c.s.AccessDenials() {
		mode := "enforce"
		if k.Audit {
			mode = "audit"
		}
		ch <- prometheus.MustNewConstMetric(descAccess, prometheus.CounterValue, float64(n), k.Op.String(), k.Rule.String(), mode)
	}
	ch <- prometheus.MustNewConstMetric(descRepliesAllowed, prometheus.CounterValue, float64(c.s.RepliesAllowed()))
	ch <- prometheus.MustNewConstMetric(descRepliesOutsideInbox, prometheus.CounterValue, float64(c.s.RepliesOutsideInbox()))
	maxSubs, memorySubs := c.s.SubscriptionsRefused()
	ch <- prometheus.MustNewConstMetric(descSubsRefused, prometheus.CounterValue, float64(maxSubs), "max_subscriptions")
	ch <- prometheus.MustNewConstMetric(descSubsRefused, prometheus.CounterValue, float64(memorySubs), "memory_budget")
	ch <- prometheus.MustNewConstMetric(descInboxPending, prometheus.CounterValue, float64(c.s.inboxPending.Load()))
	ch <- prometheus.MustNewConstMetric(descUntracked, prometheus.CounterValue, float64(c.s.answerable.untracked.Load()))
	ch <- prometheus.MustNewConstMetric(descUntimed, prometheus.CounterValue, float64(c.s.requestsUntimed.Load()))
	ch <- prometheus.MustNewConstMetric(descNoResponders, prometheus.CounterValue, float64(c.s.NoRespondersReceived()), "received")
	ch <- prometheus.MustNewConstMetric(descNoResponders, prometheus.CounterValue, float64(c.s.NoRespondersSent()), "sent")
	ch <- prometheus.MustNewConstMetric(descNoResponders, prometheus.CounterValue, float64(c.s.noRespondersUnsent.Load()), "unsent")
	ch <- prometheus.MustNewConstMetric(descBudget, prometheus.GaugeValue, float64(c.s.budget.Used()))
	ch <- prometheus.MustNewConstMetric(descBudgetMax, prometheus.GaugeValue, float64(c.s.budget.Max()))
	ch <- prometheus.MustNewConstMetric(descReadBuffers, prometheus.GaugeValue, float64(c.s.ReadBufferBytes()))
	ch <- prometheus.MustNewConstMetric(descReadWaiting, prometheus.GaugeValue, float64(c.s.ReadBudgetWaiting()))
	ch <- prometheus.MustNewConstMetric(descReadWaits, prometheus.CounterValue, float64(c.s.ReadBudgetWaits()))
	ch <- prometheus.MustNewConstMetric(descBodiesRefused, prometheus.CounterValue, float64(c.s.BodiesRefused()))
	for topic, t := range c.s.TopicCounters() {
		for outcome, v := range map[string]uint64{"forwarded": t.Forwarded, "refused_access": t.RefusedAccess, "refused_size": t.RefusedSize, "refused_rate": t.RefusedRate, "failed_upstream": t.FailedUpstream} {
			ch <- prometheus.MustNewConstMetric(descPublish, prometheus.CounterValue, float64(v), topic, outcome)
		}
	}
	for name, l := range c.s.Latency() {
		for i, kind := range []string{"dwell", "end_to_end"} {
			ch <- summaryOf(descLatency, l[i].Histogram, name, kind)
		}
	}
	ch <- summaryOf(descRequests, c.s.RequestLatency().Histogram)
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// summaryOf exports an HdrHistogram (microseconds) as a Prometheus summary
// in seconds.
func summaryOf(desc *prometheus.Desc, h *hdrhistogram.Histogram, labels ...string) prometheus.Metric {
	q := make(map[float64]float64, len(latencyQuantiles))
	for _, p := range latencyQuantiles {
		q[p] = float64(h.ValueAtQuantile(p*100)) / 1e6
	}
	return prometheus.MustNewConstSummary(desc, uint64(h.TotalCount()), h.Mean()*float64(h.TotalCount())/1e6, q, labels...)
}

// Handler serves /metrics (Prometheus) and /debug/latency (each
// distribution in HdrHistogram's percentile format, in microseconds).
func (s *Server) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.Collector())
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/latency", func(w http.ResponseWriter, _ *http.Request) {
		all := s.Latency()
		names := make([]string, 0, len(all))
		for name := range all {
			names = append(names, name)
		}
		sort.Strings(names)
		req := s.RequestLatency()
		fmt.Fprintf(w, "# the application's requests, arrival to reply, microseconds; out of range: %d negative, %d over 60 s\n", req.Negative, req.TooLarge)
		if _, err := req.Histogram.PercentilesPrint(w, 5, 1); err != nil {
			fmt.Fprintf(w, "# printing: %v\n", err)
		}
		fmt.Fprintln(w)
		for _, name := range names {
			label := name
			if label == "" {
				label = "(no Subscription: inboxes and other SUBs)"
			}
			for i, kind := range []string{"dwell", "end-to-end"} {
				snap := all[name][i]
				fmt.Fprintf(w, "# subscription %s, %s, microseconds; out of range: %d negative, %d over 60 s\n", label, kind, snap.Negative, snap.TooLarge)
				if _, err := snap.Histogram.PercentilesPrint(w, 5, 1); err != nil {
					fmt.Fprintf(w, "# printing: %v\n", err)
				}
				fmt.Fprintln(w)
			}
		}
	})
	return mux
}
