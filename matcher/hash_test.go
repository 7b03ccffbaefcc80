package matcher

import (
	"fmt"
	"strings"
	"testing"
)

// TestHashSubjectSpreadsSubjects checks the cache's subject hash: every
// byte of a subject counts, whatever its length (the last word overlaps
// the one before it, and short subjects are read a byte at a time), and
// subjects that differ in one token spread over the buckets. Under -race,
// checkptr also verifies that it never reads past a subject's end.
func TestHashSubjectSpreadsSubjects(t *testing.T) {
	for n := 1; n <= 40; n++ {
		base := []byte(strings.Repeat("a", n))
		seen := map[uint64]int{}
		for i := range n {
			s := append([]byte(nil), base...)
			s[i] = 'b'
			h := hashSubject(string(s))
			if j, ok := seen[h]; ok {
				t.Fatalf("length %d: changing byte %d or byte %d gives the same hash", n, i, j)
			}
			seen[h] = i
		}
		if hashSubject(string(base)) == hashSubject(string(base[:n-1])) {
			t.Fatalf("length %d: the same hash as its prefix of %d bytes", n, n-1)
		}
	}
	const buckets, subjects = 512, 8192
	load := make([]int, buckets)
	for i := range subjects {
		load[hashSubject(fmt.Sprintf("orders.eu.%d.created", i))%buckets]++
	}
	// 16 a bucket on average; a fair hash stays within about four times
	// that (a Poisson tail), a broken one piles subjects up.
	for b, n := range load {
		if n > 64 {
			t.Fatalf("bucket %d holds %d of %d subjects in %d buckets", b, n, subjects, buckets)
		}
	}
}
