package matcher_test

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/weighstation/weighstation/internal/subjectcases"
	"github.com/weighstation/weighstation/matcher"
)

var subjectCases = subjectcases.Cases

func TestValidatePatternNamesTheRule(t *testing.T) {
	for _, tc := range subjectCases {
		t.Run(shortName(tc.Subject), func(t *testing.T) {
			err := matcher.ValidatePattern(tc.Subject)
			if tc.Rule == "" {
				if err != nil {
					t.Fatalf("ValidatePattern(%q) = %v, want nil", tc.Subject, err)
				}
				return
			}
			if !errors.Is(err, matcher.ErrInvalidSubject) {
				t.Fatalf("ValidatePattern(%q) = %v, want ErrInvalidSubject", tc.Subject, err)
			}
			var se *matcher.SubjectError
			if !errors.As(err, &se) || se.Rule != tc.Rule || !strings.Contains(err.Error(), tc.Rule) {
				t.Fatalf("ValidatePattern(%q) = %v, want rule %q", tc.Subject, err, tc.Rule)
			}
		})
	}
}

func TestValidateSubjectRefusesWildcards(t *testing.T) {
	for _, tc := range subjectCases {
		t.Run(shortName(tc.Subject), func(t *testing.T) {
			err := matcher.ValidateSubject(tc.Subject)
			if (err == nil) != tc.Literal {
				t.Fatalf("ValidateSubject(%q) = %v, want valid=%v", tc.Subject, err, tc.Literal)
			}
			if tc.Rule == "" && !tc.Literal {
				var se *matcher.SubjectError
				if !errors.As(err, &se) || se.Rule != matcher.RuleNoWildcards {
					t.Fatalf("ValidateSubject(%q) = %v, want rule %q", tc.Subject, err, matcher.RuleNoWildcards)
				}
			}
		})
	}
}

// withinLimits reports whether s is inside weighstation's explicit limits,
// where nats-server has none.
func withinLimits(s string) bool {
	return len(s) <= matcher.MaxSubjectLength && strings.Count(s, ".") < matcher.MaxTokens
}

// checkAgainstNATS is the oracle check used by the table and the fuzz target.
func checkAgainstNATS(t *testing.T, s string) {
	t.Helper()
	if !withinLimits(s) {
		if matcher.ValidatePattern(s) == nil && len(s) > matcher.MaxSubjectLength {
			t.Fatalf("ValidatePattern(%q) accepted a subject over MaxSubjectLength", s)
		}
		return
	}
	wantPattern := server.IsValidSubject(s)
	wantLiteral := wantPattern && server.IsValidLiteralSubject(s)
	if got := matcher.ValidatePattern(s) == nil; got != wantPattern {
		t.Fatalf("ValidatePattern(%q) valid=%v, server.IsValidSubject=%v", s, got, wantPattern)
	}
	if got := matcher.ValidateSubject(s) == nil; got != wantLiteral {
		t.Fatalf("ValidateSubject(%q) valid=%v, server.IsValidSubject&&IsValidLiteralSubject=%v", s, got, wantLiteral)
	}
	// Match has its own allocation-free validation, reading 8 bytes at a
	// time: it must accept exactly the valid literal subjects.
	if got := len(matchEverything.Match(s, nil)) == 1; got != wantLiteral {
		t.Fatalf("Match(%q) accepted=%v, server.IsValidSubject&&IsValidLiteralSubject=%v", s, got, wantLiteral)
	}
}

// matchEverything has '>' subscribed, so Match returns one value for every
// subject it accepts.
var matchEverything = func() *matcher.Trie[int] {
	tr := matcher.New[int](matcher.WithoutCache())
	if err := tr.Subscribe(">", 1); err != nil {
		panic(err)
	}
	return tr
}()

func TestValidationAgreesWithNATSServer(t *testing.T) {
	for _, tc := range subjectCases {
		checkAgainstNATS(t, tc.Subject)
	}
	// Every string of up to 4 bytes over an alphabet of the characters that
	// matter: separators, wildcards, whitespace and ordinary bytes.
	alphabet := []byte{'a', '.', '*', '>', ' ', '\t', '\n', '\r', '\f', '\v', 'b'}
	var gen func(prefix []byte, depth int)
	gen = func(prefix []byte, depth int) {
		checkAgainstNATS(t, string(prefix))
		if depth == 0 {
			return
		}
		for _, c := range alphabet {
			gen(append(prefix, c), depth-1)
		}
	}
	gen(nil, 4)
	// Longer strings, so that Match's word-at-a-time scan sees the
	// interesting bytes at every offset of a word, next to bytes just
	// above and below '.' and bytes with the high bit set.
	rng := rand.New(rand.NewPCG(3, 5))
	long := append(alphabet, '-', '/', 0, 0x7f, 0x80, 0xc3, 0xa9, 0xff, 'z', '0')
	for range 50_000 {
		b := make([]byte, 1+rng.IntN(40))
		for i := range b {
			if rng.IntN(3) == 0 {
				b[i] = long[rng.IntN(len(long))]
			} else {
				b[i] = 'a' + byte(rng.IntN(26))
			}
		}
		checkAgainstNATS(t, string(b))
	}
}

func FuzzValidate(f *testing.F) {
	for _, tc := range subjectCases {
		f.Add(tc.Subject)
	}
	f.Fuzz(func(t *testing.T, s string) { checkAgainstNATS(t, s) })
}

func TestCovers(t *testing.T) {
	tests := []struct {
		pattern, sub string
		want         bool
	}{
		{"orders.*", "orders.x", true},
		{"orders.*", "orders.*", true},
		{"orders.*", "orders.>", false},
		{"orders.>", "orders.>", true},
		{"orders.>", "orders.x", true},
		{"orders.>", "orders.*.y", true},
		{"orders.>", "orders", false},
		{"orders.x", "orders.*", false},
		{"orders.x", "orders.x", true},
		{"orders.x", "orders.y", false},
		{"*.x", "orders.x", true},
		{"*.x", "*.*", false},
		{"*.*", "*.x", true},
		{">", "a", true},
		{">", ">", true},
		{">", "a.b.c.>", true},
		{"*", ">", false},
		{"a.*", "a.b.c", false},
		{"a.b.c", "a.b", false},
		{"a.b", "a.b.c", false},
		{"_INBOX.>", "_INBOX.abc.>", true},
		{"bad..pattern", "a", false},
		{"a", "bad..pattern", false},
	}
	for _, tc := range tests {
		t.Run(tc.pattern+"_covers_"+tc.sub, func(t *testing.T) {
			if got := matcher.Covers(tc.pattern, tc.sub); got != tc.want {
				t.Fatalf("Covers(%q, %q) = %v, want %v", tc.pattern, tc.sub, got, tc.want)
			}
		})
	}
}

// TestCoversAgreesWithMatching checks containment against its definition on
// a small universe: pattern covers sub iff every subject sub matches, the
// pattern matches too.
func TestCoversAgreesWithMatching(t *testing.T) {
	words := []string{"a", "b", "*", ">"}
	var patterns []string
	var build func(prefix string, depth int)
	build = func(prefix string, depth int) {
		if prefix != "" && matcher.ValidatePattern(prefix) == nil {
			patterns = append(patterns, prefix)
		}
		if depth == 0 {
			return
		}
		for _, w := range words {
			p := w
			if prefix != "" {
				p = prefix + "." + w
			}
			build(p, depth-1)
		}
	}
	build("", 3)
	// Subjects up to 4 tokens over {a, b, c}: 'c' stands for any token
	// neither pattern names, and the 4th token for "more tokens".
	var subjects []string
	var gen func(prefix string, depth int)
	gen = func(prefix string, depth int) {
		if prefix != "" {
			subjects = append(subjects, prefix)
		}
		if depth == 0 {
			return
		}
		for _, w := range []string{"a", "b", "c"} {
			s := w
			if prefix != "" {
				s = prefix + "." + w
			}
			gen(s, depth-1)
		}
	}
	gen("", 4)
	matches := func(pattern, subject string) bool {
		tr := matcher.New[int]()
		if err := tr.Subscribe(pattern, 1); err != nil {
			t.Fatal(err)
		}
		return len(tr.Match(subject, nil)) == 1
	}
	for _, p := range patterns {
		for _, s := range patterns {
			want := true
			for _, subj := range subjects {
				if matches(s, subj) && !matches(p, subj) {
					want = false
					break
				}
			}
			if got := matcher.Covers(p, s); got != want {
				t.Errorf("Covers(%q, %q) = %v, by definition %v", p, s, got, want)
			}
		}
	}
}

func shortName(s string) string {
	if len(s) > 40 {
		return s[:20] + "..." + s[len(s)-10:]
	}
	if s == "" {
		return "empty"
	}
	return s
}

func TestCompareSpecificity(t *testing.T) {
	tests := []struct {
		a, b string
		want int // sign
	}{
		{"orders.eu", "orders.*", 1},
		{"orders.*", "orders.>", 1},
		{"orders.eu", "orders.>", 1},
		{"orders.*.created", "orders.>", 1},
		{"orders.eu.>", "orders.*.created", 1},
		{">", "*", -1},
		{"orders.>", "orders.eu.>", -1},
		{"orders.*", "orders.*", 0},
		{"a.b", "a.b.c", -1}, // longer beats shorter
		{"bad..pattern", "orders.>", -1},
	}
	for _, tc := range tests {
		t.Run(tc.a+"_vs_"+tc.b, func(t *testing.T) {
			got := matcher.CompareSpecificity(tc.a, tc.b)
			if sign(got) != tc.want {
				t.Fatalf("CompareSpecificity(%q, %q) = %d, want sign %d", tc.a, tc.b, got, tc.want)
			}
			if back := matcher.CompareSpecificity(tc.b, tc.a); sign(back) != -tc.want {
				t.Fatalf("CompareSpecificity(%q, %q) = %d, not antisymmetric", tc.b, tc.a, back)
			}
		})
	}
}

func sign(x int) int {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return 0
}
