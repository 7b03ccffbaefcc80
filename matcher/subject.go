package matcher

import (
	"fmt"
	"strings"
)

// Limits on subjects and patterns. nats-server itself only bounds a subject
// by its control line (4,096 bytes by default); weighstation bounds it
// explicitly so that the cost of a match and the stack it uses are known.
const (
	// MaxSubjectLength is the longest subject or pattern accepted, in bytes.
	// A quarter of nats-server's default control line (4,096 bytes), so that a
	// PUB line carrying a subject and a reply subject of this size still fits;
	// far above the subjects seen in practice (JetStream API subjects with a
	// stream, a consumer and a filter stay under 300 bytes).
	MaxSubjectLength = 1024

	// MaxTokens is the largest number of tokens in a subject or pattern. It
	// bounds the depth of the trie and the recursion of Match, and lets Match
	// tokenize into a fixed array on its stack (nats-server's Sublist uses a
	// 32-entry stack array for the same reason before spilling to the heap).
	MaxTokens = 32
)

const (
	tokenSeparator = '.'
	singleWildcard = "*" // matches exactly one token
	fullWildcard   = ">" // matches one or more trailing tokens
)

// Rules a subject can break. Each refusal names one of them.
const (
	RuleEmpty           = "a subject must not be empty"
	RuleTooLong         = "a subject must be at most 1024 bytes (MaxSubjectLength)"
	RuleTooManyTokens   = "a subject must have at most 32 tokens (MaxTokens)"
	RuleEmptyToken      = "tokens must not be empty (no leading, trailing or double '.')"
	RuleWhitespace      = "tokens must not contain whitespace (space, \\t, \\n, \\r, \\f)"
	RuleFullWildcardEnd = "'>' is only allowed as the last token"
	RuleNoWildcards     = "a literal subject must not contain the wildcard tokens '*' or '>'"
)

// SubjectError reports why a subject or pattern was refused.
type SubjectError struct {
	Subject string
	Rule    string // one of the Rule* constants
	Token   int    // 1-based token position the rule applies to, 0 for the whole subject
}

func (e *SubjectError) Error() string {
	subject := e.Subject
	if len(subject) > 64 {
		subject = subject[:64] + "..."
	}
	if e.Token > 0 {
		return fmt.Sprintf("invalid subject %q: token %d: %s", subject, e.Token, e.Rule)
	}
	return fmt.Sprintf("invalid subject %q: %s", subject, e.Rule)
}

// Is makes errors.Is(err, ErrInvalidSubject) true for every SubjectError.
func (e *SubjectError) Is(target error) bool { return target == ErrInvalidSubject }

// ValidatePattern checks a subscription pattern: a subject that may contain
// the wildcard tokens '*' and '>'. Within the limits above it gives the same
// verdict as nats-server's server.IsValidSubject.
func ValidatePattern(pattern string) error { return validate(pattern, true) }

// ValidateSubject checks a literal subject, one a message can be published
// to. It gives the verdict of server.IsValidSubject(s) &&
// server.IsValidLiteralSubject(s) within the limits above (the latter alone
// accepts whitespace, which the former refuses).
func ValidateSubject(subject string) error { return validate(subject, false) }

// validate tokenizes into a buffer on the stack: the sidecar validates
// every published subject, so a valid one must cost no allocation.
func validate(s string, wildcards bool) error {
	var buf [MaxTokens]string
	_, err := tokenize(s, buf[:0], wildcards)
	return err
}

// IsWhitespace reports whether b is one of the bytes NATS refuses in a
// subject token.
func isWhitespace(b byte) bool {
	return b == ' ' || b == '\t' || b == '\n' || b == '\r' || b == '\f'
}

// tokenize splits s into dst (whose capacity should be MaxTokens, so that it
// never grows) and validates it. wildcards says whether '*' and '>' tokens
// are allowed. The tokens are substrings of s: no allocation.
func tokenize(s string, dst []string, wildcards bool) ([]string, error) {
	if len(s) == 0 {
		return nil, &SubjectError{Subject: s, Rule: RuleEmpty}
	}
	if len(s) > MaxSubjectLength {
		return nil, &SubjectError{Subject: s, Rule: RuleTooLong}
	}
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) {
			c := s[i]
			if c != tokenSeparator {
				if isWhitespace(c) {
					return nil, &SubjectError{Subject: s, Rule: RuleWhitespace, Token: len(dst) + 1}
				}
				continue
			}
		}
		tok := s[start:i]
		switch {
		case len(tok) == 0:
			return nil, &SubjectError{Subject: s, Rule: RuleEmptyToken, Token: len(dst) + 1}
		case len(dst) == MaxTokens:
			return nil, &SubjectError{Subject: s, Rule: RuleTooManyTokens}
		case len(dst) > 0 && dst[len(dst)-1] == fullWildcard:
			return nil, &SubjectError{Subject: s, Rule: RuleFullWildcardEnd, Token: len(dst)}
		case !wildcards && (tok == singleWildcard || tok == fullWildcard):
			return nil, &SubjectError{Subject: s, Rule: RuleNoWildcards, Token: len(dst) + 1}
		}
		dst = append(dst, tok)
		start = i + 1
	}
	return dst, nil
}

// Covers reports whether every subject that sub matches is also matched by
// pattern: pattern containment. Both are patterns; an invalid one covers and
// is covered by nothing. For example "orders.*" covers "orders.eu" and
// "orders.*", but not "orders.>" (which also matches "orders.eu.1"), and
// "orders.>" covers all three.
func Covers(pattern, sub string) bool {
	var pbuf, sbuf [MaxTokens]string
	p, err := tokenize(pattern, pbuf[:0], true)
	if err != nil {
		return false
	}
	s, err := tokenize(sub, sbuf[:0], true)
	if err != nil {
		return false
	}
	for i, pt := range p {
		if pt == fullWildcard {
			// '>' matches one or more tokens; sub has at least one more token
			// here (whatever it is, even '>' itself), so everything sub can
			// still match is covered.
			return i < len(s)
		}
		if i >= len(s) {
			return false // pattern needs more tokens than sub's subjects have
		}
		st := s[i]
		switch {
		case st == fullWildcard:
			return false // sub matches subjects of any length from here; only '>' covers that
		case pt == singleWildcard:
			continue // '*' covers any single token, literal or '*'
		case pt != st:
			return false // a literal covers only itself ('*' in sub is wider)
		}
	}
	return len(p) == len(s)
}

// Overlaps reports whether some subject matches both patterns. An invalid
// pattern overlaps nothing.
func Overlaps(a, b string) bool {
	var abuf, bbuf [MaxTokens]string
	at, aerr := tokenize(a, abuf[:0], true)
	bt, berr := tokenize(b, bbuf[:0], true)
	if aerr != nil || berr != nil {
		return false
	}
	for i := 0; ; i++ {
		switch {
		case i == len(at) && i == len(bt):
			return true
		case i == len(at) || i == len(bt):
			return false
		case at[i] == fullWildcard || bt[i] == fullWildcard:
			return true // '>' matches the rest, one token or more, of the other
		case at[i] != singleWildcard && bt[i] != singleWildcard && at[i] != bt[i]:
			return false
		}
	}
}

// subjectOf joins tokens back into a subject; used off the hot path only.
func subjectOf(tokens []string) string { return strings.Join(tokens, string(tokenSeparator)) }

// CompareSpecificity orders two valid patterns by how specifically they
// describe a subject both match, which decides the policy that governs it:
// token by token, a literal beats '*' and '*' beats '>', and a longer
// pattern beats a shorter one. It returns a positive number when a is more
// specific, negative when b is, and 0 only for equal patterns: two distinct
// patterns that match a common subject always differ at some token. Invalid
// patterns compare as less specific than valid ones.
func CompareSpecificity(a, b string) int {
	var abuf, bbuf [MaxTokens]string
	at, aerr := tokenize(a, abuf[:0], true)
	bt, berr := tokenize(b, bbuf[:0], true)
	switch {
	case aerr != nil && berr != nil:
		return 0
	case aerr != nil:
		return -1
	case berr != nil:
		return 1
	}
	for i := 0; i < len(at) && i < len(bt); i++ {
		if d := tokenRank(at[i]) - tokenRank(bt[i]); d != 0 {
			return d
		}
		if at[i] != bt[i] {
			// Two different literals: no subject matches both; order them
			// by text so the order is total and deterministic.
			if at[i] < bt[i] {
				return 1
			}
			return -1
		}
	}
	return len(at) - len(bt)
}

// tokenRank: a literal describes a subject more narrowly than '*', and '*'
// more narrowly than '>'.
func tokenRank(token string) int {
	switch token {
	case fullWildcard:
		return 0
	case singleWildcard:
		return 1
	}
	return 2
}
