package sidecar

import (
	"sync/atomic"

	"github.com/weighstation/weighstation/sidecar/latency"
)

// telemetry is what the sidecar counts and times besides its queues' own
// counts (pending.Counts), the Topics' counters (policy.Counters) and the
// ACL's verdicts (access.go): read by the metrics, /debug/latency and the
// status reports. Every field is safe for concurrent use.
type telemetry struct {
	// invalid counts PUBs and SUBs refused before any policy: an invalid
	// subject or pattern, or a header block that does not parse.
	invalid atomic.Uint64
	// requestsUntimed counts the application's requests not timed because
	// its connection already timed maxOutstandingRequests, or all of them
	// maxOutstandingBytes; requestBytes is what all connections' requests
	// hold.
	requestsUntimed atomic.Uint64
	requestBytes    atomic.Int64
	// strippedStamps counts reserved headers (StampHeader, OriginHeader)
	// that applications supplied.
	strippedStamps atomic.Uint64
	// refusedConnections counts connections over MaxConnections.
	refusedConnections atomic.Uint64
	// bodiesRefused counts PUB and HPUB bodies skipped unread because the
	// memory budget had no room for them within ReadBudgetWait.
	bodiesRefused atomic.Uint64
	// repliesAllowed counts replies the ACL let through as replies;
	// repliesOutsideInbox the replies it judged by the publish rules
	// because their reply subject lay outside every inbox space.
	repliesAllowed, repliesOutsideInbox atomic.Uint64
	// subsRefusedMax and subsRefusedMemory count SUBs refused past
	// MaxSubscriptions, and for want of room in the memory budget.
	subsRefusedMax, subsRefusedMemory atomic.Uint64
	// inboxPending counts requests refused because the pod's inbox space
	// was not known yet (its credential had not arrived).
	inboxPending atomic.Uint64
	// noRespondersSent counts the sidecar's own "no responders" answers to
	// requests it dropped as killed; noRespondersReceived counts those the
	// application's requests got (from the broker or a sidecar).
	noRespondersSent, noRespondersReceived atomic.Uint64
	// noRespondersUnsent counts those answers the upstream connection
	// refused (the broker was away and the outage buffer full).
	noRespondersUnsent atomic.Uint64
	// inlineWrites and writerWrites count the writes to applications by
	// who made them (AppWrites).
	inlineWrites, writerWrites atomic.Uint64

	// requestLatency times the application's requests, arrival to reply.
	requestLatency *latency.Recorder

	latencyMu mutex[latencyRank]
	latency   map[string]*latencies // by Subscription policy name ("" for SUBs none covers)
}

func newTelemetry() telemetry {
	return telemetry{requestLatency: latency.NewRecorder(), latency: map[string]*latencies{}}
}

// latencies are the distributions of one Subscription policy in this pod.
type latencies struct {
	Dwell    *latency.Recorder // arrival in this sidecar to the write to the application
	EndToEnd *latency.Recorder // the publishing sidecar's receive to this sidecar's write
}

// latenciesFor returns a policy's recorders. There is one set per
// Subscription of the configuration (and one for SUBs none covers), so
// their memory is bounded by the configuration, not by the SUBs.
func (t *telemetry) latenciesFor(policyName string) *latencies {
	t.latencyMu.Lock()
	defer t.latencyMu.Unlock()
	l := t.latency[policyName]
	if l == nil {
		l = &latencies{Dwell: latency.NewRecorder(), EndToEnd: latency.NewRecorder()}
		t.latency[policyName] = l
	}
	return l
}

// Latency snapshots the distributions by Subscription policy name.
func (t *telemetry) Latency() map[string][2]latency.Snapshot {
	t.latencyMu.Lock()
	defer t.latencyMu.Unlock()
	out := make(map[string][2]latency.Snapshot, len(t.latency))
	for name, l := range t.latency {
		out[name] = [2]latency.Snapshot{l.Dwell.Snapshot(), l.EndToEnd.Snapshot()}
	}
	return out
}

// RequestLatency snapshots the application's request latencies.
func (t *telemetry) RequestLatency() latency.Snapshot { return t.requestLatency.Snapshot() }

// AppWrites counts the writes to applications' sockets: those the upstream
// reader made inline, and those the connections' writer goroutines made.
func (t *telemetry) AppWrites() (inline, byWriter uint64) {
	return t.inlineWrites.Load(), t.writerWrites.Load()
}

// BodiesRefused is the number of PUB and HPUB bodies skipped unread
// because the memory budget had no room for them within ReadBudgetWait.
func (t *telemetry) BodiesRefused() uint64 { return t.bodiesRefused.Load() }

// SubscriptionsRefused is the number of SUBs refused past
// MaxSubscriptions, and for want of room in the memory budget.
func (t *telemetry) SubscriptionsRefused() (maxSubscriptions, memoryBudget uint64) {
	return t.subsRefusedMax.Load(), t.subsRefusedMemory.Load()
}

// InboxPending is the number of requests refused because the pod's inbox
// space was not known yet.
func (t *telemetry) InboxPending() uint64 { return t.inboxPending.Load() }

// Invalid is the number of PUBs and SUBs refused for an invalid subject,
// pattern or header block.
func (t *telemetry) Invalid() uint64 { return t.invalid.Load() }

// StrippedStamps is the number of reserved headers (StampHeader,
// OriginHeader) removed from applications' messages.
func (t *telemetry) StrippedStamps() uint64 { return t.strippedStamps.Load() }

// EchoSuppressed is the number of messages not delivered back to the
// connection that published them, because it asked for echo:false.
func (s *Server) EchoSuppressed() uint64 { return s.router.echoSuppressed.Load() }
