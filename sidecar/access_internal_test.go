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
// up to maxAuditLogged subjects; past them it says once that it stops, and
// then only counts (before, every refusal of a subject it could no longer
// remember was logged again).
func TestAuditLogStopsAtItsBound(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(_, args string) {
		mu.Lock()
		lines = append(lines, args)
		mu.Unlock()
	}, funcr.Options{})
	s := &Server{opts: Options{Log: log}, audit: auditLog{logged: map[string]struct{}{}}}
	for i := range maxAuditLogged + 100 {
		for range 3 { // a subject refused again is not logged again
			if s.denied(OpPublish, policy.RuleNotCovered, fmt.Sprintf("s.%d", i), true) {
				t.Fatal("audit mode refused")
			}
		}
	}
	if got := s.access[OpPublish][policy.RuleNotCovered][1].Load(); got != 3*(maxAuditLogged+100) {
		t.Fatalf("counted %d refusals, want %d", got, 3*(maxAuditLogged+100))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lines) != maxAuditLogged+1 {
		t.Fatalf("%d lines logged, want one per subject up to %d and one saying it stops", len(lines), maxAuditLogged)
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, "further ones are only counted") {
		t.Fatalf("the last line does not say that logging stops: %s", last)
	}
}
