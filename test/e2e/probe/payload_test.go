package main

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

func TestPayloadRoundTrip(t *testing.T) {
	m := message{ID: "pub-1", Run: 1764370000000000000, Seq: 42, SentNano: 1764370000123456789}
	for _, size := range []int{0, 10, 200} {
		b := encode(m, size)
		if size > 60 && len(b) != size {
			t.Fatalf("size %d: payload of %d bytes", size, len(b))
		}
		got, err := decode(b)
		if err != nil || got != m {
			t.Fatalf("size %d: decode(%q) = %+v, %v; want %+v", size, b, got, err, m)
		}
	}
	for _, bad := range []string{"", "hello", "probe/v1 a 1 x 3", "probe/v1 a 1 0 3", "other/v1 a 1 2 3"} {
		if _, err := decode([]byte(bad)); !errors.Is(err, errNotProbe) {
			t.Errorf("decode(%q) = %v, want errNotProbe", bad, err)
		}
	}
}

func TestClassifyRefusal(t *testing.T) {
	for _, c := range []struct {
		text    string
		kind    refusalKind
		subject string
	}{
		{`nats: permissions violation: Permissions Violation for Subscription to "e2e.stream": no Subscription of the pod covers it`, refusedSubscription, "e2e.stream"},
		{`nats: permissions violation: Permissions Violation for Publish to "e2e.stream": the broker is unavailable`, refusedPublish, "e2e.stream"},
		{`nats: permissions violation: something else`, refusedPublish, ""},
		{`nats: slow consumer, messages dropped`, notRefusal, ""},
	} {
		kind, subject := classifyRefusal(c.text)
		if kind != c.kind || subject != c.subject {
			t.Errorf("classifyRefusal(%q) = %v %q, want %v %q", c.text, kind, subject, c.kind, c.subject)
		}
	}
}

func TestOutcomeOf(t *testing.T) {
	const timeout = 200 * time.Millisecond
	for _, c := range []struct {
		err  error
		took time.Duration
		want probestats.Outcome
	}{
		{nil, time.Millisecond, probestats.OutcomeOK},
		{nats.ErrNoResponders, 2 * time.Millisecond, probestats.OutcomeFastFailure},
		{nats.ErrNoResponders, timeout, probestats.OutcomeTimeout},
		{nats.ErrTimeout, timeout, probestats.OutcomeTimeout},
		{nats.ErrConnectionClosed, time.Millisecond, probestats.OutcomeOther},
	} {
		if got := outcomeOf(c.err, c.took, timeout); got != c.want {
			t.Errorf("outcomeOf(%v, %s) = %s, want %s", c.err, c.took, got, c.want)
		}
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags("publisher", []string{"-subject", "e2e.stream", "-rate", "200", "-id", "pub"})
	if err != nil || o.rate != 200 || o.id != "pub" || o.natsURL != "nats://127.0.0.1:4222" || o.statsListen != ":8080" {
		t.Fatalf("parseFlags = %+v, %v", o, err)
	}
	for _, bad := range [][]string{
		{"publisher", "-rate", "10"},                      // no subject
		{"publisher", "-subject", "s", "-rate", "0"},      // no rate
		{"requester", "-subject", "s", "-interval", "0s"}, // no interval
		{"juggler", "-subject", "s"},                      // no such role
	} {
		if _, err := parseFlags(bad[0], bad[1:]); err == nil {
			t.Errorf("parseFlags(%q) accepted it", bad)
		}
	}
	if _, err := parseFlags("idle", nil); err != nil {
		t.Errorf("parseFlags(idle) = %v", err)
	}
}
