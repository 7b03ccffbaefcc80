package pending_test

import (
	"fmt"
	"testing"

	"github.com/weighstation/weighstation/sidecar/pending"
)

func msg(i int, size int) pending.Message {
	return pending.Message{Subject: fmt.Sprint(i), Data: make([]byte, size)}
}

func TestOverflowPolicies(t *testing.T) {
	tests := []struct {
		name      string
		limits    pending.Limits
		sizes     []int // pushed in order, each with its index as subject
		wantKept  []string
		wantDrops uint64
	}{
		{"drop newest by count", pending.Limits{MaxMessages: 3, MaxBytes: 1 << 20, Overflow: pending.DropNewest}, []int{1, 1, 1, 1, 1}, []string{"0", "1", "2"}, 2},
		{"drop oldest by count", pending.Limits{MaxMessages: 3, MaxBytes: 1 << 20, Overflow: pending.DropOldest}, []int{1, 1, 1, 1, 1}, []string{"2", "3", "4"}, 2},
		{"drop newest by bytes", pending.Limits{MaxMessages: 100, MaxBytes: 10, Overflow: pending.DropNewest}, []int{4, 4, 4, 2}, []string{"0", "1", "3"}, 1},
		{"drop oldest by bytes evicts as many as needed", pending.Limits{MaxMessages: 100, MaxBytes: 10, Overflow: pending.DropOldest}, []int{4, 4, 2, 9}, []string{"3"}, 3},
		{"a message over MaxBytes alone is refused", pending.Limits{MaxMessages: 100, MaxBytes: 10, Overflow: pending.DropOldest}, []int{3, 11, 3}, []string{"0", "2"}, 1},
		{"exactly at both limits", pending.Limits{MaxMessages: 2, MaxBytes: 10, Overflow: pending.DropNewest}, []int{5, 5}, []string{"0", "1"}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := pending.New(tc.limits)
			for i, size := range tc.sizes {
				q.Push(msg(i, size))
			}
			var kept []string
			for {
				m, ok := q.Take()
				if !ok {
					break
				}
				kept = append(kept, m.Subject)
				q.Done(true)
			}
			if fmt.Sprint(kept) != fmt.Sprint(tc.wantKept) {
				t.Fatalf("delivered %v, want %v", kept, tc.wantKept)
			}
			c := q.Counts()
			if c.Dropped[pending.ReasonOverflow] != tc.wantDrops || c.Arrived != uint64(len(tc.sizes)) || !c.Balanced() {
				t.Fatalf("counts %+v: want %d overflow drops of %d arrived, balanced", c, tc.wantDrops, len(tc.sizes))
			}
		})
	}
}

// TestBalanceUnderConcurrency runs a producer and a consumer at once (and a
// closing connection at the end) and checks that the accounting is exact.
func TestBalanceUnderConcurrency(t *testing.T) {
	q := pending.New(pending.Limits{MaxMessages: 64, MaxBytes: 1 << 20, Overflow: pending.DropOldest})
	const total = 100_000
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := range total {
			q.Push(msg(i, 16))
		}
	}()
	taken, failed := 0, 0
	for done := false; !done; {
		select {
		case <-produced:
			done = true
		default:
		}
		if _, ok := q.Take(); ok {
			taken++
			ok := taken%10 != 0 // every tenth write "fails": the connection is closing
			if !ok {
				failed++
			}
			q.Done(ok)
		}
	}
	closed := q.DropAll(pending.ReasonClosed, nil)
	c := q.Counts()
	if !c.Balanced() || c.Arrived != total || c.Pending != 0 || c.InFlight != 0 {
		t.Fatalf("counts %+v after %d taken and %d dropped at close", c, taken, closed)
	}
	if c.Delivered != uint64(taken-failed) || c.Dropped[pending.ReasonClosed] != uint64(failed+closed) {
		t.Fatalf("delivered %d (want %d), closed drops %d (want %d)", c.Delivered, taken-failed, c.Dropped[pending.ReasonClosed], failed+closed)
	}
	if c.Dropped[pending.ReasonOverflow] != uint64(total-taken-closed) {
		t.Fatalf("overflow drops %d, want %d", c.Dropped[pending.ReasonOverflow], total-taken-closed)
	}
}

func TestRingNeverGrowsPastTheLimit(t *testing.T) {
	q := pending.New(pending.Limits{MaxMessages: 5, MaxBytes: 1 << 20, Overflow: pending.DropOldest})
	for i := range 1000 {
		q.Push(msg(i, 1))
		if c := q.Counts(); c.Pending > 5 {
			t.Fatalf("pending %d over the limit of 5", c.Pending)
		}
	}
	var got []string
	for m, ok := q.Take(); ok; m, ok = q.Take() {
		got = append(got, m.Subject)
		q.Done(true)
	}
	if fmt.Sprint(got) != "[995 996 997 998 999]" {
		t.Fatalf("kept %v, want the newest five", got)
	}
}

func TestAClosedQueueCountsLatePushesAsDropped(t *testing.T) {
	q := pending.New(pending.Limits{MaxMessages: 10, MaxBytes: 1 << 20})
	q.Push(msg(0, 1))
	if n := q.Close(pending.ReasonUnsubscribed); n != 1 {
		t.Fatalf("Close dropped %d, want 1", n)
	}
	if q.Push(msg(1, 1)) {
		t.Fatal("a closed queue accepted a message")
	}
	c := q.Counts()
	if c.Arrived != 2 || c.Dropped[pending.ReasonUnsubscribed] != 1 || c.Dropped[pending.ReasonClosed] != 1 || c.Pending != 0 || !c.Balanced() {
		t.Fatalf("counts %+v", c)
	}
}

// TestCloseReasons: what a queue holds when it closes, what is pushed to
// it afterwards and what was in flight and then not written are counted
// for the reason of its closing: closed, except at the sidecar's shutdown;
// the first close decides.
func TestCloseReasons(t *testing.T) {
	tests := []struct {
		name   string
		closes []pending.Reason
		want   [3]pending.Reason // pending, pushed after, in flight unwritten
	}{
		{"the connection closed", []pending.Reason{pending.ReasonClosed}, [3]pending.Reason{pending.ReasonClosed, pending.ReasonClosed, pending.ReasonClosed}},
		{"unsubscribed", []pending.Reason{pending.ReasonUnsubscribed}, [3]pending.Reason{pending.ReasonUnsubscribed, pending.ReasonClosed, pending.ReasonClosed}},
		{"the sidecar shut down", []pending.Reason{pending.ReasonShutdown}, [3]pending.Reason{pending.ReasonShutdown, pending.ReasonShutdown, pending.ReasonShutdown}},
		{"the shutdown, then its connection", []pending.Reason{pending.ReasonShutdown, pending.ReasonClosed}, [3]pending.Reason{pending.ReasonShutdown, pending.ReasonShutdown, pending.ReasonShutdown}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := pending.New(pending.Limits{MaxMessages: 10, MaxBytes: 1 << 20})
			for i := range 3 {
				q.Push(msg(i, 1))
			}
			if _, ok := q.Take(); !ok { // in flight
				t.Fatal("nothing to take")
			}
			var want [pending.ReasonShutdown + 1]uint64
			for _, r := range tc.closes {
				q.Close(r)
			}
			want[tc.want[0]] += 2
			q.Push(msg(3, 1))
			want[tc.want[1]]++
			q.Done(false)
			want[tc.want[2]]++
			c := q.Counts()
			for r := range want {
				if c.Dropped[r] != want[r] {
					t.Errorf("dropped %s: %d, want %d (counts %+v)", pending.Reason(r), c.Dropped[r], want[r], c)
				}
			}
			if !c.Balanced() || c.Arrived != 4 {
				t.Errorf("counts %+v: want 4 arrived, balanced", c)
			}
		})
	}
}

// TestCountsArithmetic: Since keeps only the events after a base snapshot
// (and what is held now), Events leaves out what is held, and Plus adds
// field by field; a queue's spells split at a base add up to its counts.
func TestCountsArithmetic(t *testing.T) {
	base := pending.Counts{Arrived: 5, Delivered: 3, InFlight: 1, Pending: 1, PendingBytes: 10}
	base.Dropped[pending.ReasonOverflow] = 1
	now := pending.Counts{Arrived: 9, Delivered: 6, InFlight: 0, Pending: 1, PendingBytes: 20}
	now.Dropped[pending.ReasonOverflow] = 2
	now.Dropped[pending.ReasonKilled] = 1
	since := now.Since(base)
	want := pending.Counts{Arrived: 4, Delivered: 3, Pending: 1, PendingBytes: 20}
	want.Dropped[pending.ReasonOverflow] = 1
	want.Dropped[pending.ReasonKilled] = 1
	if since != want {
		t.Fatalf("Since = %+v, want %+v", since, want)
	}
	if got := base.Events().Plus(since); got != now {
		t.Fatalf("the spells add up to %+v, want %+v", got, now)
	}
	if e := since.Events(); e.InFlight != 0 || e.Pending != 0 || e.PendingBytes != 0 || e.Arrived != 4 {
		t.Fatalf("Events = %+v", e)
	}
}
