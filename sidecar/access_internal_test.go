package sidecar

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"

	"github.com/weighstation/weighstation/sidecar/policy"
)

// TestAuditLogStopsAtItsBound: audit mode logs each refused subject once,
// up to maxAuditLogged subjects or maxAuditLoggedBytes of them, whichever
// comes first; past them it says once that it stops, and then only counts
// (before, every refusal of a subject it could no longer remember was
// logged again).
func TestAuditLogStopsAtItsBound(t *testing.T) {
	long := strings.Repeat("x", 1000) // subjects up to matcher.MaxSubjectLength
	tests := []struct {
		name    string
		subject func(i int) string
		logged  int // subjects logged before it stops
	}{
		{"short subjects: by count", func(i int) string { return fmt.Sprintf("s.%d", i) }, maxAuditLogged},
		{"long subjects: by bytes", func(i int) string { return fmt.Sprintf("%s.%04d", long, i) }, maxAuditLoggedBytes / len("publish "+long+".0000")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var lines []string
			log := funcr.New(func(_, args string) {
				mu.Lock()
				lines = append(lines, args)
				mu.Unlock()
			}, funcr.Options{})
			s := &Server{opts: Options{Log: log}, audit: auditLog{logged: map[string]struct{}{}}}
			n := tc.logged + 100
			for i := range n {
				for range 3 { // a subject refused again is not logged again
					if s.denied(OpPublish, policy.RuleNotCovered, tc.subject(i), true) {
						t.Fatal("audit mode refused")
					}
				}
			}
			if got := s.access[OpPublish][policy.RuleNotCovered][1].Load(); got != uint64(3*n) {
				t.Fatalf("counted %d refusals, want %d", got, 3*n)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(lines) != tc.logged+1 || s.audit.bytes > maxAuditLoggedBytes {
				t.Fatalf("%d lines logged, %d bytes remembered; want one per subject up to %d and one saying it stops, within %d bytes", len(lines), s.audit.bytes, tc.logged, maxAuditLoggedBytes)
			}
			if last := lines[len(lines)-1]; !strings.Contains(last, "further ones are only counted") {
				t.Fatalf("the last line does not say that logging stops: %s", last)
			}
		})
	}
}
