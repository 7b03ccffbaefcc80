package sidecar

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestRequestsPastTheBoundAreCountedUntimed: a connection times at most
// maxOutstandingRequests requests, and all connections together
// maxOutstandingBytes of reply subjects (which the applications choose, up
// to 1,024 bytes each); one more is not timed, and the sidecar's counter
// (weighstation_sidecar_requests_untimed_total) says so. A closed
// connection gives its bytes back.
func TestRequestsPastTheBoundAreCountedUntimed(t *testing.T) {
	long := strings.Repeat("r", 1000)
	tests := []struct {
		name  string
		reply func(conn, i int) string
		conns int
		fit   int // requests timed, over all connections
	}{
		{"short reply subjects: by count", func(_, i int) string { return fmt.Sprintf("_INBOX.a.%d", i) }, 1, maxOutstandingRequests},
		{"long reply subjects: by bytes, over connections", func(c, i int) string { return fmt.Sprintf("_INBOX.%s.%d.%d", long, c, i) }, 2,
			maxOutstandingBytes / int(entryBytes(len("_INBOX."+long+".0.0000")))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var untimed atomic.Uint64
			var all atomic.Int64
			conns := make([]*outstanding, tc.conns)
			for c := range conns {
				conns[c] = &outstanding{untimed: &untimed, allBytes: &all}
			}
			now := nanotime()
			for i := range tc.fit {
				conns[i%tc.conns].start(tc.reply(i%tc.conns, 1000+i), now)
			}
			if n := untimed.Load(); n != 0 {
				t.Fatalf("%d untimed at the bound, want 0", n)
			}
			conns[0].start(tc.reply(0, 999), now)
			if n := untimed.Load(); n != 1 || all.Load() > maxOutstandingBytes {
				t.Fatalf("%d untimed past the bound, %d bytes; want 1, at most %d", n, all.Load(), maxOutstandingBytes)
			}
			if _, ok := conns[0].finish(tc.reply(0, 1000)); !ok {
				t.Fatal("a request within the bound is not timed")
			}
			for _, o := range conns {
				o.drop()
			}
			if all.Load() != 0 {
				t.Fatalf("%d bytes held after every connection closed", all.Load())
			}
		})
	}
}

// TestAnswerableIsBoundedByItsReplySubjects: the requests delivered to the
// application are remembered up to maxAnswerableBytes of reply subjects,
// which requesters in other pods choose: past it one more is untracked;
// an answer, and the sweep past ReplyAllowance, give their bytes back.
func TestAnswerableIsBoundedByItsReplySubjects(t *testing.T) {
	a := newAnswerable()
	long := strings.Repeat("q", 1000)
	reply := func(i int) string { return fmt.Sprintf("_INBOX.%s.%05d", long, i) }
	fit := maxAnswerableBytes / int(entryBytes(len(reply(0))))
	now := nanotime()
	for i := range fit {
		a.delivered(reply(i), "p", now)
	}
	a.delivered(reply(fit), "p", now)
	if n := a.untracked.Load(); n != 1 || a.bytes > maxAnswerableBytes {
		t.Fatalf("%d untracked, %d bytes; want 1 past the bound, at most %d", n, a.bytes, maxAnswerableBytes)
	}
	if _, ok := a.answered(reply(0)); !ok {
		t.Fatal("a request within the bound is not remembered")
	}
	a.delivered(reply(fit), "p", now) // its room came back
	if n := a.untracked.Load(); n != 1 {
		t.Fatalf("%d untracked after an answer made room, want still 1", n)
	}
	a.sweep(now+int64(ReplyAllowance)+1, func(string) time.Duration { return 0 }, func(string, time.Duration) {})
	if a.bytes != 0 || a.size.Load() != 0 {
		t.Fatalf("%d bytes, %d requests after the sweep; want none", a.bytes, a.size.Load())
	}
}
