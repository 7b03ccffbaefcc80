package matcher

import (
	"math/rand/v2"
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
	var versions keptVersions
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
			versions.keep(t, i, set, model)
		}
	}
	if !sawMid || merges == 0 {
		t.Fatalf("the set used a mid chunk: %v; emptied a full one into the HAMT: %v", sawMid, merges > 0)
	}
	versions.check(t)
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
	extendConcurrently(t, base, 8, 5*tailCap)
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

// TestValueSetBelowMidMinDropsFilter shrinks a set that had a mid chunk
// below midMin (a mid removal keeps the filter for the next chunk, then
// removals from the HAMT) and adds a batch: a set below midMin with no
// chunk keeps no filter, and every value, the batch's included, can still
// be found and removed (a filter kept without the batch noted in it would
// say they are absent).
func TestValueSetBelowMidMinDropsFilter(t *testing.T) {
	var set valueSet[int]
	model := map[int]bool{}
	next := 0
	add := func() {
		var added bool
		if set, added = set.with(next); !added {
			t.Fatalf("with(%d) of a new value reported no change", next)
		}
		model[next] = true
		next++
	}
	remove := func(v int) {
		var removed bool
		if set, removed = set.without(v); !removed {
			t.Fatalf("without(%d) of a value in the set reported no change", v)
		}
		delete(model, v)
	}
	for midLen(set) == 0 {
		add()
	}
	remove(set.big.mid[len(set.big.mid)-1]) // the mid values go into the HAMT; the filter stays
	if set.big.midc != nil || set.big.filter == nil {
		t.Fatalf("after a mid removal: chunk %v, filter %v; want no chunk and the filter kept", set.big.midc != nil, set.big.filter != nil)
	}
	for old := 0; set.big.len() >= midMin; old++ {
		remove(old)
	}
	for range tailCap + 1 { // the tail fills and goes into the HAMT as one batch
		add()
	}
	if set.big.filter != nil || set.big.midc != nil {
		t.Fatalf("below midMin after a batch: filter %v, chunk %v; want neither", set.big.filter != nil, set.big.midc != nil)
	}
	if msg := checkSet(set); msg != "" {
		t.Fatal(msg)
	}
	for v := range model {
		remove(v)
	}
	if set.len() != 0 {
		t.Fatalf("%d values left after removing every one", set.len())
	}
}
