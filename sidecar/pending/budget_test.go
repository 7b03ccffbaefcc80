package pending_test

import (
	"testing"

	"github.com/weighstation/weighstation/sidecar/pending"
)

func TestBudgetShedsNonEssentialFirst(t *testing.T) {
	budget := pending.NewBudget(100)
	roomy := pending.Limits{MaxMessages: 100, MaxBytes: 1000, Overflow: pending.DropNewest}
	essential := pending.New(roomy).WithBudget(budget, true)
	optional := pending.New(roomy).WithBudget(budget, false)

	steps := []struct {
		q    *pending.Queue
		size int
		want bool
	}{
		{optional, 60, true},   // 60 of 100 used
		{optional, 50, false},  // would be 110: a non-essential arrival is shed
		{essential, 30, true},  // 90
		{essential, 40, true},  // 130 > 100: the optional 60 is shed to make room; 70
		{essential, 40, false}, // 110 and nothing left to shed: the essential one drops
	}
	for i, s := range steps {
		if got := s.q.Push(msg(i, s.size)); got != s.want {
			t.Fatalf("step %d: Push = %v, want %v", i, got, s.want)
		}
	}
	e, o := essential.Counts(), optional.Counts()
	if o.Dropped[pending.ReasonShed] != 2 || o.Pending != 0 || !o.Balanced() {
		t.Fatalf("optional: %+v; want 2 shed (one arriving, one evicted), none pending", o)
	}
	if e.Dropped[pending.ReasonBudget] != 1 || e.Dropped[pending.ReasonShed] != 0 || e.Pending != 2 || !e.Balanced() {
		t.Fatalf("essential: %+v; want 1 budget drop after the optional queue was empty, 2 pending", e)
	}
	if budget.Used() != 70 {
		t.Fatalf("budget used %d, want 70", budget.Used())
	}
	// Taking and closing give the bytes back.
	if _, ok := essential.Take(); !ok {
		t.Fatal("nothing to take")
	}
	essential.Done(true)
	essential.Close(pending.ReasonClosed)
	optional.Close(pending.ReasonClosed)
	if budget.Used() != 0 {
		t.Fatalf("budget used %d after everything left, want 0", budget.Used())
	}
}

func TestConnectionLimitIsSharedByItsQueues(t *testing.T) {
	conn := pending.NewBudget(100)
	roomy := pending.Limits{MaxMessages: 100, MaxBytes: 1000, Overflow: pending.DropNewest}
	a := pending.New(roomy).WithConnectionLimit(conn)
	b := pending.New(roomy).WithConnectionLimit(conn)
	if !a.Push(msg(0, 60)) || b.Push(msg(1, 50)) || !b.Push(msg(2, 40)) {
		t.Fatal("want 60 into a, then 50 into b refused (110 > 100), then 40 into b accepted")
	}
	if c := b.Counts(); c.Dropped[pending.ReasonConnection] != 1 || !c.Balanced() {
		t.Fatalf("b: %+v", c)
	}
	if _, ok := a.Take(); !ok {
		t.Fatal("nothing to take")
	}
	a.Done(true)
	if conn.Used() != 40 || !b.Push(msg(3, 60)) {
		t.Fatalf("after a's message left, used %d; want 40 and room for 60 more", conn.Used())
	}
}
