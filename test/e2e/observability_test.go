package e2e

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

func TestDashboardProblems(t *testing.T) {
	moved := Movement{Series: 2, Changed: true, Label: `subscription="a"`, First: 0, Last: 3, Min: 0, Max: 5}
	flat := Movement{Series: 1, Label: "{}", First: 4, Last: 4, Min: 4, Max: 4}
	q := func(panel, ref, expr string, mv Movement, err error) QueryResult {
		return QueryResult{Query: PanelQuery{Panel: panel, RefID: ref, Expr: expr}, Expr: expr, Move: mv, Err: err}
	}
	reconnects := "sum(increase(" + MetricBrokerReconnects + "[10s]))"
	inDoubt := "sum(increase(" + MetricBrokerInDoubt + "[10s]))"
	drops := "sum by (reason) (rate(" + MetricDropped + "[10s]))"
	budget := "max by (pod) (" + MetricPendingBytes + " / weighstation_sidecar_memory_budget_bytes)"
	for _, tc := range []struct {
		name    string
		results []QueryResult
		unmet   []Condition
		want    []string // a substring of each problem, in order
	}{
		{"every panel moved", []QueryResult{q("a", "A", "x", moved, nil), q("b", "A", "y", moved, nil)}, nil, nil},
		{"a panel moves by one of its queries", []QueryResult{q("a", "A", "x", moved, nil), q("a", "B", "nacks", flat, nil)}, nil, nil},
		{"a flat panel", []QueryResult{q("a", "A", "x", moved, nil), q("b", "A", "y", flat, nil)}, nil, []string{`panel "b": no query's series changed`}},
		{"a query without a series", []QueryResult{q("a", "A", "x", moved, nil), q("a", "B", "y", Movement{}, nil)}, nil, []string{`"a" B returned no series: y`}},
		{"a query Prometheus refused", []QueryResult{q("a", "A", "x", Movement{}, errors.New("parse error"))}, nil,
			[]string{`"a" A: parse error`, `panel "a": no query's series changed`}},
		{"no broker fault", []QueryResult{q("link", "A", reconnects, flat, nil), q("link", "B", inDoubt, flat, nil)}, []Condition{BrokerFault}, nil},
		{"a broker fault", []QueryResult{q("link", "A", reconnects, flat, nil), q("link", "B", inDoubt, flat, nil)}, nil, []string{`panel "link": no query's series changed`}},
		{"a broker fault, reconnects moved", []QueryResult{q("link", "A", reconnects, moved, nil), q("link", "B", inDoubt, flat, nil)}, nil, nil},
		{"no stalled consumer", []QueryResult{q("drops", "A", drops, flat, nil), q("budget", "A", budget, flat, nil)}, []Condition{StalledConsumer}, nil},
		{"a stalled consumer", []QueryResult{q("drops", "A", drops, flat, nil), q("budget", "A", budget, moved, nil)}, nil, []string{`panel "drops": no query's series changed`}},
		{"another condition waives nothing", []QueryResult{q("drops", "A", drops, flat, nil)}, []Condition{BrokerFault}, []string{`panel "drops"`}},
		{"waived panels must still return series", []QueryResult{q("link", "A", reconnects, Movement{}, nil)}, []Condition{BrokerFault}, []string{"returned no series"}},
		{"a panel reading more than conditional metrics must move", []QueryResult{q("mixed", "A", reconnects, flat, nil), q("mixed", "B", "up", flat, nil)}, []Condition{BrokerFault},
			[]string{`panel "mixed": no query's series changed`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := DashboardProblems(tc.results, tc.unmet)
			if len(got) != len(tc.want) {
				t.Fatalf("problems %q, want %d: %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d %q, want one with %q", i, got[i], w)
				}
			}
		})
	}
}

func TestDashboardTable(t *testing.T) {
	out := DashboardTable([]QueryResult{
		{Query: PanelQuery{Panel: "Messages delivered per second, by Subscription", RefID: "A"}, Move: Movement{Series: 3, Changed: true, Label: `subscription="e2e-rpc"`, First: 50, Last: 49.5, Min: 0, Max: 50.2}},
		{Query: PanelQuery{Panel: "empty", RefID: "A"}},
		{Query: PanelQuery{Panel: "refused", RefID: "B"}, Err: errors.New("bad_data: parse error")},
	})
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "PANEL") {
		t.Fatalf("table:\n%s", out)
	}
	for i, want := range [][]string{
		{"Messages delivered per second, by Subscription", " 3 ", "50 → 49.5", "0..50.2", "yes", `subscription="e2e-rpc"`},
		{"empty", " 0 ", "no"},
		{"refused", "bad_data: parse error"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("line %q lacks %q", lines[i+1], w)
			}
		}
	}
}

func TestObserveManifests(t *testing.T) {
	m := testManifests()
	probes := ObserveProbes()
	if len(probes) != 2 || probes[0].Role != "subscriber" || probes[1].Role != "publisher" {
		t.Fatalf("probes %+v: want a subscriber and a publisher", probes)
	}
	for _, p := range probes {
		// Their subject is under e2e.>, which the Topic e2e lets every pod
		// publish on.
		if !p.Inject || !slices.Contains(p.Args, "-subject="+SubjectObserve) || !strings.HasPrefix(SubjectObserve, "e2e.") {
			t.Errorf("probe %+v: want it injected, on %s", p, SubjectObserve)
		}
		if _, err := m.Probe(p); err != nil {
			t.Errorf("probe %s: %v", p.Name, err)
		}
	}
	docs := decodeDocs(t, m.ObserveSubscription())
	if len(docs) != 1 {
		t.Fatalf("%d documents", len(docs))
	}
	var sub v1alpha1.Subscription
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(docs[0].Object, &sub); err != nil {
		t.Fatal(err)
	}
	if sub.Name != SubscriptionObserve || sub.Namespace != "e2e-apps" || sub.Spec.Subject != SubjectObserve ||
		sub.Spec.Selector.MatchLabels["app"] != PodObserveSubscriber || sub.Spec.Limits.MaxPendingMessages != ObserveMaxPending {
		t.Errorf("Subscription %+v", sub)
	}
}
