package matcher_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/weighstation/weighstation/matcher"
)

func TestMatchSemantics(t *testing.T) {
	tests := []struct {
		name     string
		patterns []string // value i is subscribed through patterns[i]
		subject  string
		want     []int
	}{
		{"literal", []string{"foo.bar", "foo.baz"}, "foo.bar", []int{0}},
		{"star matches one token", []string{"foo.*"}, "foo.bar", []int{0}},
		{"star does not match two tokens", []string{"foo.*"}, "foo.bar.baz", nil},
		{"star does not match zero tokens", []string{"foo.*"}, "foo", nil},
		{"star in the middle", []string{"foo.*.baz"}, "foo.bar.baz", []int{0}},
		{"full wildcard matches one token", []string{"foo.>"}, "foo.bar", []int{0}},
		{"full wildcard matches many tokens", []string{"foo.>"}, "foo.bar.baz.qux", []int{0}},
		{"full wildcard needs at least one token", []string{"foo.>"}, "foo", nil},
		{"lone full wildcard matches everything", []string{">"}, "a.b.c", []int{0}},
		{"lone star matches single-token subjects", []string{"*"}, "a", []int{0}},
		{"prefix is not a match", []string{"foo.bar"}, "foo", nil},
		{"longer subject is not a match", []string{"foo"}, "foo.bar", nil},
		{"all matching patterns", []string{"a.b.c", "a.*.c", "a.>", "*.b.*", ">", "a.b", "x.>"}, "a.b.c", []int{0, 1, 2, 3, 4}},
		{"wildcard subject matches nothing", []string{"foo.*", "foo.>"}, "foo.*", nil},
		{"full wildcard subject matches nothing", []string{">"}, "foo.>", nil},
		{"invalid subject matches nothing", []string{">"}, "foo..bar", nil},
		{"whitespace subject matches nothing", []string{">"}, "foo bar", nil},
		{"empty subject matches nothing", []string{">"}, "", nil},
		{"tokens with wildcard characters are literals", []string{"foo*.bar", "foo.*"}, "foo*.bar", []int{0}},
	}
	for _, tc := range tests {
		for _, mode := range cacheModes {
			t.Run(tc.name+"/"+mode.name, func(t *testing.T) {
				tr := mode.new()
				for i, p := range tc.patterns {
					if err := tr.Subscribe(p, i); err != nil {
						t.Fatalf("Subscribe(%q): %v", p, err)
					}
				}
				// Three times: with the cache, the first fills and the
				// others hit.
				for range 3 {
					got := tr.Match(tc.subject, nil)
					slices.Sort(got)
					if !slices.Equal(got, tc.want) {
						t.Fatalf("Match(%q) = %v, want %v", tc.subject, got, tc.want)
					}
				}
				snapGot := tr.Snapshot().Match(tc.subject, nil)
				slices.Sort(snapGot)
				if !slices.Equal(snapGot, tc.want) {
					t.Fatalf("Snapshot().Match(%q) = %v, want %v", tc.subject, snapGot, tc.want)
				}
			})
		}
	}
}

func TestSubscribeIsIdempotentAndDuplicatesAcrossPatterns(t *testing.T) {
	tr := matcher.New[string]()
	for range 3 {
		if err := tr.Subscribe("orders.*", "billing"); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.Subscribe("orders.>", "billing"); err != nil {
		t.Fatal(err)
	}
	if got := tr.Len(); got != 2 {
		t.Fatalf("Len = %d, want 2 (one per distinct pattern)", got)
	}
	// One value through two matching patterns appears twice.
	if got := tr.Match("orders.eu", nil); !slices.Equal(got, []string{"billing", "billing"}) {
		t.Fatalf("Match = %v, want billing twice", got)
	}
	removed, err := tr.Unsubscribe("orders.*", "billing")
	if err != nil || !removed {
		t.Fatalf("Unsubscribe = %v, %v; want true, nil", removed, err)
	}
	removed, err = tr.Unsubscribe("orders.*", "billing")
	if err != nil || removed {
		t.Fatalf("second Unsubscribe = %v, %v; want false, nil", removed, err)
	}
	if got := tr.Match("orders.eu", nil); !slices.Equal(got, []string{"billing"}) {
		t.Fatalf("Match = %v, want billing once", got)
	}
}

func TestInvalidPatternsAreRefused(t *testing.T) {
	tr := matcher.New[int]()
	for _, p := range []string{"", "a..b", "a.>.b", "a b", "a."} {
		if err := tr.Subscribe(p, 1); err == nil {
			t.Errorf("Subscribe(%q) succeeded", p)
		}
		if _, err := tr.Unsubscribe(p, 1); err == nil {
			t.Errorf("Unsubscribe(%q) succeeded", p)
		}
	}
	if tr.Len() != 0 {
		t.Fatalf("Len = %d after refused subscribes", tr.Len())
	}
}

func TestSnapshotIsIsolatedFromLaterWrites(t *testing.T) {
	tr := matcher.New[int]()
	for i, p := range []string{"a.b", "a.*", "a.>", "c"} {
		if err := tr.Subscribe(p, i); err != nil {
			t.Fatal(err)
		}
	}
	snap := tr.Snapshot()
	if _, err := tr.Unsubscribe("a.b", 0); err != nil {
		t.Fatal(err)
	}
	if err := tr.Subscribe("a.b", 9); err != nil {
		t.Fatal(err)
	}
	if err := tr.Subscribe("d.e.f", 10); err != nil {
		t.Fatal(err)
	}
	got := snap.Match("a.b", nil)
	slices.Sort(got)
	if !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("snapshot Match = %v, want [0 1 2]", got)
	}
	var pairs []string
	for p, v := range snap.All() {
		pairs = append(pairs, fmt.Sprintf("%s=%d", p, v))
	}
	slices.Sort(pairs)
	if want := []string{"a.*=1", "a.>=2", "a.b=0", "c=3"}; !slices.Equal(pairs, want) {
		t.Fatalf("snapshot All = %v, want %v", pairs, want)
	}
	if snap.Len() != 4 || tr.Len() != 5 {
		t.Fatalf("Len: snapshot %d (want 4), live %d (want 5)", snap.Len(), tr.Len())
	}
	live := tr.Match("a.b", nil)
	slices.Sort(live)
	if !slices.Equal(live, []int{1, 2, 9}) {
		t.Fatalf("live Match = %v, want [1 2 9]", live)
	}
}

// TestRemovalCompressesTheTrie checks that emptied branches disappear: after
// unsubscribing everything, a snapshot walks nothing and matching a deep
// subject is as cheap as on an empty trie (no tombs left on the path).
func TestRemovalCompressesTheTrie(t *testing.T) {
	tr := matcher.New[int]()
	patterns := []string{"a.b.c.d", "a.b.c", "a.b.*.d", "a.>", "a.b.c.d.e.f"}
	for i, p := range patterns {
		if err := tr.Subscribe(p, i); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range patterns {
		if removed, err := tr.Unsubscribe(p, i); err != nil || !removed {
			t.Fatalf("Unsubscribe(%q) = %v, %v", p, removed, err)
		}
	}
	if n := tr.Len(); n != 0 {
		t.Fatalf("Len = %d after removing everything", n)
	}
	if got := matcher.NodeCount(tr); got != 1 {
		t.Fatalf("trie keeps %d I-nodes after removing everything, want 1 (the root)", got)
	}
}

// TestMatchDoesNotAllocate: a walk of the trie (cache off, with a set large
// enough to be a HAMT) and a cache hit both allocate nothing.
func TestMatchDoesNotAllocate(t *testing.T) {
	for _, mode := range cacheModes {
		t.Run(mode.name, func(t *testing.T) {
			tr := mode.new()
			for i, p := range []string{"a.b.c", "a.*.c", "a.>", "*.b.*", ">"} {
				if err := tr.Subscribe(p, i); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 40 { // a large set, stored as a HAMT
				if err := tr.Subscribe("a.b.c", 100+i); err != nil {
					t.Fatal(err)
				}
			}
			buf := make([]int, 0, 64)
			buf = tr.Match("a.b.c", buf[:0]) // with the cache: fills
			allocs := testing.AllocsPerRun(1000, func() { buf = tr.Match("a.b.c", buf[:0]) })
			if allocs != 0 {
				t.Fatalf("Match allocates %.1f times per call, want 0", allocs)
			}
			if len(buf) != 45 {
				t.Fatalf("Match found %d values, want 45", len(buf))
			}
			if s, ok := matcher.CacheStatsOf(tr); ok && s.Hits < 1000 {
				t.Fatalf("cache counters %+v: the runs were not hits", s)
			}
		})
	}
}

// TestTokensOfLengthsThatDifferBy256: a 7-byte token and a 263-byte one
// that begins with it are two patterns, in either order of subscription,
// in a C-node scanned by key and in one with a probing table (9 or more
// literal siblings). They were one when the key's length field wrapped.
func TestTokensOfLengthsThatDifferBy256(t *testing.T) {
	short := "abcdefg"
	long := short + strings.Repeat("\x00", 256)
	for _, siblings := range []int{0, 9} {
		for _, longFirst := range []bool{false, true} {
			t.Run(fmt.Sprintf("siblings=%d/longFirst=%v", siblings, longFirst), func(t *testing.T) {
				tr := matcher.New[int](matcher.WithoutCache())
				for i := range siblings {
					mustSubscribe(t, tr, fmt.Sprintf("p.s%d", i), 100+i)
				}
				if got := tr.Match("p."+short, nil); len(got) != 0 {
					t.Fatalf("before any, Match(p.%s) = %v", short, got)
				}
				order := []struct {
					token string
					value int
				}{{short, 1}, {long, 2}}
				if longFirst {
					order[0], order[1] = order[1], order[0]
				}
				mustSubscribe(t, tr, "p."+order[0].token, order[0].value)
				if got := tr.Match("p."+order[1].token, nil); len(got) != 0 {
					t.Fatalf("with only the %d-byte token subscribed, the %d-byte one matched %v", len(order[0].token), len(order[1].token), got)
				}
				mustSubscribe(t, tr, "p."+order[1].token, order[1].value)
				if got := tr.Match("p."+short, nil); !slices.Equal(got, []int{1}) {
					t.Fatalf("Match(p.<7 bytes>) = %v, want [1]", got)
				}
				if got := tr.Match("p."+long, nil); !slices.Equal(got, []int{2}) {
					t.Fatalf("Match(p.<263 bytes>) = %v, want [2]", got)
				}
				pairs := map[int]int{}
				for p, v := range tr.Snapshot().All() {
					pairs[v] = len(p)
				}
				if pairs[1] != len("p."+short) || pairs[2] != len("p."+long) {
					t.Fatalf("Snapshot has value 1 under a %d-byte pattern and 2 under a %d-byte one, want %d and %d", pairs[1], pairs[2], len("p."+short), len("p."+long))
				}
				if removed, err := tr.Unsubscribe("p."+short, 1); err != nil || !removed {
					t.Fatalf("Unsubscribe(p.<7 bytes>, 1) = %v, %v", removed, err)
				}
				if got := tr.Match("p."+long, nil); !slices.Equal(got, []int{2}) {
					t.Fatalf("after the short one left, Match(p.<263 bytes>) = %v, want [2]", got)
				}
			})
		}
	}
}

// TestLongTokensSharingAPrefix covers the literal lookup's two shortcuts:
// tokens of 8 bytes and more share a key when their first 7 bytes and
// length agree, so only the string compare tells them apart; and a level
// with more than 8 literals is searched through a probing table.
func TestLongTokensSharingAPrefix(t *testing.T) {
	for _, siblings := range []int{3, 8, 9, 40, 300} {
		t.Run(fmt.Sprintf("siblings=%d", siblings), func(t *testing.T) {
			tr := matcher.New[int]()
			for i := range siblings {
				// "customer-0001", "customer-0002", ...: same length, same
				// first 7 bytes.
				if err := tr.Subscribe(fmt.Sprintf("events.customer-%04d.created", i), i); err != nil {
					t.Fatal(err)
				}
			}
			for i := range siblings {
				got := tr.Match(fmt.Sprintf("events.customer-%04d.created", i), nil)
				if !slices.Equal(got, []int{i}) {
					t.Fatalf("Match(customer-%04d) = %v, want [%d]", i, got, i)
				}
			}
			if got := tr.Match(fmt.Sprintf("events.customer-%04d.created", siblings), nil); len(got) != 0 {
				t.Fatalf("Match of an unsubscribed sibling = %v, want nothing", got)
			}
			// Remove every other sibling: the table is rebuilt each time.
			for i := 0; i < siblings; i += 2 {
				if removed, err := tr.Unsubscribe(fmt.Sprintf("events.customer-%04d.created", i), i); err != nil || !removed {
					t.Fatalf("Unsubscribe(%d) = %v, %v", i, removed, err)
				}
			}
			for i := range siblings {
				got := tr.Match(fmt.Sprintf("events.customer-%04d.created", i), nil)
				if want := i%2 == 1; want != (len(got) == 1) {
					t.Fatalf("after removals, Match(customer-%04d) = %v", i, got)
				}
			}
		})
	}
}

// TestValidationDoesNotAllocate: the sidecar validates every published
// subject, so a valid subject or pattern must cost no allocation.
func TestValidationDoesNotAllocate(t *testing.T) {
	for name, validate := range map[string]func(){
		"ValidateSubject": func() { _ = matcher.ValidateSubject("orders.eu.created.v1") },
		"ValidatePattern": func() { _ = matcher.ValidatePattern("orders.*.created.>") },
	} {
		if allocs := testing.AllocsPerRun(1000, validate); allocs != 0 {
			t.Errorf("%s allocates %.1f times per call, want 0", name, allocs)
		}
	}
}

// TestConcurrentFanIn has goroutines subscribe and unsubscribe values of
// their own on one subject (a large set, whose tail they all extend) and on
// a sibling subject (so that their writes to the shared C-node race, fail
// and retry, leaving claimed tail slots that no version holds). Each checks
// that a match sees its own writes, and at the end the set holds exactly
// what each left subscribed.
func TestConcurrentFanIn(t *testing.T) {
	const (
		goroutines = 4
		perG       = 3000
	)
	rounds := 3
	if raceEnabled || testing.Short() {
		rounds = 1
	}
	for round := range rounds {
		tr := matcher.New[int](matcher.WithoutCache())
		for v := range 100 {
			if err := tr.Subscribe("fan.in", -1-v); err != nil {
				t.Fatal(err)
			}
		}
		errs := make(chan string, goroutines)
		kept := make([][]int, goroutines)
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(round), uint64(g)))
				var buf []int
				for i := range perG {
					v := g*perG + i
					subject := "fan.in"
					if rng.IntN(4) == 0 {
						subject = "fan.out"
					}
					_ = tr.Subscribe(subject, v)
					buf = tr.Match(subject, buf[:0])
					if !slices.Contains(buf, v) {
						errs <- fmt.Sprintf("goroutine %d: %s misses %d right after subscribing it", g, subject, v)
						return
					}
					if rng.IntN(3) == 0 {
						if removed, _ := tr.Unsubscribe(subject, v); !removed {
							errs <- fmt.Sprintf("goroutine %d: unsubscribing %d from %s found nothing", g, v, subject)
							return
						}
						buf = tr.Match(subject, buf[:0])
						if slices.Contains(buf, v) {
							errs <- fmt.Sprintf("goroutine %d: %s still has %d after unsubscribing it", g, subject, v)
							return
						}
					} else if subject == "fan.in" {
						kept[g] = append(kept[g], v)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for msg := range errs {
			t.Fatal(msg)
		}
		want := []int{}
		for v := range 100 {
			want = append(want, -1-v)
		}
		for _, k := range kept {
			want = append(want, k...)
		}
		slices.Sort(want)
		got := tr.Match("fan.in", nil)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: fan.in holds %d values, want %d", round, len(got), len(want))
		}
	}
}
