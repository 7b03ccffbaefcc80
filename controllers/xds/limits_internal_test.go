package xds

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncateReasonAtItsEdge(t *testing.T) {
	tests := []struct {
		name, reason string
		truncated    bool
	}{
		{"empty", "", false},
		{"at the limit", strings.Repeat("r", MaxNACKReasonBytes), false},
		{"one byte over", strings.Repeat("r", MaxNACKReasonBytes+1), true},
		{"two-byte runes across the cut", "x" + strings.Repeat("é", MaxNACKReasonBytes), true},
		{"four-byte runes across the cut", strings.Repeat("😀", MaxNACKReasonBytes), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, truncated := truncateReason(tc.reason)
			switch {
			case truncated != tc.truncated:
				t.Fatalf("truncated %t, want %t", truncated, tc.truncated)
			case !truncated && got != tc.reason:
				t.Fatal("a reason within the limit was changed")
			case len(got) > MaxNACKReasonBytes || !utf8.ValidString(got):
				t.Fatalf("%d bytes, valid UTF-8 %t: want at most %d, valid", len(got), utf8.ValidString(got), MaxNACKReasonBytes)
			case truncated && (!strings.HasSuffix(got, "… (truncated)") || len(got) < MaxNACKReasonBytes-3):
				t.Fatalf("cut to %d bytes %q…, want about %d, marked", len(got), got[len(got)-20:], MaxNACKReasonBytes)
			}
		})
	}
}
