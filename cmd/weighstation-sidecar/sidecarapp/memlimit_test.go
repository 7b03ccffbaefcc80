package sidecarapp

import (
	"strings"
	"testing"
)

// TestGoMemoryLimit: -go-memory-limit auto is -memory-budget plus
// GoMemoryMargin, unless GOMEMLIMIT is set (Go applies that one); off sets
// none; a number of bytes is taken as it is; anything else stops the
// sidecar, naming the flag.
func TestGoMemoryLimit(t *testing.T) {
	const budget = 64 << 20
	tests := []struct {
		flag, env string
		limit     int64
		set       bool
		err       string
	}{
		{flag: "auto", limit: budget + GoMemoryMargin, set: true},
		{flag: "auto", env: "200MiB"},
		{flag: "off"},
		{flag: "off", env: "200MiB"},
		{flag: "100000000", limit: 100_000_000, set: true},
		{flag: "100000000", env: "200MiB", limit: 100_000_000, set: true},
		{flag: "0", err: "-go-memory-limit must be auto, off or a number of bytes"},
		{flag: "128Mi", err: "-go-memory-limit must be auto, off or a number of bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.flag+"/"+tc.env, func(t *testing.T) {
			limit, set, err := goMemoryLimit(tc.flag, budget, func(name string) string {
				if name == "GOMEMLIMIT" {
					return tc.env
				}
				return ""
			})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil || limit != tc.limit || set != tc.set {
				t.Fatalf("goMemoryLimit = %d, %v, %v; want %d, %v", limit, set, err, tc.limit, tc.set)
			}
		})
	}
}
