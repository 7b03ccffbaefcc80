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
	sawMid, merges, prevMid := false, 0, 0
	next := 0
	for i := range 60_000 {
		inserted := rng.IntN(10) < 8 || len(model) == 0
		if inserted {
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
		if mid := midLen(set); inserted && mid == 0 && prevMid > 0 {
			merges++ // an insert found the chunk full: its values went into the HAMT
		}
		prevMid = midLen(set)
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

// midLen is the number of the set's mid values.
func midLen(s valueSet[int]) int {
	if s.big == nil {
		return 0
	}
	return len(s.big.mid)
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

// TestValueSetFilterOutlivesMidChunk removes a mid value (which moves the
// mid values into the HAMT and drops the chunk) and checks that the next
// chunk keeps the set's filter rather than walking the HAMT to build one,
// until the values noted in it would pass its capacity.
func TestValueSetFilterOutlivesMidChunk(t *testing.T) {
	var set valueSet[int]
	next := 0
	add := func() {
		var added bool
		if set, added = set.with(next); !added {
			t.Fatalf("with(%d) of a new value reported no change", next)
		}
		next++
	}
	for midLen(set) == 0 {
		add()
	}
	f := set.big.filter
	if f == nil {
		t.Fatal("a set with mid values has no filter")
	}
	rebuilt := false
	for round := 0; round < 1000 && !rebuilt; round++ {
		// Remove the newest mid value: the mid values go into the HAMT.
		victim := set.big.mid[len(set.big.mid)-1]
		var removed bool
		if set, removed = set.without(victim); !removed {
			t.Fatalf("round %d: without(%d) of a mid value reported no change", round, victim)
		}
		if midLen(set) != 0 || set.big.midc != nil || set.big.filter == nil {
			t.Fatalf("round %d: after removing a mid value: %d mid values, chunk %v, filter %v", round, midLen(set), set.big.midc != nil, set.big.filter != nil)
		}
		noted := set.big.noted
		for midLen(set) == 0 {
			add()
		}
		if msg := checkSet(set); msg != "" {
			t.Fatalf("round %d: %s", round, msg)
		}
		capacity := len(set.big.midc.vals)
		switch {
		case set.big.filter == f && noted+capacity > f.capacity():
			t.Fatalf("round %d: the filter of capacity %d was kept with %d noted and a chunk of %d to come", round, f.capacity(), noted, capacity)
		case set.big.filter != f && noted+capacity <= f.capacity():
			t.Fatalf("round %d: the filter was rebuilt with room left (%d noted, chunk %d, capacity %d)", round, noted, capacity, f.capacity())
		case set.big.filter != f:
			rebuilt = true
		}
	}
	if !rebuilt {
		t.Fatal("the filter was never rebuilt: its noted count does not grow")
	}
}
