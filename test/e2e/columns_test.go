package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

// subscriptionCRD is the part of the generated CRD the helpers read: its
// printer columns, as in config/crd/bases.
const subscriptionCRD = `{"metadata":{"name":"subscriptions.weighstation.io"},"spec":{"versions":[{"name":"v1alpha1","served":true,"storage":true,
"additionalPrinterColumns":[
{"jsonPath":".spec.subject","name":"SUBJECT","type":"string"},
{"jsonPath":".status.killed","name":"KILLED","type":"string"},
{"jsonPath":".status.config.totalPods","name":"PODS","type":"integer"},
{"jsonPath":".status.aggregate.p99","name":"P99","type":"string"},
{"jsonPath":".status.aggregate.p999","name":"P99.9","type":"string"},
{"jsonPath":".status.aggregate.max","name":"MAX","type":"string"},
{"jsonPath":".status.dropped","name":"DROPPED","type":"integer"},
{"jsonPath":".status.conditions[?(@.type==\"Ready\")].status","name":"READY","type":"string"}]}]}}`

const reportedSubscription = `{"metadata":{"name":"e2e-stream"},"spec":{"subject":"e2e.stream"},"status":{
"conditions":[{"type":"Valid","status":"True"},{"type":"Ready","status":"True"}],
"config":{"totalPods":1,"appliedPods":1},
"aggregate":{"p50":"200µs","p90":"300µs","p99":"635µs","p999":"2.239ms","p9999":"3ms","max":"8.255ms","count":1200,"delivered":1200,
"dropped":[{"reason":"overflow","count":2}],"pods":1,"windowStart":"2026-11-29T00:00:00Z","window":"1m0s"},
"dropped":2}}`

func decodeSubscription(t *testing.T, s string) (map[string]any, v1alpha1.Subscription) {
	t.Helper()
	var obj map[string]any
	var sub v1alpha1.Subscription
	if err := json.Unmarshal([]byte(s), &obj); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(s), &sub); err != nil {
		t.Fatal(err)
	}
	return obj, sub
}

func TestReportedStatus(t *testing.T) {
	cols, err := PrinterColumns([]byte(subscriptionCRD))
	if err != nil {
		t.Fatal(err)
	}
	obj, sub := decodeSubscription(t, reportedSubscription)
	values, err := EvaluateColumns(cols, obj)
	if err != nil {
		t.Fatal(err)
	}
	if values["P99"] != "635µs" || values["READY"] != "True" || values["DROPPED"] != "2" || values["KILLED"] != "" || values["PODS"] != "1" {
		t.Fatalf("columns %v", values)
	}
	if why := ReportedStatus(values, sub, true); why != "" {
		t.Fatalf("a reported Subscription: %s", why)
	}

	// Before any report: no aggregate, READY not yet True.
	obj, sub = decodeSubscription(t, `{"metadata":{"name":"x"},"spec":{"subject":"e2e.stream"},"status":{"conditions":[{"type":"Ready","status":"False"}]}}`)
	values, _ = EvaluateColumns(cols, obj)
	why := ReportedStatus(values, sub, true)
	if !strings.Contains(why, "READY is \"False\"") || !strings.Contains(why, "no report yet") {
		t.Fatalf("an unreported Subscription: %q", why)
	}

	// A report without traffic fills the columns but measures nothing.
	obj, sub = decodeSubscription(t, strings.Replace(strings.Replace(reportedSubscription, `"count":1200`, `"count":0`, 1), `"dropped":2`, `"dropped":5`, 1))
	values, _ = EvaluateColumns(cols, obj)
	if why := ReportedStatus(values, sub, false); !strings.Contains(why, "DROPPED \"5\" disagrees") {
		t.Fatalf("DROPPED disagreeing: %q", why)
	}
	if why := ReportedStatus(values, sub, true); !strings.Contains(why, "aggregate.count 0") {
		t.Fatalf("no traffic: %q", why)
	}
	if why := ReportedStatus(map[string]string{"P99": "1ms"}, sub, false); !strings.Contains(why, "no column") {
		t.Fatalf("missing columns: %q", why)
	}
}
