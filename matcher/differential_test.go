package matcher_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nats-io/nats-server/v2/server/gsl"

	"github.com/weighstation/weighstation/matcher"
)

// The differential tests drive the trie and nats-server's gsl with the same
// operations and compare every match. gsl is the oracle for match results
// only: its Count drifts on duplicate inserts, so Len is checked against a
// plain set of pairs.

type opKind uint8

const (
	opSubscribe opKind = iota
	opUnsubscribe
	opMatch
	opCheckAll // compare Len and a snapshot's pairs with the model
)

type op struct {
	kind    opKind
	subject string // a pattern for (un)subscribe, a literal subject for match
	value   int
}

type pair struct {
	pattern string
	value   int
}

// diffHarness holds the three implementations under comparison.
type diffHarness struct {
	trie   *matcher.Trie[int]
	oracle *gsl.GenericSublist[int]
	model  map[pair]bool
	buf    []int
}

func newDiffHarness(trie *matcher.Trie[int]) *diffHarness {
	return &diffHarness{trie: trie, oracle: gsl.NewSublist[int](), model: map[pair]bool{}}
}

// apply runs o on all three and returns a description of the first
// disagreement, or "".
func (h *diffHarness) apply(o op) string {
	switch o.kind {
	case opSubscribe:
		if err := h.trie.Subscribe(o.subject, o.value); err != nil {
			return fmt.Sprintf("Subscribe(%q, %d): %v", o.subject, o.value, err)
		}
		if err := h.oracle.Insert(o.subject, o.value); err != nil {
			return fmt.Sprintf("gsl Insert(%q): %v", o.subject, err)
		}
		h.model[pair{o.subject, o.value}] = true
	case opUnsubscribe:
		removed, err := h.trie.Unsubscribe(o.subject, o.value)
		if err != nil {
			return fmt.Sprintf("Unsubscribe(%q, %d): %v", o.subject, o.value, err)
		}
		want := h.model[pair{o.subject, o.value}]
		if removed != want {
			return fmt.Sprintf("Unsubscribe(%q, %d) = %v, model says %v", o.subject, o.value, removed, want)
		}
		if oracleErr := h.oracle.Remove(o.subject, o.value); (oracleErr == nil) != want {
			return fmt.Sprintf("gsl Remove(%q, %d) = %v, model says present=%v", o.subject, o.value, oracleErr, want)
		}
		delete(h.model, pair{o.subject, o.value})
	case opMatch:
		h.buf = h.trie.Match(o.subject, h.buf[:0])
		got := slices.Clone(h.buf)
		var want []int
		h.oracle.Match(o.subject, func(v int) { want = append(want, v) })
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			return fmt.Sprintf("Match(%q) = %v, gsl = %v", o.subject, got, want)
		}
	case opCheckAll:
		if n := h.trie.Len(); n != len(h.model) {
			return fmt.Sprintf("Len = %d, model has %d pairs", n, len(h.model))
		}
		seen := map[pair]bool{}
		for p, v := range h.trie.Snapshot().All() {
			if seen[pair{p, v}] || !h.model[pair{p, v}] {
				return fmt.Sprintf("snapshot yields (%q, %d): duplicate or not in the model", p, v)
			}
			seen[pair{p, v}] = true
		}
		if len(seen) != len(h.model) {
			return fmt.Sprintf("snapshot yields %d pairs, model has %d", len(seen), len(h.model))
		}
	}
	return ""
}

// opSource turns a stream of choices into valid operations over a small
// vocabulary, so that patterns collide and wildcards overlap often.
type opSource struct {
	next func(n int) int // a choice in [0, n)
	// readHeavy: 96% matches, mostly of a small working set of subjects
	// that drifts, so that a cache hits between writes; the writes then
	// test invalidation. Otherwise 70% writes, which tests the trie.
	readHeavy bool
	working   []string
	// values is the number of distinct values (8 unless set): with 8,
	// every set is a small one; with hundreds, sets grow into the HAMT
	// form with its tail, and shrink back.
	values int
}

func (s *opSource) value() int {
	if s.values == 0 {
		return s.next(8)
	}
	return s.next(s.values)
}

var diffWords = []string{"a", "b", "c", "d"}

func (s *opSource) pattern() string {
	n := 1 + s.next(4)
	tokens := make([]string, n)
	for i := range tokens {
		switch r := s.next(10); {
		case r < 2:
			tokens[i] = "*"
		case r < 3 && i == n-1:
			tokens[i] = ">"
		default:
			tokens[i] = diffWords[s.next(len(diffWords))]
		}
	}
	return subjectFrom(tokens)
}

func (s *opSource) subject() string {
	n := 1 + s.next(5)
	tokens := make([]string, n)
	for i := range tokens {
		tokens[i] = diffWords[s.next(len(diffWords))]
	}
	return subjectFrom(tokens)
}

// workingSubject draws from 8 subjects, one of which is replaced by a fresh
// subject in one draw in 50.
func (s *opSource) workingSubject() string {
	const size = 8
	if len(s.working) < size {
		s.working = append(s.working, s.subject())
		return s.working[len(s.working)-1]
	}
	i := s.next(size)
	if s.next(50) == 0 {
		s.working[i] = s.subject()
	}
	return s.working[i]
}

func (s *opSource) op() op {
	r := s.next(1000)
	if s.readHeavy {
		switch {
		case r < 20:
			return op{kind: opSubscribe, subject: s.pattern(), value: s.value()}
		case r < 40:
			return op{kind: opUnsubscribe, subject: s.pattern(), value: s.value()}
		case r < 999:
			return op{kind: opMatch, subject: s.workingSubject()}
		}
		return op{kind: opCheckAll}
	}
	switch {
	case r < 400:
		return op{kind: opSubscribe, subject: s.pattern(), value: s.value()}
	case r < 700:
		return op{kind: opUnsubscribe, subject: s.pattern(), value: s.value()}
	case r < 999:
		return op{kind: opMatch, subject: s.subject()}
	default:
		return op{kind: opCheckAll}
	}
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }

func readHeavyOps(rng *rand.Rand) *opSource { return &opSource{next: rng.IntN, readHeavy: true} }

func subjectFrom(tokens []string) string {
	s := tokens[0]
	for _, t := range tokens[1:] {
		s += "." + t
	}
	return s
}

// cacheModes are the tries the differential and linearizability checks
// run on: without the result cache, on the write-heavy mix; and with it,
// admission forced so that every repeated subject is served from the cache,
// on the read-heavy mix, where the assertion that most matches hit shows
// the cache was really exercised.
var cacheModes = []struct {
	name      string
	readHeavy bool
	new       func() *matcher.Trie[int]
}{
	{"cache=off", false, func() *matcher.Trie[int] { return matcher.New[int](matcher.WithoutCache()) }},
	{"cache=on", true, func() *matcher.Trie[int] {
		return matcher.New[int](matcher.WithCacheAdmitAll(), matcher.WithCacheCounters())
	}},
}

// TestDifferentialAgainstGSL runs 1,000,000 random operations per cache
// mode (200,000 under -short, 250,000 under the race detector, which makes
// each operation about ten times dearer) and requires zero disagreements.
func TestDifferentialAgainstGSL(t *testing.T) {
	ops := 1_000_000
	switch {
	case testing.Short():
		ops = 200_000
	case raceEnabled:
		ops = 250_000
	}
	const seeds = 4 // several independent histories, each starting empty
	for _, mode := range cacheModes {
		t.Run(mode.name, func(t *testing.T) {
			var tries []*matcher.Trie[int]
			t.Run("seeds", func(t *testing.T) {
				for seed := range uint64(seeds) {
					tr := mode.new()
					tries = append(tries, tr)
					t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
						t.Parallel()
						src := &opSource{next: newRand(seed).IntN, readHeavy: mode.readHeavy}
						h := newDiffHarness(tr)
						for i := range ops / seeds {
							if msg := h.apply(src.op()); msg != "" {
								t.Fatalf("op %d: %s", i, msg)
							}
						}
						if msg := h.apply(op{kind: opCheckAll}); msg != "" {
							t.Fatal(msg)
						}
					})
				}
			})
			var total matcher.CacheStats
			for _, tr := range tries {
				s, ok := matcher.CacheStatsOf(tr)
				if !ok {
					continue
				}
				total.Hits += s.Hits
				total.Misses += s.Misses
				total.Bypassed += s.Bypassed
				total.Fills += s.Fills
			}
			if mode.readHeavy {
				t.Logf("cache: %d matches, %d hits (%.2f), %d fills", total.Matches(), total.Hits, total.HitRatio(), total.Fills)
				if total.HitRatio() <= 0.5 {
					t.Fatalf("hit ratio %.2f over %d matches, want above 0.5: the cache was not exercised", total.HitRatio(), total.Matches())
				}
			}
		})
	}
}

// TestDifferentialLargeSets is the write-heavy differential test with 300
// values instead of 8 (100,000 operations per seed, 20,000 under -short or
// the race detector: large results make each operation dearer), so that sets become large (the HAMT with its tail),
// their tails fill and flush, and they shrink back to slices.
func TestDifferentialLargeSets(t *testing.T) {
	ops := 100_000
	if testing.Short() || raceEnabled {
		ops = 20_000
	}
	for seed := range uint64(2) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			src := &opSource{next: newRand(100 + seed).IntN, values: 300}
			h := newDiffHarness(matcher.New[int](matcher.WithoutCache()))
			for i := range ops {
				if msg := h.apply(src.op()); msg != "" {
					t.Fatalf("op %d: %s", i, msg)
				}
			}
			if msg := h.apply(op{kind: opCheckAll}); msg != "" {
				t.Fatal(msg)
			}
		})
	}
}

// FuzzDifferential interprets the fuzzer's bytes as a sequence of operations.
func FuzzDifferential(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte("subscribe a.* then match a.b and unsubscribe it again"))
	f.Fuzz(func(t *testing.T, data []byte) {
		pos := 0
		src := &opSource{next: func(n int) int {
			if pos >= len(data) {
				return 0
			}
			b := int(data[pos])
			pos++
			return b % n
		}}
		h := newDiffHarness(matcher.New[int](matcher.WithoutCache()))
		for pos < len(data) {
			if msg := h.apply(src.op()); msg != "" {
				t.Fatal(msg)
			}
		}
		if msg := h.apply(op{kind: opCheckAll}); msg != "" {
			t.Fatal(msg)
		}
	})
}
