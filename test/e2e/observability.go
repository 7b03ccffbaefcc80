package e2e

import (
	"fmt"
	"strings"
	"text/tabwriter"
)

// What the observability story adds to the mesh while Prometheus watches,
// and removes: a publisher and a subscriber on a subject of their own,
// under a Subscription with a short queue. Their sidecars connect to a
// broker, open xDS streams and are issued credentials (then revoked),
// which the dashboard's panels show come and go; the subscriber is paused
// (it stops reading) until its queue fills and overflows.
const (
	PodObservePublisher  = "e2e-observe"
	PodObserveSubscriber = "e2e-observe-sub"
	SubjectObserve       = "e2e.observe"
	SubscriptionObserve  = "e2e-observe"
	// ObserveRate is the publisher's messages per second: a paused
	// subscriber's sockets (about 400 messages, test/e2e/probe) and queue
	// (ObserveMaxPending) fill within seconds.
	ObserveRate       = 200
	ObserveMaxPending = 100
	// MetricPendingBytes is the bytes the sidecar's queues hold, of its
	// memory budget (sidecar/metrics.go).
	MetricPendingBytes = "weighstation_sidecar_pending_bytes"
)

// ObserveProbes are those two pods.
func ObserveProbes() []ProbePod {
	return []ProbePod{
		{Name: PodObserveSubscriber, App: PodObserveSubscriber, Role: "subscriber", Inject: true, Args: []string{"-subject=" + SubjectObserve, "-id=" + PodObserveSubscriber}},
		{Name: PodObservePublisher, App: PodObservePublisher, Role: "publisher", Inject: true, Args: []string{"-subject=" + SubjectObserve, "-rate=" + fmt.Sprint(ObserveRate), "-id=" + PodObservePublisher}},
	}
}

// ObserveSubscription is their Subscription: the subscriber's, with a
// queue of ObserveMaxPending messages that drops the newest when full.
// The Topic e2e (e2e.>) lets the publisher publish.
func (m Manifests) ObserveSubscription() string {
	return fmt.Sprintf(`apiVersion: weighstation.io/v1alpha1
kind: Subscription
metadata:
  name: %s
  namespace: %s
spec:
  subject: %s
  selector:
    matchLabels:
      app: %s
  limits:
    maxPendingMessages: %d
    overflow: DropNewest
`, SubscriptionObserve, m.AppNamespace, SubjectObserve, PodObserveSubscriber, ObserveMaxPending)
}

// Condition is something the story makes happen only where it can, and
// the metrics that move only with it: a panel that reads nothing else
// need not move in a run without it.
type Condition struct {
	Name    string
	Metrics []string
}

var (
	// BrokerFault: a sidecar loses its broker connection (a broker
	// deleted, E2E_DESTRUCTIVE). In-doubt publishes may stay at zero even
	// then (only publishes unconfirmed at the loss count), so they share a
	// panel with the reconnections.
	BrokerFault = Condition{Name: "a broker fault (E2E_DESTRUCTIVE=true)", Metrics: []string{MetricBrokerReconnects, MetricBrokerInDoubt}}
	// StalledConsumer: an application stops reading (the probe's POST
	// /pause): only then do the sidecar's queues hold messages, and
	// overflow. A client that reads (nats.go does, into its own buffers,
	// whatever its handlers do) leaves them empty.
	StalledConsumer = Condition{Name: "a consumer that stops reading (the probe's POST /pause)", Metrics: []string{MetricDropped, MetricPending, MetricPendingBytes}}
)

// QueryResult is what one dashboard query returned over the story.
type QueryResult struct {
	Query PanelQuery
	Expr  string // expanded, as sent
	Move  Movement
	Err   error
}

// conditional reports whether expr reads a metric of one of conds.
func conditional(expr string, conds []Condition) bool {
	for _, c := range conds {
		for _, m := range c.Metrics {
			if strings.Contains(expr, m) {
				return true
			}
		}
	}
	return false
}

// DashboardProblems judges the dashboard's queries: every query must
// return a series, and every panel must have a query whose series moved
// (took two values) over the story, unless every query of the panel reads
// a metric of a condition the story could not make happen (unmet).
func DashboardProblems(results []QueryResult, unmet []Condition) []string {
	var problems []string
	type panelState struct {
		moved, waived bool
	}
	panels := map[string]*panelState{}
	var order []string
	for _, r := range results {
		p := panels[r.Query.Panel]
		if p == nil {
			p = &panelState{waived: true}
			panels[r.Query.Panel] = p
			order = append(order, r.Query.Panel)
		}
		p.waived = p.waived && conditional(r.Expr, unmet)
		switch {
		case r.Err != nil:
			problems = append(problems, fmt.Sprintf("panel %s: %v", r.Query, r.Err))
		case r.Move.Series == 0:
			problems = append(problems, fmt.Sprintf("panel %s returned no series: %s", r.Query, r.Expr))
		case r.Move.Changed:
			p.moved = true
		}
	}
	for _, name := range order {
		p := panels[name]
		if p.moved || p.waived {
			continue
		}
		problems = append(problems, fmt.Sprintf("panel %q: no query's series changed during the story", name))
	}
	return problems
}

// DashboardTable prints every query's outcome: its panel, how many series
// it returned, and the series that moved the most, first → last value
// (min..max).
func DashboardTable(results []QueryResult) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PANEL\tQUERY\tSERIES\tFIRST → LAST\tMIN..MAX\tCHANGED\tSERIES SHOWN")
	for _, r := range results {
		if r.Err != nil {
			fmt.Fprintf(w, "%s\t%s\t-\t-\t-\t-\t%s\n", truncate(r.Query.Panel, 50), r.Query.RefID, truncate(r.Err.Error(), 80))
			continue
		}
		m := r.Move
		if m.Series == 0 {
			fmt.Fprintf(w, "%s\t%s\t0\t-\t-\tno\t-\n", truncate(r.Query.Panel, 50), r.Query.RefID)
			continue
		}
		changed := "no"
		if m.Changed {
			changed = "yes"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s → %s\t%s..%s\t%s\t%s\n", truncate(r.Query.Panel, 50), r.Query.RefID, m.Series,
			FormatValue(m.First), FormatValue(m.Last), FormatValue(m.Min), FormatValue(m.Max), changed, truncate(m.Label, 60))
	}
	_ = w.Flush()
	return b.String()
}
