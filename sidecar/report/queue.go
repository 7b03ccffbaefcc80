package report

import (
	"slices"
	"sync"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
)

// queue holds the reports built and not yet acknowledged, oldest first, at
// most max of them. A report in it is never changed: a resend is the same
// message.
type queue struct {
	mu      sync.Mutex
	max     int
	reports []*queued
	// added wakes the stream when a report is queued (1-buffered: a wake
	// that finds the stream busy is not lost, and one is enough).
	added chan struct{}
	// removed wakes Flush when a report leaves the queue (1-buffered
	// likewise).
	removed chan struct{}
}

type queued struct {
	report *xdsv1.Report
	sends  int // under queue.mu
}

func newQueue(max int) *queue {
	return &queue{max: max, added: make(chan struct{}, 1), removed: make(chan struct{}, 1)}
}

// push adds a report and returns the oldest one if that made the queue
// overflow: that one is dropped, unacknowledged.
func (q *queue) push(r *xdsv1.Report) (dropped *xdsv1.Report) {
	q.mu.Lock()
	q.reports = append(q.reports, &queued{report: r})
	if len(q.reports) > q.max {
		dropped = q.reports[0].report
		q.reports[0] = nil
		q.reports = q.reports[1:]
	}
	q.mu.Unlock()
	select {
	case q.added <- struct{}{}:
	default:
	}
	return dropped
}

// after returns the reports numbered after sequence, oldest first: those a
// stream has not sent yet.
func (q *queue) after(sequence uint64) []*queued {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []*queued
	for _, e := range q.reports {
		if e.report.GetSequence() > sequence {
			out = append(out, e)
		}
	}
	return out
}

// sent counts a send of e and reports whether it was a resend.
func (q *queue) sent(e *queued) (resend bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	e.sends++
	return e.sends > 1
}

// ack removes the report numbered sequence and reports whether it was
// there (a report dropped meanwhile is not).
func (q *queue) ack(sequence uint64) bool {
	return q.remove(func(r *xdsv1.Report) bool { return r.GetSequence() == sequence }) != nil
}

// dropOldestSent removes the oldest report numbered at most sequence: the
// one a stream sent first and got no acknowledgement for.
func (q *queue) dropOldestSent(sequence uint64) *xdsv1.Report {
	return q.remove(func(r *xdsv1.Report) bool { return r.GetSequence() <= sequence })
}

// remove removes the oldest report that matches and returns it.
func (q *queue) remove(match func(*xdsv1.Report) bool) *xdsv1.Report {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, e := range q.reports {
		if match(e.report) {
			q.reports = slices.Delete(q.reports, i, i+1)
			select {
			case q.removed <- struct{}{}:
			default:
			}
			return e.report
		}
	}
	return nil
}

// len is the number of reports waiting.
func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.reports)
}
