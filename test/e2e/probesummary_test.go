package e2e

import (
	"strings"
	"testing"

	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

func TestFormatProbeSummary(t *testing.T) {
	line, ok := FormatProbeSummary(probestats.Stats{Role: "subscriber", ID: "sub", Connected: true, Subscriber: &probestats.SubscriberStats{Received: 10, Lost: 2}})
	if !ok || !strings.Contains(line, "received 10, lost 2") {
		t.Fatalf("%q %v", line, ok)
	}
	line, _ = FormatProbeSummary(probestats.Stats{Role: "requester", ID: "req", Requester: &probestats.RequesterStats{OK: 3}})
	if !strings.Contains(line, "now no answer yet") {
		t.Fatalf("%q", line)
	}
	if _, ok := FormatProbeSummary(probestats.Stats{Role: "publisher"}); ok {
		t.Fatal("a publisher's report without its counters passed as one")
	}
}
