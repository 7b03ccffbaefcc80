package probestats

import "time"

// MaxTransitions is the most transitions a RequesterStats keeps.
const MaxTransitions = 1000

// OutcomeRecorder counts a requester's outcomes and records when requests
// went from answered to failing fast and back. Requests complete out of
// order (the requester does not wait for one before it sends the next),
// so outcomes are recorded in the order they became known. It is not safe
// for concurrent use.
type OutcomeRecorder struct {
	stats RequesterStats
	state Outcome // the last of ok and fast-failure seen; empty at first
}

// NewOutcomeRecorder returns a recorder for requests sent every interval,
// each waiting at most timeout.
func NewOutcomeRecorder(interval, timeout time.Duration) *OutcomeRecorder {
	return &OutcomeRecorder{stats: RequesterStats{IntervalNanos: int64(interval), TimeoutNanos: int64(timeout)}}
}

// Sent counts a request sent.
func (r *OutcomeRecorder) Sent() { r.stats.Sent++ }

// Record adds a request sent at sent whose outcome o was known at done;
// errText is its error, if any.
func (r *OutcomeRecorder) Record(o Outcome, sent, done time.Time, errText string) {
	switch o {
	case OutcomeOK:
		r.stats.OK++
		r.stats.LastOKUnixNano = done.UnixNano()
	case OutcomeFastFailure:
		r.stats.FastFailures++
		r.stats.LastFastFailureUnixNano = done.UnixNano()
	case OutcomeTimeout:
		r.stats.Timeouts++
	default:
		r.stats.OtherErrors++
	}
	if errText != "" {
		r.stats.LastError = errText
	}
	if (o != OutcomeOK && o != OutcomeFastFailure) || o == r.state {
		return
	}
	r.stats.Transitions = append(r.stats.Transitions, Transition{From: r.state, To: o, AtUnixNano: done.UnixNano(), SentUnixNano: sent.UnixNano()})
	if len(r.stats.Transitions) > MaxTransitions {
		r.stats.Transitions = r.stats.Transitions[1:]
		r.stats.TransitionsDropped++
	}
	r.state = o
}

// Stats returns a copy of what was recorded so far.
func (r *OutcomeRecorder) Stats() RequesterStats {
	s := r.stats
	s.Transitions = append([]Transition(nil), r.stats.Transitions...)
	return s
}
