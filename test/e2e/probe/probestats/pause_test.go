package probestats

import (
	"strings"
	"testing"
	"time"
)

func TestPauseRecorderBeginsExtendsAndEndsPauses(t *testing.T) {
	var r PauseRecorder
	if st := r.Stats(at(0)); st.Paused || st.Pauses != 0 || st.PausedNanos != 0 || st.Last(at(0)) != 0 {
		t.Fatalf("a new recorder reports %+v", st)
	}
	if _, ok := r.Resume(at(0)); ok {
		t.Fatal("resumed without a pause")
	}
	if !r.Pause(at(100), at(3100)) {
		t.Fatal("the first pause did not begin")
	}
	st := r.Stats(at(600))
	if !st.Paused || st.Pauses != 1 || st.PausedNanos != int64(500*time.Millisecond) || st.UntilUnixNano != at(3100).UnixNano() || st.LastEndUnixNano != 0 {
		t.Fatalf("500 ms into a pause: %+v", st)
	}
	if got := st.Last(at(600)); got != 500*time.Millisecond {
		t.Fatalf("the current pause's length %s, want 500ms", got)
	}
	// Extended while paused: the same pause, a new end.
	if r.Pause(at(1000), at(9000)) {
		t.Fatal("extending a pause began a new one")
	}
	if st := r.Stats(at(1000)); st.Pauses != 1 || st.UntilUnixNano != at(9000).UnixNano() || st.LastStartUnixNano != at(100).UnixNano() {
		t.Fatalf("extended: %+v", st)
	}
	d, ok := r.Resume(at(2100))
	if !ok || d != 2*time.Second {
		t.Fatalf("resume: %s %v, want the 2s pause", d, ok)
	}
	st = r.Stats(at(5000))
	if st.Paused || st.PausedNanos != int64(2*time.Second) || st.LastEndUnixNano != at(2100).UnixNano() || st.UntilUnixNano != 0 || st.Last(at(5000)) != 2*time.Second {
		t.Fatalf("after the pause: %+v", st)
	}
	// A second pause adds up with the first.
	if !r.Pause(at(6000), at(7000)) {
		t.Fatal("the second pause did not begin")
	}
	if st := r.Stats(at(6250)); st.Pauses != 2 || st.PausedNanos != int64(2250*time.Millisecond) || st.LastEndUnixNano != 0 {
		t.Fatalf("in the second pause: %+v", st)
	}
	r.Resume(at(7000))
	if st := r.Stats(at(8000)); st.PausedNanos != int64(3*time.Second) {
		t.Fatalf("after both: %+v", st)
	}
}

func TestPauseRecorderNeverCountsTimeBackwards(t *testing.T) {
	var r PauseRecorder
	r.Pause(at(1000), at(2000))
	if st := r.Stats(at(900)); st.PausedNanos != 0 {
		t.Fatalf("paused %d ns as of before the pause", st.PausedNanos)
	}
	if d, _ := r.Resume(at(500)); d != 0 {
		t.Fatalf("a pause resumed before it began lasted %s", d)
	}
}

func TestParsePauseFor(t *testing.T) {
	if d, err := ParsePauseFor("3s"); err != nil || d != 3*time.Second {
		t.Fatalf("3s: %s, %v", d, err)
	}
	if d, err := ParsePauseFor(MaxPause.String()); err != nil || d != MaxPause {
		t.Fatalf("%s: %s, %v", MaxPause, d, err)
	}
	for in, want := range map[string]string{
		"":     "a duration is required",
		"3":    "missing unit",
		"-1s":  "more than 0",
		"0s":   "more than 0",
		"6m":   "at most 5m0s",
		"soon": "invalid duration",
	} {
		if _, err := ParsePauseFor(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("for=%q: %v, want an error with %q", in, err, want)
		}
	}
}

func TestLostInARangeOfSequenceNumbers(t *testing.T) {
	s := SubscriberStats{Gaps: []Gap{
		{Publisher: "pub", First: 10, Count: 5},                // 10-14
		{Publisher: "pub", First: 20, Count: 10, Recovered: 8}, // 20-29, 2 still missing
		{Publisher: "other", First: 10, Count: 100},
	}}
	for _, tc := range []struct {
		first, last uint64
		want        int64
	}{
		{1, 9, 0},
		{1, 100, 7},
		{10, 14, 5},
		{12, 13, 2},
		{14, 20, 2}, // 14, and 20 of the second (at most its 2 missing)
		{15, 19, 0},
		{21, 22, 2},
		{25, 40, 2}, // 5 in range, but only 2 still missing
		{30, 40, 0},
	} {
		if got := s.LostIn("pub", tc.first, tc.last); got != tc.want {
			t.Errorf("LostIn(pub, %d, %d) = %d, want %d", tc.first, tc.last, got, tc.want)
		}
	}
	if got := s.LostIn("nobody", 0, 1000); got != 0 {
		t.Errorf("another publisher's gaps counted: %d", got)
	}
}

func TestAPausedSubscribersReportRoundTrips(t *testing.T) {
	st := Stats{Role: RoleSubscriber, ID: "sub", Subscriber: &SubscriberStats{Received: 3,
		Pause: PauseStats{Paused: true, Pauses: 1, PausedNanos: 5, LastStartUnixNano: 7, UntilUnixNano: 9}}}
	line, err := FormatLine(st)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseLine(line)
	if err != nil {
		t.Fatal(err)
	}
	if back.Subscriber.Pause != st.Subscriber.Pause {
		t.Fatalf("%s read back as %+v", line, back.Subscriber.Pause)
	}
}

func TestParseFill(t *testing.T) {
	for in, want := range map[string]int64{"": FillAuto, "0": 0, "auto": FillAuto, "4096": 4096, "16777216": MaxFill} {
		if got, err := ParseFill(in); err != nil || got != want {
			t.Errorf("fill=%q: %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"-1", "16777217", "lots", "4KiB"} {
		if _, err := ParseFill(in); err == nil || !strings.Contains(err.Error(), "auto, or a number of bytes") {
			t.Errorf("fill=%q: %v, want refused", in, err)
		}
	}
}

func TestPauseRecorderRecordsEachPausesFiller(t *testing.T) {
	var r PauseRecorder
	r.Pause(at(0), at(1000))
	r.Filled("sub/fill", 1, 10, 10<<15)
	r.Filled("sub/fill", 11, 10, 0) // nothing published
	st := r.Stats(at(1))
	if st.FillPublisher != "sub/fill" || st.FilledMessages != 10 || st.FilledBytes != 10<<15 || st.FillFirst != 1 || st.FillLast != 10 {
		t.Fatalf("after the first pause's filler: %+v", st)
	}
	r.Resume(at(2))
	r.Pause(at(3), at(1000)) // no filler this time: the range is the latest pause's
	if st := r.Stats(at(4)); st.FillFirst != 0 || st.FillLast != 0 || st.FilledMessages != 10 {
		t.Fatalf("a pause without filler: %+v", st)
	}
	r.Filled("sub/fill", 11, 15, 5<<15)
	if st := r.Stats(at(5)); st.FillFirst != 11 || st.FillLast != 15 || st.FilledMessages != 15 || st.FilledBytes != 15<<15 {
		t.Fatalf("after the second filler: %+v", st)
	}
}
