package report_test

import (
	"strings"
	"testing"
	"time"

	"github.com/weighstation/weighstation/sidecar/report"
)

// -report-interval: 0 turns reports off; a negative value or one below a
// second is refused, naming the flag.
func TestCheckInterval(t *testing.T) {
	tests := []struct {
		interval time.Duration
		want     string // "" for no error
	}{
		{0, ""},
		{time.Second, ""},
		{10 * time.Second, ""},
		{time.Hour, ""},
		{999 * time.Millisecond, "-report-interval 999ms is below the minimum of 1s"},
		{time.Nanosecond, "-report-interval 1ns is below the minimum of 1s"},
		{-time.Second, "-report-interval -1s is negative"},
	}
	for _, tc := range tests {
		err := report.CheckInterval(tc.interval)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.interval, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one that says %q", tc.interval, err, tc.want)
		}
	}
}

func TestNewRefusesIncompleteOptions(t *testing.T) {
	complete := func() report.Options {
		return report.Options{Source: newSource(), PodUID: "uid", TokenFile: "/token"}
	}
	tests := []struct {
		name   string
		change func(*report.Options)
		want   string
	}{
		{"no source", func(o *report.Options) { o.Source = nil }, "no source of measurements"},
		{"no pod UID", func(o *report.Options) { o.PodUID = "" }, "-pod-uid is required"},
		{"no token file", func(o *report.Options) { o.TokenFile = "" }, "-identity-token-file is required"},
		{"a short interval", func(o *report.Options) { o.Interval = 100 * time.Millisecond }, "-report-interval 100ms is below"},
		{"a negative interval", func(o *report.Options) { o.Interval = -time.Second }, "-report-interval -1s is negative"},
		{"a negative queue", func(o *report.Options) { o.MaxPending = -1 }, "MaxPending must not be negative"},
	}
	for _, tc := range tests {
		opts := complete()
		tc.change(&opts)
		if _, err := report.New(opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one that says %q", tc.name, err, tc.want)
		}
	}
	if _, err := report.New(complete()); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}
