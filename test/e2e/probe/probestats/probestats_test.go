package probestats

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Unix(1_800_000_000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestSequenceTrackerCountsGapsDuplicatesAndLateArrivals(t *testing.T) {
	tr := NewSequenceTracker()
	// The subscriber starts after the publisher: 5 is where it begins.
	for i, seq := range []uint64{5, 6, 9, 10, 7, 7, 11} {
		tr.Observe("pub", 1, seq, at(i*10))
	}
	s := tr.Stats()
	if s.Received != 7 || s.Duplicates != 1 || s.OutOfOrder != 1 || s.Lost != 1 {
		t.Fatalf("received %d duplicates %d out of order %d lost %d, want 7 1 1 1", s.Received, s.Duplicates, s.OutOfOrder, s.Lost)
	}
	if len(s.Gaps) != 1 || s.Gaps[0].First != 7 || s.Gaps[0].Count != 2 || s.Gaps[0].Recovered != 1 || s.Gaps[0].DetectedUnixNano != at(20).UnixNano() {
		t.Fatalf("gaps %+v, want one of 2 from 7 detected at +20ms with 1 recovered", s.Gaps)
	}
	if p := s.Publishers["pub"]; p.Highest != 11 || p.Lost != 1 || p.Received != 7 {
		t.Fatalf("publisher %+v", p)
	}
}

func TestSequenceTrackerRestartedPublisherStartsAgainAtOne(t *testing.T) {
	tr := NewSequenceTracker()
	tr.Observe("pub", 1, 1, at(0))
	tr.Observe("pub", 1, 2, at(1))
	tr.Observe("pub", 2, 3, at(2)) // a new run: 1 and 2 of it are missing
	s := tr.Stats()
	if s.Restarts != 1 || s.Lost != 2 || s.Duplicates != 0 {
		t.Fatalf("restarts %d lost %d duplicates %d, want 1 2 0", s.Restarts, s.Lost, s.Duplicates)
	}
}

func TestSequenceTrackerKeepsAtMostMaxGaps(t *testing.T) {
	tr := NewSequenceTracker()
	for i := range MaxGaps + 2 {
		tr.Observe("pub", 1, uint64(2*i+1), at(i)) // every other number lost
	}
	s := tr.Stats()
	if len(s.Gaps) != MaxGaps || s.GapsDropped != 1 {
		t.Fatalf("%d gaps, %d dropped; want %d and 1", len(s.Gaps), s.GapsDropped, MaxGaps)
	}
	// A late arrival still finds its gap after the shift.
	tr.Observe("pub", 1, 4, at(MaxGaps+5))
	s = tr.Stats()
	if s.Gaps[0].Recovered != 1 || s.Gaps[0].First != 4 {
		t.Fatalf("first gap %+v, want the one from 4 with 1 recovered", s.Gaps[0])
	}
}

func TestLossesInAndOutsideWindows(t *testing.T) {
	s := SubscriberStats{Gaps: []Gap{
		{DetectedUnixNano: at(100).UnixNano(), Publisher: "p", First: 10, Count: 3},
		{DetectedUnixNano: at(2000).UnixNano(), Publisher: "p", First: 50, Count: 2, Recovered: 2},
		{DetectedUnixNano: at(5000).UnixNano(), Publisher: "p", First: 90, Count: 4, Recovered: 1},
	}}
	if n := s.LostBetween(at(0), at(2500)); n != 3 {
		t.Fatalf("LostBetween = %d, want 3", n)
	}
	w := []Window{{Name: "broker", Start: at(4000), End: at(6000)}}
	if out := s.GapsOutside(at(0), w); len(out) != 1 || out[0].First != 10 {
		t.Fatalf("GapsOutside = %+v, want the gap at 10 alone", out)
	}
	if out := s.GapsOutside(at(200), w); len(out) != 0 {
		t.Fatalf("GapsOutside since +200ms = %+v, want none", out)
	}
	if d := DescribeGaps(s.Gaps[:1], t0); !strings.Contains(d, "3 lost from p#10") {
		t.Fatalf("DescribeGaps = %q", d)
	}
}

func TestOutcomeRecorderTransitions(t *testing.T) {
	r := NewOutcomeRecorder(20*time.Millisecond, 200*time.Millisecond)
	steps := []struct {
		o    Outcome
		done int
	}{
		{OutcomeOK, 10}, {OutcomeOK, 30}, {OutcomeTimeout, 40}, {OutcomeFastFailure, 55},
		{OutcomeFastFailure, 70}, {OutcomeOther, 80}, {OutcomeOK, 95},
	}
	for _, s := range steps {
		r.Sent()
		r.Record(s.o, at(s.done-5), at(s.done), "")
	}
	st := r.Stats()
	if st.Sent != 7 || st.OK != 3 || st.FastFailures != 2 || st.Timeouts != 1 || st.OtherErrors != 1 {
		t.Fatalf("counts %+v", st)
	}
	if len(st.Transitions) != 3 || st.Transitions[0].From != "" || st.Transitions[1].To != OutcomeFastFailure || st.Transitions[2].To != OutcomeOK {
		t.Fatalf("transitions %+v, want ok, fast-failure, ok", st.Transitions)
	}
	tr, ok := st.FirstTransitionAfter(OutcomeFastFailure, at(41))
	if !ok || tr.At() != at(55) || tr.SentUnixNano != at(50).UnixNano() {
		t.Fatalf("FirstTransitionAfter = %+v %v, want the one at +55ms", tr, ok)
	}
	if _, ok := st.FirstTransitionAfter(OutcomeFastFailure, at(56)); ok {
		t.Fatal("a fast failure after +56ms, want none")
	}
	if st.State() != OutcomeOK {
		t.Fatalf("State = %q, want ok", st.State())
	}
}

func TestReportLineRoundTrip(t *testing.T) {
	in := Stats{Role: RoleRequester, ID: "r1", AtUnixNano: 42, Requester: &RequesterStats{OK: 3, Transitions: []Transition{{To: OutcomeOK, AtUnixNano: 7}}}}
	line, err := FormatLine(in)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(line, "\n") || !strings.HasPrefix(line, LinePrefix) {
		t.Fatalf("line %q: want one line starting %q", line, LinePrefix)
	}
	logs := "2026-11-29T01:02:03Z some other line\n2026-11-29T01:02:03Z " + line + "\nconnecting...\n"
	out, err := LastReport(logs)
	if err != nil {
		t.Fatal(err)
	}
	if out.Role != in.Role || out.Requester == nil || out.Requester.OK != 3 || out.Requester.Transitions[0].AtUnixNano != 7 {
		t.Fatalf("parsed %+v", out)
	}
	if _, err := LastReport("nothing here"); err == nil {
		t.Fatal("LastReport found a report in a log without one")
	}
	if _, err := Parse([]byte(`{"id":"x"}`)); err == nil {
		t.Fatal("Parse accepted a report without a role")
	}
	if _, err := Parse([]byte(`{"role":"subscriber","id":"x"}`)); err == nil {
		t.Fatal("Parse accepted a subscriber's report without its counters")
	}
}
