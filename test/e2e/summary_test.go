package e2e

import (
	"strings"
	"testing"
	"time"
)

func TestStepLineAndSummary(t *testing.T) {
	results := []StepResult{
		{Name: "1-install", Outcome: Passed, Duration: 61234 * time.Millisecond},
		{Name: "3b-kill-switch", Outcome: Passed, Duration: 2 * time.Second, Measurements: []Measurement{
			{Name: "patch → first fast failure", Value: 42300 * time.Microsecond, Target: 300 * time.Millisecond},
			{Name: "release → first answer", Value: 35 * time.Millisecond},
		}},
		{Name: "4b-leader-sigkill", Outcome: Failed, Reason: "the new leader took too long", Duration: 30 * time.Second, Measurements: []Measurement{
			{Name: "SIGKILL → change seen", Value: 27 * time.Second, Target: 20 * time.Second},
		}},
		{Name: "4c-broker-delete", Outcome: Skipped, Reason: "E2E_DESTRUCTIVE is false"},
	}
	line := StepLine(results[1])
	if !strings.HasPrefix(line, "STEP 3b-kill-switch: passed in 2s") || !strings.Contains(line, "42.3ms (target ≤ 300ms: met)") {
		t.Fatalf("StepLine = %q", line)
	}
	if line := StepLine(results[2]); !strings.Contains(line, "failed in 30s (the new leader took too long)") || !strings.Contains(line, "MISSED") {
		t.Fatalf("StepLine = %q", line)
	}
	s := Summary(results)
	for _, want := range []string{"STEP", "1-install", "1m1.2s", "≤ 300ms", "release → first answer", "NO", "skipped: E2E_DESTRUCTIVE is false", "2 passed, 1 failed, 1 skipped"} {
		if !strings.Contains(s, want) {
			t.Errorf("the summary lacks %q:\n%s", want, s)
		}
	}
	if (Measurement{Value: time.Hour}).Met() != true {
		t.Error("a measurement without a target missed it")
	}
}
