package loadgen

import (
	"testing"
	"time"
)

func TestSpinForIsAtMostAQuarterOfTheInterval(t *testing.T) {
	for _, tc := range []struct {
		name           string
		spin, interval time.Duration
		want           time.Duration
	}{
		{"slow schedule keeps the configured spin", 50 * time.Microsecond, time.Millisecond, 50 * time.Microsecond},
		{"exactly four spins per interval", 50 * time.Microsecond, 200 * time.Microsecond, 50 * time.Microsecond},
		{"30,000/s: a quarter of 33 µs", 50 * time.Microsecond, 33 * time.Microsecond, 8250 * time.Nanosecond},
		{"interval shorter than the spin", 50 * time.Microsecond, 10 * time.Microsecond, 2500 * time.Nanosecond},
		{"no spin configured", 0, time.Millisecond, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := spinFor(tc.spin, tc.interval); got != tc.want {
				t.Errorf("spinFor(%s, %s) = %s, want %s", tc.spin, tc.interval, got, tc.want)
			}
		})
	}
}
