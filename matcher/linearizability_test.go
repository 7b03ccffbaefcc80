package matcher_test

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/nats-io/nats-server/v2/server/gsl"

	"github.com/weighstation/weighstation/matcher"
)

// The linearizability check records concurrent histories of subscribe,
// unsubscribe, match and snapshot on a small universe of patterns (so that
// operations collide on the same nodes) and asks porcupine whether some
// sequential order of them explains every result. The model's state is the
// set of (pattern, value) pairs as a bitmask.

var linPatterns = []string{"a", "a.b", "a.*", "*.b", "a.>", ">", "b.b", "a.b.c"}
var linSubjects = []string{"a", "b", "a.b", "b.b", "a.c", "a.b.c", "b.b.c"}

const linValues = 4 // pairs: len(linPatterns) * linValues <= 64

func pairBit(patternIdx, value int) uint64 { return 1 << (patternIdx*linValues + value) }

// linMatches[p][s] says whether linPatterns[p] matches linSubjects[s],
// computed with gsl so the model does not reuse the code under test.
var linMatches = func() [][]bool {
	m := make([][]bool, len(linPatterns))
	for p, pattern := range linPatterns {
		m[p] = make([]bool, len(linSubjects))
		for s, subject := range linSubjects {
			sl := gsl.NewSublist[int]()
			if err := sl.Insert(pattern, 1); err != nil {
				panic(err)
			}
			sl.Match(subject, func(int) { m[p][s] = true })
		}
	}
	return m
}()

type linKind uint8

const (
	linSubscribe linKind = iota
	linUnsubscribe
	linMatch
	linSnapshot
)

type linInput struct {
	kind    linKind
	pattern int // index into linPatterns, for (un)subscribe
	subject int // index into linSubjects, for match
	value   int
}

// linOutput is comparable so the model can compare outputs with ==.
type linOutput struct {
	removed bool
	counts  [linValues]uint8 // how often each value was matched
	pairs   uint64           // a snapshot's pairs
	length  int              // a snapshot's Len
}

var subscriptionModel = porcupine.Model{
	Init: func() any { return uint64(0) },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(uint64), input.(linInput), output.(linOutput)
		switch in.kind {
		case linSubscribe:
			return true, s | pairBit(in.pattern, in.value)
		case linUnsubscribe:
			bit := pairBit(in.pattern, in.value)
			return out.removed == (s&bit != 0), s &^ bit
		case linMatch:
			var want [linValues]uint8
			for p := range linPatterns {
				for v := range linValues {
					if s&pairBit(p, v) != 0 && linMatches[p][in.subject] {
						want[v]++
					}
				}
			}
			return out.counts == want, s
		default:
			return out.pairs == s && out.length == bits.OnesCount64(s), s
		}
	},
	Hash: func(state any) uint64 { return state.(uint64) },
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		switch in.kind {
		case linSubscribe:
			return fmt.Sprintf("Subscribe(%s, %d)", linPatterns[in.pattern], in.value)
		case linUnsubscribe:
			return fmt.Sprintf("Unsubscribe(%s, %d) -> %v", linPatterns[in.pattern], in.value, out.removed)
		case linMatch:
			return fmt.Sprintf("Match(%s) -> %v", linSubjects[in.subject], out.counts)
		default:
			return fmt.Sprintf("Snapshot -> %b", out.pairs)
		}
	},
}

// runLinOp performs one operation on the trie and returns its output.
func runLinOp(tr *matcher.Trie[int], in linInput) linOutput {
	var out linOutput
	switch in.kind {
	case linSubscribe:
		if err := tr.Subscribe(linPatterns[in.pattern], in.value); err != nil {
			panic(err)
		}
	case linUnsubscribe:
		removed, err := tr.Unsubscribe(linPatterns[in.pattern], in.value)
		if err != nil {
			panic(err)
		}
		out.removed = removed
	case linMatch:
		for _, v := range tr.Match(linSubjects[in.subject], nil) {
			out.counts[v]++
		}
	case linSnapshot:
		snap := tr.Snapshot()
		index := map[string]int{}
		for i, p := range linPatterns {
			index[p] = i
		}
		for p, v := range snap.All() {
			out.pairs |= pairBit(index[p], v)
		}
		out.length = snap.Len()
	}
	return out
}

// recordHistory runs clients goroutines, each doing opsPerClient random
// operations on tr (fresh), released together to maximise overlap. A
// read-heavy history is 90% matches of 3 subjects, so that a cache hits
// between the writes and the writes race the hits and fills.
func recordHistory(rng *rand.Rand, tr *matcher.Trie[int], readHeavy bool, clients, opsPerClient int) []porcupine.Operation {
	// Start from a few pairs so that removals and matches have work to do.
	for range 6 {
		_ = tr.Subscribe(linPatterns[rng.IntN(len(linPatterns))], rng.IntN(linValues))
	}
	initial := tr.Snapshot()
	plans := make([][]linInput, clients)
	for c := range plans {
		for range opsPerClient {
			in := linInput{pattern: rng.IntN(len(linPatterns)), subject: rng.IntN(len(linSubjects)), value: rng.IntN(linValues)}
			r := rng.IntN(100)
			if readHeavy {
				in.subject = rng.IntN(3) // "a", "b", "a.b": each matched by several patterns
				// 4% writes, 1% snapshots, 95% matches.
				switch {
				case r < 2:
					r = 0 // subscribe
				case r < 4:
					r = 50 // unsubscribe
				case r < 5:
					r = 99 // snapshot
				default:
					r = 80 // match
				}
			}
			switch {
			case r < 35:
				in.kind = linSubscribe
			case r < 65:
				in.kind = linUnsubscribe
			case r < 93:
				in.kind = linMatch
			default:
				in.kind = linSnapshot
			}
			plans[c] = append(plans[c], in)
		}
	}
	start := time.Now()
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		wg      sync.WaitGroup
		release = make(chan struct{})
	)
	for c, plan := range plans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-release
			ops := make([]porcupine.Operation, 0, len(plan))
			for _, in := range plan {
				call := time.Since(start).Nanoseconds()
				out := runLinOp(tr, in)
				ops = append(ops, porcupine.Operation{ClientId: c, Input: in, Output: out, Call: call, Return: time.Since(start).Nanoseconds()})
			}
			mu.Lock()
			history = append(history, ops...)
			mu.Unlock()
		}()
	}
	close(release)
	wg.Wait()
	// The initial pairs are set by subscribes that completed before anything
	// else began.
	var prelude []porcupine.Operation
	index := map[string]int{}
	for i, p := range linPatterns {
		index[p] = i
	}
	for p, v := range initial.All() {
		prelude = append(prelude, porcupine.Operation{ClientId: clients, Input: linInput{kind: linSubscribe, pattern: index[p], value: v}, Output: linOutput{}, Call: -2, Return: -1})
	}
	return append(prelude, history...)
}

const linCheckTimeout = 20 * time.Second

// overlapping counts the operations whose interval overlaps an operation of
// another client: a history without overlap checks nothing concurrent.
func overlapping(history []porcupine.Operation) int {
	n := 0
	for i, a := range history {
		for j, b := range history {
			if i != j && a.ClientId != b.ClientId && a.Call <= b.Return && b.Call <= a.Return {
				n++
				break
			}
		}
	}
	return n
}

// TestLinearizable checks concurrent histories without the cache and with
// it (admission forced, read-heavy histories); with the cache, most matches
// must have been hits, or the check proved nothing about it.
func TestLinearizable(t *testing.T) {
	histories := 400
	if testing.Short() {
		histories = 60
	}
	for _, mode := range cacheModes {
		t.Run(mode.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 11))
			total, concurrent := 0, 0
			var stats matcher.CacheStats
			for h := range histories {
				tr := mode.new()
				history := recordHistory(rng, tr, mode.readHeavy, 4, 100)
				total += len(history)
				concurrent += overlapping(history)
				switch res := porcupine.CheckOperationsTimeout(subscriptionModel, history, linCheckTimeout); res {
				case porcupine.Ok:
				case porcupine.Unknown:
					t.Fatalf("history %d: porcupine timed out (Unknown counts as a failure)", h)
				default:
					t.Fatalf("history %d: not linearizable (%s)", h, res)
				}
				if s, ok := matcher.CacheStatsOf(tr); ok {
					stats.Hits += s.Hits
					stats.Misses += s.Misses
					stats.Bypassed += s.Bypassed
					stats.Fills += s.Fills
				}
			}
			t.Logf("%d histories, %d operations, %d (%.0f%%) concurrent with another client's", histories, total, concurrent, 100*float64(concurrent)/float64(total))
			if concurrent < total/20 {
				t.Fatalf("only %d of %d operations overlapped another client's: the histories test too little concurrency", concurrent, total)
			}
			if mode.readHeavy {
				t.Logf("cache: %d matches, %d hits (%.2f), %d bypassed during writes, %d fills", stats.Matches(), stats.Hits, stats.HitRatio(), stats.Bypassed, stats.Fills)
				if stats.HitRatio() <= 0.5 {
					t.Fatalf("hit ratio %.2f over %d matches, want above 0.5: the cache was not exercised", stats.HitRatio(), stats.Matches())
				}
			}
		})
	}
}

// TestLinearizabilityCheckHasTeeth breaks the trie in two ways and requires
// the same check to catch each: GCAS as a plain store after a yield instead
// of the CAS, and a result cache that writes never invalidate.
func TestLinearizabilityCheckHasTeeth(t *testing.T) {
	const maxHistories = 400
	t.Run("plain-store GCAS", func(t *testing.T) {
		matcher.SetBrokenPlainStore(true)
		defer matcher.SetBrokenPlainStore(false)
		rng := rand.New(rand.NewPCG(13, 17))
		for h := range maxHistories {
			history := recordHistory(rng, matcher.New[int](matcher.WithoutCache()), false, 4, 40)
			if porcupine.CheckOperationsTimeout(subscriptionModel, history, linCheckTimeout) == porcupine.Illegal {
				t.Logf("the broken trie was caught in history %d", h)
				return
			}
		}
		t.Fatalf("a trie whose writes are plain stores passed %d histories: the check has no teeth", maxHistories)
	})
	t.Run("cache never invalidated", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(19, 23))
		for h := range maxHistories {
			tr := matcher.New[int](matcher.WithCacheAdmitAll(), matcher.WithBrokenCacheVersion())
			history := recordHistory(rng, tr, true, 4, 40)
			if porcupine.CheckOperationsTimeout(subscriptionModel, history, linCheckTimeout) == porcupine.Illegal {
				t.Logf("the broken cache was caught in history %d", h)
				return
			}
		}
		t.Fatalf("a cache that writes never invalidate passed %d histories: the check has no teeth for the cache", maxHistories)
	})
}
