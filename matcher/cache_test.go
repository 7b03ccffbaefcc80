package matcher_test

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/weighstation/weighstation/matcher"
)

func mustSubscribe(t testing.TB, tr *matcher.Trie[int], pattern string, v int) {
	t.Helper()
	if err := tr.Subscribe(pattern, v); err != nil {
		t.Fatalf("Subscribe(%q, %d): %v", pattern, v, err)
	}
}

func mustUnsubscribe(t testing.TB, tr *matcher.Trie[int], pattern string, v int) {
	t.Helper()
	removed, err := tr.Unsubscribe(pattern, v)
	if err != nil || !removed {
		t.Fatalf("Unsubscribe(%q, %d) = %v, %v; want true, nil", pattern, v, removed, err)
	}
}

func sortedMatch(tr *matcher.Trie[int], subject string) []int {
	got := tr.Match(subject, nil)
	slices.Sort(got)
	return got
}

func statsOf(t testing.TB, tr *matcher.Trie[int]) matcher.CacheStats {
	t.Helper()
	s, ok := matcher.CacheStatsOf(tr)
	if !ok {
		t.Fatal("the trie has no cache counters")
	}
	return s
}

// TestCacheAdmitsOnSecondMissAndHitsWithoutAllocating follows one subject
// through the cache: a first miss only marks it, the second fills, later
// matches hit, with no allocation and the same values a walk finds.
func TestCacheAdmitsOnSecondMissAndHitsWithoutAllocating(t *testing.T) {
	tr := matcher.New[int](matcher.WithCacheCounters())
	for i, p := range []string{"a.b.c", "a.*.c", "a.>", "*.b.*", ">", "x.y"} {
		mustSubscribe(t, tr, p, i)
	}
	want := []int{0, 1, 2, 3, 4}
	for i, wantStats := range []matcher.CacheStats{
		{Misses: 1, NotAdmitted: 1},
		{Misses: 2, NotAdmitted: 1, Fills: 1},
		{Hits: 1, Misses: 2, NotAdmitted: 1, Fills: 1},
	} {
		if got := sortedMatch(tr, "a.b.c"); !slices.Equal(got, want) {
			t.Fatalf("match %d: Match(a.b.c) = %v, want %v", i+1, got, want)
		}
		if got := statsOf(t, tr); got != wantStats {
			t.Fatalf("after match %d: counters %+v, want %+v", i+1, got, wantStats)
		}
	}
	buf := make([]int, 0, 16)
	allocs := testing.AllocsPerRun(1000, func() { buf = tr.Match("a.b.c", buf[:0]) })
	if allocs != 0 {
		t.Fatalf("a cache hit allocates %.2f times, want 0", allocs)
	}
	if s := statsOf(t, tr); s.Hits < 1000 || s.Fills != 1 {
		t.Fatalf("after the allocation runs: counters %+v, want >= 1000 hits and still 1 fill", s)
	}
	slices.Sort(buf)
	if !slices.Equal(buf, want) {
		t.Fatalf("hit returned %v, want %v", buf, want)
	}
	// The result is appended after what dst already holds.
	if got := tr.Match("a.b.c", []int{-1}); len(got) != 6 || got[0] != -1 {
		t.Fatalf("Match with a non-empty dst = %v, want -1 followed by 5 values", got)
	}
}

// TestCacheWritesInvalidate caches results, then checks that each kind of
// write is seen by the next match: a subscribe through a wildcard far from
// the subject's literal path, an unsubscribe, and a write that changes
// nothing (which still invalidates: it cannot know in advance).
func TestCacheWritesInvalidate(t *testing.T) {
	tr := matcher.New[int](matcher.WithCacheAdmitAll(), matcher.WithCacheCounters())
	mustSubscribe(t, tr, "orders.eu.new", 1)
	steps := []struct {
		name  string
		write func()
		want  []int
	}{
		{"subscribe '>' at the root", func() { mustSubscribe(t, tr, ">", 2) }, []int{1, 2}},
		{"subscribe '*' in the middle", func() { mustSubscribe(t, tr, "orders.*.new", 3) }, []int{1, 2, 3}},
		{"unsubscribe the literal", func() { mustUnsubscribe(t, tr, "orders.eu.new", 1) }, []int{2, 3}},
		{"re-subscribe an existing pair", func() { mustSubscribe(t, tr, ">", 2) }, []int{2, 3}},
		{"unsubscribe what is not there", func() { _, _ = tr.Unsubscribe("orders.us.new", 9) }, []int{2, 3}},
		{"snapshot", func() { tr.Snapshot() }, []int{2, 3}},
	}
	if got := sortedMatch(tr, "orders.eu.new"); !slices.Equal(got, []int{1}) {
		t.Fatalf("before any write: %v, want [1]", got)
	}
	for _, s := range steps {
		sortedMatch(tr, "orders.eu.new") // cached (admission is forced)
		s.write()
		before := statsOf(t, tr)
		if got := sortedMatch(tr, "orders.eu.new"); !slices.Equal(got, s.want) {
			t.Fatalf("after %s: Match = %v, want %v", s.name, got, s.want)
		}
		after := statsOf(t, tr)
		hit := after.Hits > before.Hits
		// A snapshot does not change the contents, so the cached result
		// stays valid; every other step is a write.
		if wantHit := s.name == "snapshot"; hit != wantHit {
			t.Fatalf("after %s: hit = %v, want %v (counters %+v)", s.name, hit, wantHit, after)
		}
	}
}

// TestCacheWriteDuringMissIsNotCached makes a write happen inside a missing
// Match, between its walk and its check of the version word: the walk must
// be redone, the fill abandoned, and the next match must see the write.
func TestCacheWriteDuringMissIsNotCached(t *testing.T) {
	var tr *matcher.Trie[int]
	writes := 0
	tr = matcher.New[int](matcher.WithCacheAdmitAll(), matcher.WithCacheCounters(), matcher.WithCacheAfterMissMatch(func() {
		if writes == 0 {
			writes++
			mustSubscribe(t, tr, "a.*", 2)
		}
	}))
	mustSubscribe(t, tr, "a.b", 1)
	// The first walk, unvalidated, saw the version word move: the match
	// walks again, validating, and finds the subscribe made inside it.
	if got := sortedMatch(tr, "a.b"); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("first Match = %v, want [1 2]", got)
	}
	if s := statsOf(t, tr); s.Fills != 0 || s.FillsAborted != 1 {
		t.Fatalf("counters %+v, want no fill and one abandoned", s)
	}
	if got := sortedMatch(tr, "a.b"); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("Match after the write = %v, want [1 2]", got)
	}
	if got := sortedMatch(tr, "a.b"); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("third Match = %v, want [1 2]", got)
	}
	if s := statsOf(t, tr); s.Fills != 1 || s.Hits != 1 {
		t.Fatalf("counters %+v, want the second match filled and the third hit", s)
	}
}

// TestCacheRotationDoesNotFill rotates through many more subjects than the
// admission filter remembers: no subject comes round before its mark is
// overwritten, so nothing is ever stored, while a subject repeated among
// them is admitted.
func TestCacheRotationDoesNotFill(t *testing.T) {
	tr := matcher.New[int](matcher.WithCacheCounters())
	mustSubscribe(t, tr, "r.*", 1)
	const distinct = 40 * matcher.DefaultCacheSize
	for round := range 2 {
		for i := range distinct {
			if got := tr.Match(fmt.Sprintf("r.%d", i), nil); len(got) != 1 {
				t.Fatalf("round %d: Match(r.%d) = %v, want [1]", round, i, got)
			}
		}
	}
	if s := statsOf(t, tr); s.Fills != 0 || s.Misses != 2*distinct {
		t.Fatalf("after rotating over %d subjects twice: counters %+v, want %d misses and no fill", distinct, s, 2*distinct)
	}
	for range 3 {
		tr.Match("r.hot", nil)
	}
	if s := statsOf(t, tr); s.Fills != 1 || s.Hits != 1 {
		t.Fatalf("a subject matched three times: counters %+v, want 1 fill and 1 hit", s)
	}
}

// TestCacheIsBounded fills with far more subjects than the bound and counts
// the live entries; it also checks the options that size the cache.
func TestCacheIsBounded(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []matcher.Option
		max  int
	}{
		{"default", nil, matcher.DefaultCacheSize},
		{"16 entries", []matcher.Option{matcher.WithCacheSize(16)}, 16},
		{"10 entries round up to 16", []matcher.Option{matcher.WithCacheSize(10)}, 16},
		{"off", []matcher.Option{matcher.WithoutCache()}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := matcher.New[int](append(tc.opts, matcher.WithCacheAdmitAll())...)
			mustSubscribe(t, tr, "s.>", 1)
			for i := range 8 * matcher.DefaultCacheSize {
				if got := tr.Match(fmt.Sprintf("s.%d", i), nil); len(got) != 1 {
					t.Fatalf("Match(s.%d) = %v", i, got)
				}
			}
			n := matcher.CacheEntries(tr)
			if n > tc.max || (tc.max > 0 && n < tc.max/2) {
				t.Fatalf("%d entries after %d distinct subjects, want between %d and %d", n, 8*matcher.DefaultCacheSize, tc.max/2, tc.max)
			}
		})
	}
}

// TestCacheSizeIsBoundedByMaxCacheSize: a bound past MaxCacheSize is taken
// as MaxCacheSize (the largest int looped forever in the rounding to a
// power of two), and one at it is kept.
func TestCacheSizeIsBoundedByMaxCacheSize(t *testing.T) {
	for _, tc := range []struct {
		size, slots int
	}{
		{matcher.MaxCacheSize - 1, matcher.MaxCacheSize},
		{matcher.MaxCacheSize, matcher.MaxCacheSize},
		{matcher.MaxCacheSize + 1, matcher.MaxCacheSize},
		{math.MaxInt, matcher.MaxCacheSize},
		{3, 4},
		{1, 2},
		{0, 0},
		{-1, 0},
	} {
		tr := matcher.New[int](matcher.WithCacheSize(tc.size))
		if got := matcher.CacheSlots(tr); got != tc.slots {
			t.Errorf("WithCacheSize(%d): %d slots, want %d", tc.size, got, tc.slots)
		}
	}
}

// TestCacheSkipsLargeResults: a result too large to copy cheaply is matched
// every time, never stored.
func TestCacheSkipsLargeResults(t *testing.T) {
	tr := matcher.New[int](matcher.WithCacheAdmitAll(), matcher.WithCacheCounters())
	for v := range 1000 {
		mustSubscribe(t, tr, "big", v)
	}
	for range 3 {
		if got := tr.Match("big", nil); len(got) != 1000 {
			t.Fatalf("Match(big) found %d values, want 1000", len(got))
		}
	}
	if s := statsOf(t, tr); s.Fills != 0 || s.Misses != 3 {
		t.Fatalf("counters %+v, want 3 misses and no fill", s)
	}
}

// TestBrokenCacheIsCaught shows that the differential harness notices a
// cache whose entries outlive writes: with the version word left alone, a
// cached result goes stale at the first write that changes it.
func TestBrokenCacheIsCaught(t *testing.T) {
	h := newDiffHarness(matcher.New[int](matcher.WithCacheAdmitAll(), matcher.WithBrokenCacheVersion()))
	src := readHeavyOps(newRand(21))
	for i := range 100_000 {
		if msg := h.apply(src.op()); msg != "" {
			t.Logf("caught at op %d: %s", i, msg)
			return
		}
	}
	t.Fatal("a cache that is never invalidated passed 100,000 operations: the differential test has no teeth for the cache")
}

// FuzzCacheInvalidation interleaves subscribes, unsubscribes, snapshots and
// matches of a small drifting set of subjects on a trie whose cache fills
// on every miss, one with the default admission, and one without a cache,
// and requires every match to agree: a stale entry served after a write
// shows up as a difference.
func FuzzCacheInvalidation(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte("match a.b twice, subscribe a.*, match a.b again"))
	f.Add([]byte{4, 0, 0, 4, 0, 0, 0, 1, 0, 0, 4, 0, 0, 2, 1, 0, 0, 4, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		pos := 0
		src := &opSource{readHeavy: true, next: func(n int) int {
			if pos >= len(data) {
				return 0
			}
			b := int(data[pos])
			pos++
			return b % n
		}}
		tries := []*matcher.Trie[int]{
			matcher.New[int](matcher.WithCacheAdmitAll()),
			matcher.New[int](),
			matcher.New[int](matcher.WithoutCache()),
		}
		compare := func(step int, subject string) {
			want := sortedMatch(tries[len(tries)-1], subject)
			for i, tr := range tries[:len(tries)-1] {
				if got := sortedMatch(tr, subject); !slices.Equal(got, want) {
					t.Fatalf("step %d: trie %d: Match(%q) = %v, the uncached trie says %v", step, i, subject, got, want)
				}
			}
		}
		for step := 0; pos < len(data); step++ {
			switch src.next(8) {
			case 0, 1:
				p, v := src.pattern(), src.next(4)
				for _, tr := range tries {
					mustSubscribe(t, tr, p, v)
				}
			case 2:
				p, v := src.pattern(), src.next(4)
				var removed []bool
				for _, tr := range tries {
					r, err := tr.Unsubscribe(p, v)
					if err != nil {
						t.Fatal(err)
					}
					removed = append(removed, r)
				}
				if slices.Contains(removed, !removed[0]) {
					t.Fatalf("step %d: Unsubscribe(%q, %d) = %v on the three tries", step, p, v, removed)
				}
			case 3:
				for _, tr := range tries {
					tr.Snapshot()
				}
			}
			// Match twice, so that with forced admission the second
			// is a hit whenever the first filled.
			subject := src.workingSubject()
			compare(step, subject)
			compare(step, subject)
		}
	})
}
