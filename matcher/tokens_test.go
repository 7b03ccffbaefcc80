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
// at every offset, and now and then one of 250 to 269.
func TestTokenizeAgreesWithTokenKey(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20_000 {
		tokens := make([]string, 1+rng.IntN(6))
		for i := range tokens {
			n := 1 + rng.IntN(12)
			if rng.IntN(50) == 0 {
				n = 250 + rng.IntN(20) // around the key's length field's bound
			}
			b := make([]byte, n)
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

// TestTokenKeyProvesShortTokensEqual: a key is trusted without a string
// compare for a token of up to 7 bytes, so no other token may share it,
// however long: the length field saturates instead of wrapping (a 263-byte
// token that began with a 7-byte one had its key when the length was kept
// modulo 256).
func TestTokenKeyProvesShortTokensEqual(t *testing.T) {
	for _, short := range []string{"a", "abcdefg", "\x00", "ab\x00"} {
		for _, n := range []int{8, 255, 256, 256 + len(short), 263, 511, 512 + len(short), 1024} {
			long := short + strings.Repeat("\x00", n-len(short))
			if tokenKey(short) == tokenKey(long) {
				t.Errorf("tokenKey(%q) == tokenKey of a %d-byte token beginning with it: %#x", short, n, tokenKey(short))
			}
		}
	}
}
