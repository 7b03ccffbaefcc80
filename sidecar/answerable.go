package sidecar

import (
	"sync/atomic"
	"time"
)

// Requests delivered to the application, until it answers them. The sidecar
// sees both the request it writes to the application and the reply the
// application publishes, so it can time the application's answers on one
// clock (for the automatic kill switch) and allow exactly one reply to a
// request the pod received (for the publish ACL).
const (
	// maxAnswerable and maxAnswerableBytes bound the requests remembered
	// at once, by count and by the bytes of their reply subjects (which
	// requesters choose, up to 1,024 bytes each); past either, new
	// requests are not remembered (counted as untracked): their replies
	// are not timed, and they get no reply allowance. 8 MiB holds 65,536
	// requests with nats.go's reply subjects.
	maxAnswerable      = 100_000
	maxAnswerableBytes = 8 << 20
	// ReplyAllowance is how long after a request's delivery the pod may
	// publish its one reply to the request's reply subject when the ACL
	// would otherwise refuse it. nats.go's requests rarely wait this long.
	ReplyAllowance = time.Minute
)

type answerEntry struct {
	policy    string // the Subscription policy of the SUB it was delivered to
	delivered int64  // nanotime of the write to the application
	late      bool   // already counted as unanswered in time
}

// answerable is the table of requests waiting for the application's reply.
type answerable struct {
	size      atomic.Int64 // len(byReply), read without the lock on every publish
	untracked atomic.Uint64

	mu      mutex[answerableRank]
	byReply subjectMap[answerEntry]
	bytes   int64 // entryBytes of byReply's entries
}

func newAnswerable() *answerable { return &answerable{} }

// delivered remembers that a request with this reply subject was written to
// the application.
func (a *answerable) delivered(reply, policy string, at int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.byReply.get(reply); !ok {
		if a.byReply.len() >= maxAnswerable || a.bytes+entryBytes(len(reply)) > maxAnswerableBytes {
			a.untracked.Add(1)
			return
		}
		a.bytes += entryBytes(len(reply))
	}
	a.byReply.set(reply, answerEntry{policy: policy, delivered: at})
	a.size.Store(int64(a.byReply.len()))
}

// has reports whether a request with this reply subject waits for the
// application's answer.
func (a *answerable) has(reply string) bool {
	if a.size.Load() == 0 {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.byReply.get(reply)
	return ok
}

// answered takes the request a publish to subject answers, once.
func (a *answerable) answered(subject string) (answerEntry, bool) {
	if a.size.Load() == 0 {
		return answerEntry{}, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.byReply.take(subject)
	if ok {
		a.bytes -= entryBytes(len(subject))
		a.size.Store(int64(a.byReply.len()))
	}
	return e, ok
}

// sweep reports requests that are unanswered past their policy's latency
// threshold (once each, as late) and forgets those past ReplyAllowance.
func (a *answerable) sweep(now int64, lateAfter func(policy string) time.Duration, late func(policy string, age time.Duration)) {
	if a.size.Load() == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.bytes -= a.byReply.retain(func(e answerEntry) (answerEntry, bool) {
		age := time.Duration(now - e.delivered)
		if age > ReplyAllowance {
			return e, false
		}
		if !e.late {
			if limit := lateAfter(e.policy); limit > 0 && age > limit {
				late(e.policy, age)
				e.late = true
			}
		}
		return e, true
	})
	a.size.Store(int64(a.byReply.len()))
}
