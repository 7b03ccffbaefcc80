package e2e

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
)

// Outcomes of a step.
const (
	Passed  = "passed"
	Failed  = "failed"
	Skipped = "skipped"
)

// Measurement is a timing a step measured, with its target when it has
// one.
type Measurement struct {
	Name   string
	Value  time.Duration
	Target time.Duration // 0: none
}

// Met reports whether the measurement is within its target (always, when
// it has none).
func (m Measurement) Met() bool { return m.Target == 0 || m.Value <= m.Target }

func (m Measurement) String() string {
	if m.Target == 0 {
		return fmt.Sprintf("%s %s", m.Name, roundDuration(m.Value))
	}
	verdict := "met"
	if !m.Met() {
		verdict = "MISSED"
	}
	return fmt.Sprintf("%s %s (target ≤ %s: %s)", m.Name, roundDuration(m.Value), m.Target, verdict)
}

// StepResult is what one step did.
type StepResult struct {
	Name         string
	Outcome      string
	Reason       string // why it failed or was skipped
	Duration     time.Duration
	Measurements []Measurement
	Notes        []string
}

// StepLine is the line printed when a step ends:
// "STEP <name>: <outcome> in <duration>", then its measurements.
func StepLine(r StepResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "STEP %s: %s in %s", r.Name, r.Outcome, roundDuration(r.Duration))
	if r.Reason != "" {
		fmt.Fprintf(&b, " (%s)", r.Reason)
	}
	for _, m := range r.Measurements {
		fmt.Fprintf(&b, "; %s", m)
	}
	return b.String()
}

// Summary is the table printed at the end: every step, its outcome and
// time, and each measurement against its target.
func Summary(results []StepResult) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "STEP\tOUTCOME\tDURATION\tMEASURED\tVALUE\tTARGET\tMET")
	for _, r := range results {
		outcome := r.Outcome
		if r.Reason != "" && r.Outcome != Passed {
			outcome += ": " + truncate(r.Reason, 60)
		}
		if len(r.Measurements) == 0 {
			fmt.Fprintf(w, "%s\t%s\t%s\t-\t-\t-\t-\n", r.Name, outcome, roundDuration(r.Duration))
			continue
		}
		for i, m := range r.Measurements {
			name, out, dur := r.Name, outcome, roundDuration(r.Duration).String()
			if i > 0 {
				name, out, dur = "", "", ""
			}
			target, met := "-", "-"
			if m.Target != 0 {
				target, met = "≤ "+m.Target.String(), "yes"
				if !m.Met() {
					met = "NO"
				}
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, out, dur, m.Name, roundDuration(m.Value), target, met)
		}
	}
	_ = w.Flush()
	var passed, failed, skipped int
	for _, r := range results {
		switch r.Outcome {
		case Passed:
			passed++
		case Failed:
			failed++
		default:
			skipped++
		}
	}
	fmt.Fprintf(&b, "%d passed, %d failed, %d skipped\n", passed, failed, skipped)
	return b.String()
}

func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond)
	}
	return d
}

func truncate(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
