// Package probestats is what the end-to-end probe (test/e2e/probe)
// reports and how the end-to-end stories read it: the JSON of one
// report, the line it is printed on, and the pure bookkeeping both sides
// share (sequence gaps, request outcome transitions, losses per time
// window). It imports nothing but the standard library, so the probe
// stays a small static binary.
package probestats

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// LinePrefix starts every report line the probe prints to stdout, so that
// a reader can pick the reports out of `kubectl logs` between other lines.
const LinePrefix = "PROBE "

// Roles of the probe, its first argument.
const (
	RolePublisher  = "publisher"
	RoleSubscriber = "subscriber"
	RoleRequester  = "requester"
	RoleResponder  = "responder"
	// RoleIdle connects to nothing: a pod that must become Ready without a
	// sidecar (after the chart is uninstalled).
	RoleIdle = "idle"
)

// Stats is one report of a probe: the counters of its role since it
// started. Times are wall-clock UnixNano of the probe's node, so that the
// stories can compare them with their own clock (exact on a single node).
type Stats struct {
	Role    string `json:"role"`
	ID      string `json:"id"`
	Subject string `json:"subject,omitempty"`
	Queue   string `json:"queue,omitempty"`

	StartedUnixNano int64 `json:"startedUnixNano"`
	// AtUnixNano is when this report was taken.
	AtUnixNano int64 `json:"atUnixNano"`
	// Final is set on the report printed at exit.
	Final bool `json:"final,omitempty"`

	// Connection to the pod's sidecar.
	Connected       bool   `json:"connected"`
	ConnectAttempts int64  `json:"connectAttempts"`
	Disconnects     int64  `json:"disconnects"`
	Reconnects      int64  `json:"reconnects"`
	AsyncErrors     int64  `json:"asyncErrors"`
	LastAsyncError  string `json:"lastAsyncError,omitempty"`

	Publisher  *PublisherStats  `json:"publisher,omitempty"`
	Subscriber *SubscriberStats `json:"subscriber,omitempty"`
	Requester  *RequesterStats  `json:"requester,omitempty"`
	Responder  *ResponderStats  `json:"responder,omitempty"`
}

// PublisherStats counts an open-loop publisher's messages. Every attempt
// takes the next sequence number, failed or not, so that a subscriber sees
// a failed publish as a gap: Published = Seq of the last attempt.
type PublisherStats struct {
	RatePerSecond float64 `json:"ratePerSecond"`
	// Run identifies this process's sequence (its start time): a restarted
	// publisher begins a new run at 1.
	Run       int64 `json:"run"`
	Published int64 `json:"published"`
	// PublishErrors are errors nats.go returned from Publish (connection
	// closed, reconnect buffer full).
	PublishErrors    int64  `json:"publishErrors"`
	LastPublishError string `json:"lastPublishError,omitempty"`
	// Refusals are the sidecar's -ERR for a publish (a Permissions
	// Violation: size, rate, access, broker unavailable), reported by
	// nats.go's asynchronous error handler.
	Refusals    int64  `json:"refusals"`
	LastRefusal string `json:"lastRefusal,omitempty"`
	// MaxBehind is the most publishes that were due at once (the ticker
	// fell behind and the publisher caught up).
	MaxBehind int64 `json:"maxBehind"`
}

// SubscriberStats is what a subscriber saw of every publisher's sequence.
type SubscriberStats struct {
	Received int64 `json:"received"`
	// Lost is the number of sequence numbers still missing: gaps less the
	// late arrivals that filled them.
	Lost       int64 `json:"lost"`
	Duplicates int64 `json:"duplicates"`
	OutOfOrder int64 `json:"outOfOrder"`
	// Restarts counts new runs of a publisher already seen.
	Restarts int64 `json:"restarts"`
	// Malformed counts payloads that are not the probe's.
	Malformed int64 `json:"malformed"`
	// SubscribeRefusals are the sidecar's Permissions Violations for the
	// subscription (no Subscription covers it yet); each is followed by a
	// resubscription.
	SubscribeRefusals int64 `json:"subscribeRefusals"`
	Resubscribes      int64 `json:"resubscribes"`
	// SlowConsumer counts nats.go's own drops (it should never drop: the
	// probe lifts its pending limits).
	SlowConsumer int64 `json:"slowConsumer"`
	// Pause is what POST /pause held back: while paused the subscriber
	// reads nothing from its socket, so messages wait in its sidecar.
	Pause      PauseStats               `json:"pause"`
	Publishers map[string]PublisherSeen `json:"publishers,omitempty"`
	// Gaps are the losses as they were detected, oldest first, at most
	// MaxGaps (GapsDropped counts the oldest ones let go).
	Gaps        []Gap `json:"gaps,omitempty"`
	GapsDropped int64 `json:"gapsDropped,omitempty"`
}

// PublisherSeen is one publisher's sequence as a subscriber saw it.
type PublisherSeen struct {
	Run      int64  `json:"run"`
	Highest  uint64 `json:"highest"`
	Received int64  `json:"received"`
	Lost     int64  `json:"lost"`
}

// Gap is a run of missing sequence numbers, found when a later one
// arrived: Count numbers from First, detected at DetectedUnixNano;
// Recovered of them arrived late (out of order) after all.
type Gap struct {
	DetectedUnixNano int64  `json:"detectedUnixNano"`
	Publisher        string `json:"publisher"`
	First            uint64 `json:"first"`
	Count            int64  `json:"count"`
	Recovered        int64  `json:"recovered,omitempty"`
}

// Lost is what of the gap is still missing.
func (g Gap) Lost() int64 { return g.Count - g.Recovered }

// Outcome is how a request ended.
type Outcome string

const (
	OutcomeOK Outcome = "ok"
	// OutcomeFastFailure is a "no responders" answer (nats.ErrNoResponders)
	// within the timeout: nobody subscribes, e.g. the kill switch withdrew
	// the responder's interest.
	OutcomeFastFailure Outcome = "fast-failure"
	OutcomeTimeout     Outcome = "timeout"
	OutcomeOther       Outcome = "other"
)

// RequesterStats counts a requester's outcomes and when it went from
// answered to failing fast and back.
type RequesterStats struct {
	IntervalNanos int64  `json:"intervalNanos"`
	TimeoutNanos  int64  `json:"timeoutNanos"`
	Sent          int64  `json:"sent"`
	OK            int64  `json:"ok"`
	FastFailures  int64  `json:"fastFailures"`
	Timeouts      int64  `json:"timeouts"`
	OtherErrors   int64  `json:"otherErrors"`
	LastError     string `json:"lastError,omitempty"`
	// LastOKUnixNano and LastFastFailureUnixNano are the completion times
	// of the latest of each.
	LastOKUnixNano          int64 `json:"lastOkUnixNano,omitempty"`
	LastFastFailureUnixNano int64 `json:"lastFastFailureUnixNano,omitempty"`
	// Transitions between ok and fast-failure, oldest first, at most
	// MaxTransitions (TransitionsDropped counts the oldest ones let go).
	Transitions        []Transition `json:"transitions,omitempty"`
	TransitionsDropped int64        `json:"transitionsDropped,omitempty"`
}

// Transition is the first request of an outcome after requests of the
// other (ok ↔ fast-failure; timeouts and other errors change nothing).
// From is empty for the first outcome seen.
type Transition struct {
	From Outcome `json:"from,omitempty"`
	To   Outcome `json:"to"`
	// AtUnixNano is when its outcome was known (the reply, or the
	// no-responders status, arrived); SentUnixNano when it was sent.
	AtUnixNano   int64 `json:"atUnixNano"`
	SentUnixNano int64 `json:"sentUnixNano"`
}

// ResponderStats counts a responder's answers.
type ResponderStats struct {
	Requests          int64  `json:"requests"`
	Answered          int64  `json:"answered"`
	AnswerErrors      int64  `json:"answerErrors"`
	LastAnswerError   string `json:"lastAnswerError,omitempty"`
	SubscribeRefusals int64  `json:"subscribeRefusals"`
	Resubscribes      int64  `json:"resubscribes"`
}

// FormatLine is the line a probe prints for s: LinePrefix and its JSON.
func FormatLine(s Stats) (string, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("encoding the probe's stats: %w", err)
	}
	return LinePrefix + string(b), nil
}

// ParseLine reads one report line (with or without a kubectl timestamp or
// other text before LinePrefix).
func ParseLine(line string) (Stats, error) {
	i := strings.Index(line, LinePrefix)
	if i < 0 {
		return Stats{}, fmt.Errorf("not a probe report (no %q): %.80q", LinePrefix, line)
	}
	return Parse([]byte(line[i+len(LinePrefix):]))
}

// Parse reads a report's JSON, as /stats serves it.
func Parse(b []byte) (Stats, error) {
	var s Stats
	if err := json.Unmarshal(b, &s); err != nil {
		return Stats{}, fmt.Errorf("decoding the probe's stats: %w", err)
	}
	if err := s.Validate(); err != nil {
		return Stats{}, fmt.Errorf("decoding the probe's stats: %w", err)
	}
	return s, nil
}

// Validate checks that a report has its role's counters, so that a reader
// may use them without checking for nil.
func (s Stats) Validate() error {
	missing := false
	switch s.Role {
	case "":
		return errors.New("no role")
	case RolePublisher:
		missing = s.Publisher == nil
	case RoleSubscriber:
		missing = s.Subscriber == nil
	case RoleRequester:
		missing = s.Requester == nil
	case RoleResponder:
		missing = s.Responder == nil
	}
	if missing {
		return fmt.Errorf("a %s's report without its %s counters", s.Role, s.Role)
	}
	return nil
}

// LastReport finds the last report line in text (a container's log).
func LastReport(text string) (Stats, error) {
	lines := strings.Split(text, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], LinePrefix) {
			return ParseLine(lines[i])
		}
	}
	return Stats{}, errors.New("no probe report in the log")
}
