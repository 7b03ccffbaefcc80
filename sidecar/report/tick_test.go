package report_test

import (
	"slices"
	"testing"
	"time"
)

// Run builds a report every interval by itself.
func TestRunReportsEveryInterval(t *testing.T) {
	op, conn := startOperator(t)
	r := newReporter(t, newSource(), tokenFile(t, "token"))
	r.SetInterval(10 * time.Millisecond)
	run(t, r, conn)
	var ends []time.Time
	for want := uint64(1); want <= 3; want++ {
		got := op.next(t).report
		if got.GetSequence() != want {
			t.Fatalf("report %d, want %d", got.GetSequence(), want)
		}
		ends = append(ends, got.GetEnd().AsTime())
	}
	if !slices.IsSortedFunc(ends, func(a, b time.Time) int { return a.Compare(b) }) || ends[0].Equal(ends[2]) {
		t.Errorf("the intervals end at %v: not one after the other", ends)
	}
}
