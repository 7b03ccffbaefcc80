package matcher

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// TestValueSetMidChunk grows a set through several mid chunks and merges
// into the HAMT, removes values from the tail, the mid values and the HAMT
// along the way, and checks each kept version against a model at the end:
// the versions share chunks, and no later write may change an earlier one.
func TestValueSetMidChunk(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var set valueSet[int]
	model := map[int]bool{}
	type version struct {
		set  valueSet[int]
		want []int
	}
	var versions []version
	sawMid, merges := false, 0
	next := 0
	for i := range 60_000 {
		if rng.IntN(10) < 8 || len(model) == 0 {
			v := next
			next++
			var added bool
			if set, added = set.with(v); !added {
				t.Fatalf("op %d: with(%d) of a new value reported no change", i, v)
			}
			model[v] = true
		} else {
			// An old value (in the HAMT: a mid chunk holds at most the
			// newer half of the values), so that chunks fill up and go
			// into the HAMT; in the last quarter, now and then a recent
			// one (in the tail or the mid values, whose removal empties
			// the chunk into the HAMT); present or not.
			v := rng.IntN(next/3 + 1)
			if i >= 45_000 && rng.IntN(64) == 0 {
				v = next - 1 - rng.IntN(min(next, 200))
			}
			var removed bool
			set, removed = set.without(v)
			if removed != model[v] {
				t.Fatalf("op %d: without(%d) reported %v, model had it %v", i, v, removed, model[v])
			}
			delete(model, v)
		}
		if _, added := set.with(next - 1); added == model[next-1] {
			t.Fatalf("op %d: with(%d) of a value the model has=%v reported added=%v", i, next-1, model[next-1], added)
		}
		if set.len() != len(model) {
			t.Fatalf("op %d: len %d, model %d", i, set.len(), len(model))
		}
		if set.big != nil && len(set.big.mid) > 0 {
			sawMid = true
		}
		if set.big != nil && set.big.midc != nil && len(set.big.mid) == 0 && set.big.root.size > 2*midMin {
			merges++ // a full chunk went into the HAMT (counted once per insert after it)
		}
		if i%1999 == 0 {
			if msg := checkSet(set); msg != "" {
				t.Fatalf("op %d: %s", i, msg)
			}
			got := set.appendTo(nil)
			slices.Sort(got)
			want := sortedKeys(model)
			if !slices.Equal(got, want) {
				t.Fatalf("op %d: set holds %d values, model %d", i, len(got), len(want))
			}
			versions = append(versions, version{set, want})
		}
	}
	if !sawMid || merges == 0 {
		t.Fatalf("the set used a mid chunk: %v; emptied a full one into the HAMT: %v", sawMid, merges > 0)
	}
	for i, ver := range versions {
		got := ver.set.appendTo(nil)
		slices.Sort(got)
		if !slices.Equal(got, ver.want) {
			t.Fatalf("version %d changed after later updates", i)
		}
		if msg := checkSet(ver.set); msg != "" {
			t.Fatalf("version %d: %s", i, msg)
		}
	}
}

// TestValueSetMidChunkSharing extends one version of a set with a mid
// chunk from several goroutines at once: only one may claim each prefix
// of the chunk, the others put their batches into the HAMT, and no result
// holds another's values. Under the race detector it also checks that a
// claimed position is written by one goroutine only, and that the index
// and filter are read and written only atomically.
func TestValueSetMidChunkSharing(t *testing.T) {
	var base valueSet[int]
	for v := range midMin + 3*tailCap + 7 {
		base, _ = base.with(v)
	}
	if base.big == nil || base.big.midc == nil || len(base.big.mid) == 0 {
		t.Fatalf("want a set with mid values, got %+v", base.big)
	}
	const writers = 8
	results := make([]valueSet[int], writers)
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := base
			for i := range 5 * tailCap {
				var added bool
				if s, added = s.with(100_000*(g+1) + i); !added {
					panic("a new value was not added")
				}
				if !s.contains(100_000*(g+1) + i) {
					panic("an added value is missing")
				}
			}
			results[g] = s
		}()
	}
	wg.Wait()
	for g, s := range results {
		if s.len() != base.len()+5*tailCap {
			t.Fatalf("writer %d: %d values, want %d", g, s.len(), base.len()+5*tailCap)
		}
		for _, v := range s.appendTo(nil) {
			if v >= 100_000 && v/100_000 != g+1 {
				t.Fatalf("writer %d's set holds %d, written by another", g, v)
			}
		}
		for h := range writers {
			if h != g && s.contains(100_000*(h+1)) {
				t.Fatalf("writer %d's set contains writer %d's value", g, h)
			}
		}
		if msg := checkSet(s); msg != "" {
			t.Fatalf("writer %d: %s", g, msg)
		}
	}
	if msg := checkSet(base); msg != "" {
		t.Fatalf("base: %s", msg)
	}
	if base.len() != midMin+3*tailCap+7 {
		t.Fatalf("base changed: %d values", base.len())
	}
}
