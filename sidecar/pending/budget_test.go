package pending_test

import (
	"runtime"
	"testing"
	"time"

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

// TestARefusedPushShedsNothing: an essential message that its own queue
// refuses anyway (full under DropNewest, over MaxBytes, closed, or larger
// than the whole budget) is refused before the budget sheds anything for
// it: other subscriptions lost their messages for nothing.
func TestARefusedPushShedsNothing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits pending.Limits
		held   int // already in the essential queue
		size   int
		closed bool
		reason pending.Reason
	}{
		{"full under DropNewest", pending.Limits{MaxMessages: 1, MaxBytes: 1000, Overflow: pending.DropNewest}, 30, 20, false, pending.ReasonOverflow},
		{"over MaxBytes", pending.Limits{MaxMessages: 10, MaxBytes: 40}, 0, 50, false, pending.ReasonOverflow},
		{"closed", pending.Limits{MaxMessages: 10, MaxBytes: 1000}, 0, 50, true, pending.ReasonClosed},
		{"larger than the budget", pending.Limits{MaxMessages: 10, MaxBytes: 1000}, 0, 150, false, pending.ReasonBudget},
	} {
		t.Run(tc.name, func(t *testing.T) {
			budget := pending.NewBudget(100)
			optional := pending.New(pending.Limits{MaxMessages: 10, MaxBytes: 1000}).WithBudget(budget, false)
			essential := pending.New(tc.limits).WithBudget(budget, true)
			if !optional.Push(msg(0, 60)) || (tc.held > 0 && !essential.Push(msg(1, tc.held))) {
				t.Fatal("setup")
			}
			if tc.closed {
				essential.Close(pending.ReasonClosed)
			}
			if essential.Push(msg(2, tc.size)) {
				t.Fatal("the push was taken")
			}
			if c := optional.Counts(); c.Pending != 1 || c.Dropped[pending.ReasonShed] != 0 {
				t.Fatalf("the optional queue lost its message for a push that was refused anyway: %+v", c)
			}
			if c := essential.Counts(); c.Dropped[tc.reason] != 1 || !c.Balanced() {
				t.Fatalf("the refusal counted %+v, want one drop for reason %d", c, tc.reason)
			}
			if used := budget.Used(); used != 60+int64(tc.held)*boolInt(!tc.closed) {
				t.Fatalf("budget used %d, want what the queues hold", used)
			}
		})
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// TestSetLimitsAfterCloseLeavesTheBudget: a closed queue stays out of the
// budget when a configuration change makes it non-essential (it was
// registered again, and held for ever).
func TestSetLimitsAfterCloseLeavesTheBudget(t *testing.T) {
	budget := pending.NewBudget(100)
	closed := pending.New(pending.Limits{MaxMessages: 10, MaxBytes: 1000}).WithBudget(budget, true)
	closed.Close(pending.ReasonClosed)
	closed.SetLimits(pending.Limits{MaxMessages: 10, MaxBytes: 1000}, false)
	if n := pending.Sheddable(budget); n != 0 {
		t.Fatalf("the budget may shed %d queues, want none: the only one is closed", n)
	}
}

// TestAnEssentialDropOldestQueueEvictsItsOwnFirst: a full essential
// DropOldest queue makes room from its own oldest message before the
// budget sheds anyone else's; only what its eviction does not free is
// shed. (The budget was asked first, and shed another subscription's
// message for room the eviction then freed anyway.)
func TestAnEssentialDropOldestQueueEvictsItsOwnFirst(t *testing.T) {
	for _, tc := range []struct {
		name       string
		newSize    int
		shedOthers uint64
	}{
		{"its eviction frees enough", 30, 0},
		{"its eviction frees too little", 50, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			budget := pending.NewBudget(100)
			optional := pending.New(pending.Limits{MaxMessages: 10, MaxBytes: 1000}).WithBudget(budget, false)
			essential := pending.New(pending.Limits{MaxMessages: 1, MaxBytes: 1000, Overflow: pending.DropOldest}).WithBudget(budget, true)
			if !optional.Push(msg(0, 60)) || !essential.Push(msg(1, 30)) {
				t.Fatal("setup")
			}
			if !essential.Push(msg(2, tc.newSize)) {
				t.Fatal("the push was refused")
			}
			if c := optional.Counts(); c.Dropped[pending.ReasonShed] != tc.shedOthers || !c.Balanced() {
				t.Fatalf("the optional queue: %+v, want %d shed", c, tc.shedOthers)
			}
			if c := essential.Counts(); c.Pending != 1 || c.Dropped[pending.ReasonOverflow] != 1 || !c.Balanced() {
				t.Fatalf("the essential queue: %+v, want its new message held and its oldest dropped as overflow", c)
			}
			if want := int64(tc.newSize) + 60*int64(1-tc.shedOthers); budget.Used() != want {
				t.Fatalf("budget used %d, want %d", budget.Used(), want)
			}
		})
	}
}

// TestABudgetRefusalCountsTheQueuesOwnReason: an arrival the queue would
// refuse anyway is counted for the queue's reason when a budget refuses
// it first: closed (or shutdown) after Close, overflow when full under
// DropNewest; the budget's reason only otherwise. (A closed queue's late
// arrivals counted as shed, and a full queue's as connection.)
func TestABudgetRefusalCountsTheQueuesOwnReason(t *testing.T) {
	roomy := pending.Limits{MaxMessages: 100, MaxBytes: 1000, Overflow: pending.DropNewest}
	for _, tc := range []struct {
		name  string
		limit pending.Limits
		close bool
		want  pending.Reason
	}{
		{"closed, the sidecar budget full", roomy, true, pending.ReasonShutdown},
		{"full under DropNewest, the connection's limit reached", pending.Limits{MaxMessages: 1, MaxBytes: 1000, Overflow: pending.DropNewest}, false, pending.ReasonOverflow},
		{"room of its own, the budgets full", roomy, false, pending.ReasonConnection},
	} {
		t.Run(tc.name, func(t *testing.T) {
			budget, conn := pending.NewBudget(100), pending.NewBudget(100)
			other := pending.New(roomy).WithBudget(budget, true).WithConnectionLimit(conn)
			q := pending.New(tc.limit).WithBudget(budget, false).WithConnectionLimit(conn)
			if !q.Push(msg(0, 10)) || !other.Push(msg(1, 90)) { // both budgets full
				t.Fatal("setup")
			}
			if tc.close {
				q.Close(pending.ReasonShutdown)
				if !other.Push(msg(3, 10)) { // what Close gave back, taken: full again
					t.Fatal("refilling")
				}
			}
			if q.Push(msg(2, 10)) {
				t.Fatal("the push was taken")
			}
			want := uint64(1)
			if tc.close {
				want++ // Close dropped the message it held, for the same reason
			}
			if c := q.Counts(); c.Dropped[tc.want] != want || !c.Balanced() {
				t.Fatalf("counted %+v, want the arrival dropped for reason %d", c, tc.want)
			}
		})
	}
}

// TestBudgetChargesMemoryOutsideTheQueues: TryReserve takes only room
// there is; Acquire sheds non-essential queues as an essential queue
// would, then waits for a release (woken by it, not by its timeout), and
// gives up at its timeout or when cancelled; nothing is ever charged past
// the budget.
func TestBudgetChargesMemoryOutsideTheQueues(t *testing.T) {
	const long = time.Minute // a wait that must end early, woken
	budget := pending.NewBudget(100)
	roomy := pending.Limits{MaxMessages: 100, MaxBytes: 1000, Overflow: pending.DropNewest}
	optional := pending.New(roomy).WithBudget(budget, false)
	if !optional.Push(msg(0, 30)) {
		t.Fatal("push refused")
	}
	steps := []struct {
		name  string
		do    func() bool
		want  bool
		used  int64
		queue int // what the non-essential queue still holds
	}{
		{"TryReserve within", func() bool { return budget.TryReserve(60) }, true, 90, 1},
		{"TryReserve past it sheds nothing", func() bool { return budget.TryReserve(20) }, false, 90, 1},
		{"Acquire sheds the non-essential queue", func() bool { return budget.Acquire(20, 0, nil) }, true, 80, 0},
		{"Acquire without wait", func() bool { return budget.Acquire(30, 0, nil) }, false, 80, 0},
		{"Acquire over the whole budget", func() bool { return budget.Acquire(101, long, nil) }, false, 80, 0},
	}
	for _, s := range steps {
		if got := s.do(); got != s.want || budget.Used() != s.used || optional.Counts().Pending != uint64(s.queue) {
			t.Fatalf("%s: %v with %d used, %d pending; want %v, %d used, %d pending", s.name, got, budget.Used(), optional.Counts().Pending, s.want, s.used, s.queue)
		}
	}

	// A waiter gets its room when someone releases it.
	got := make(chan bool)
	go func() { got <- budget.Acquire(50, long, nil) }()
	waitForWaiter(t, budget)
	budget.Release(60)
	select {
	case ok := <-got:
		if !ok || budget.Used() != 70 {
			t.Fatalf("Acquire after a release: %v with %d used; want true, 70", ok, budget.Used())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire was not woken by the release")
	}

	// Cancelled, and timed out.
	cancel := make(chan struct{})
	go func() { got <- budget.Acquire(50, long, cancel) }()
	waitForWaiter(t, budget)
	close(cancel)
	if ok := <-got; ok || budget.Used() != 70 {
		t.Fatalf("cancelled Acquire: %v with %d used", ok, budget.Used())
	}
	if ok := budget.Acquire(50, time.Millisecond, nil); ok || budget.Used() != 70 {
		t.Fatalf("timed-out Acquire: %v with %d used", ok, budget.Used())
	}
	if budget.Waits() != 3 || budget.Waiting() != 0 {
		t.Fatalf("Waits %d, Waiting %d; want 3 and 0", budget.Waits(), budget.Waiting())
	}
}

// waitForWaiter returns once an Acquire waits on b.
func waitForWaiter(t *testing.T, b *pending.Budget) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for b.Waiting() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no Acquire waited within 10s")
		}
		runtime.Gosched()
	}
}
