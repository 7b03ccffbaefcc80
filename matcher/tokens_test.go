package matcher

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestTokenizeAgreesWithTokenKey checks Match's tokenizer, which finds the
// separators 8 bytes at a time and computes every key in one loop, against
// the writers' path (tokenize, then tokenKey of each token) on subjects of
// every length from 1 byte to past a word, tokens of 1 to 12 bytes placed
// at every offset.
func TestTokenizeAgreesWithTokenKey(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20_000 {
		tokens := make([]string, 1+rng.IntN(6))
		for i := range tokens {
			b := make([]byte, 1+rng.IntN(12))
			for j := range b {
				b[j] = "abcxyz0189-_é"[rng.IntN(13)]
			}
			tokens[i] = string(b)
		}
		subject := strings.Join(tokens, ".")
		var ms subjectTokens
		if !ms.tokenize(subject) {
			t.Fatalf("tokenize(%q) refused a valid subject", subject)
		}
		var buf [MaxTokens]string
		want, err := tokenize(subject, buf[:0], false)
		if err != nil {
			t.Fatalf("the writers' tokenize(%q): %v", subject, err)
		}
		if ms.n != len(want) {
			t.Fatalf("tokenize(%q) found %d tokens, want %d", subject, ms.n, len(want))
		}
		for i, tok := range want {
			if got := ms.token(i); got != tok {
				t.Fatalf("tokenize(%q): token %d = %q, want %q", subject, i, got, tok)
			}
			if ms.keys[i] != tokenKey(tok) {
				t.Fatalf("tokenize(%q): key of token %d (%q) = %#x, want %#x", subject, i, tok, ms.keys[i], tokenKey(tok))
			}
		}
	}
}
