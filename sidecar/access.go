package sidecar

import (
	"fmt"
	"sync/atomic"

	"github.com/weighstation/weighstation/sidecar/policy"
)

// Subject permissions, applied with the rules of policy.CheckSubscribe and
// policy.CheckPublish. In enforce mode a refusal is a "Permissions
// Violation for ..." error, which stock clients survive; in audit mode the
// operation goes ahead. Both are counted by operation, rule and mode, and
// audit mode logs each subject once (up to maxAuditLogged subjects,
// maxAuditLoggedBytes of them).

// maxAuditLogged and maxAuditLoggedBytes bound the subjects audit mode
// remembers having logged, by count and by their bytes (a subject may be
// 1,024 bytes long); past either, it says so once and logs no new ones
// (the counters go on).
const (
	maxAuditLogged      = 10_000
	maxAuditLoggedBytes = 1 << 20
)

// Operation is what an ACL judged.
type Operation uint8

const (
	OpPublish Operation = iota
	OpSubscribe
	numOperations
)

func (o Operation) String() string {
	if o == OpPublish {
		return "publish"
	}
	return "subscribe"
}

// accessCounters count ACL verdicts: [operation][rule][audit].
type accessCounters [numOperations][policy.NumRules][2]atomic.Uint64

type auditLog struct {
	mu     mutex[auditRank]
	logged map[string]struct{}
	bytes  int  // of logged's keys
	full   bool // logged holds maxAuditLogged subjects or maxAuditLoggedBytes, and that was said once
}

// denied judges an operation a rule refuses and reports whether it must be
// refused: always in enforce mode, and for reserved subjects in either
// mode; in audit mode it is counted and logged instead.
func (s *Server) denied(op Operation, rule policy.Rule, subject string, audit bool) bool {
	if rule == policy.RuleReserved {
		audit = false // never open to applications
	}
	mode := 0
	if audit {
		mode = 1
	}
	s.access[op][rule][mode].Add(1)
	if !audit {
		return true
	}
	key := op.String() + " " + subject
	s.audit.mu.Lock()
	_, seen := s.audit.logged[key]
	logIt, nowFull := false, false
	if !seen && !s.audit.full {
		if len(s.audit.logged) < maxAuditLogged && s.audit.bytes+len(key) <= maxAuditLoggedBytes {
			s.audit.logged[key] = struct{}{}
			s.audit.bytes += len(key)
			logIt = true
		} else {
			s.audit.full, nowFull = true, true
		}
	}
	s.audit.mu.Unlock()
	switch {
	case logIt:
		s.opts.Log.Info("access audit: would refuse", "operation", op.String(), "subject", subject, "rule", rule.String(), "why", rule.Explain())
	case nowFull:
		s.opts.Log.Info("access audit: logged the most subjects it remembers; further ones are only counted (weighstation_sidecar_access_denied_total)",
			"maxSubjects", maxAuditLogged, "maxBytes", maxAuditLoggedBytes)
	}
	return false
}

// AccessKey identifies one ACL counter.
type AccessKey struct {
	Op    Operation
	Rule  policy.Rule
	Audit bool
}

func (k AccessKey) String() string {
	mode := "enforce"
	if k.Audit {
		mode = "audit"
	}
	return fmt.Sprintf("%s/%s/%s", k.Op, k.Rule, mode)
}

// AccessDenials reports the non-zero ACL counters: refusals (enforce) and
// operations that would have been refused (audit).
func (s *Server) AccessDenials() map[AccessKey]uint64 {
	out := map[AccessKey]uint64{}
	for op := range numOperations {
		for rule := range policy.NumRules {
			for mode := range 2 {
				if n := s.access[op][rule][mode].Load(); n > 0 {
					out[AccessKey{op, rule, mode == 1}] = n
				}
			}
		}
	}
	return out
}

// RepliesAllowed counts publishes the ACL allowed only because they were
// the one reply to a request the pod received, to an inbox.
func (s *Server) RepliesAllowed() uint64 { return s.repliesAllowed.Load() }

// RepliesOutsideInbox counts replies to a request the pod received that
// the publish rules judged, because their reply subject lay outside every
// inbox space: the allowance never lets a requester steer a reply onto a
// subject the pod may not publish to.
func (s *Server) RepliesOutsideInbox() uint64 { return s.repliesOutsideInbox.Load() }
