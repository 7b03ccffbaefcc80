package matcher

import (
	"fmt"
	"maps"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// TestValueSetAgainstMap drives the persistent set through the small-slice
// and HAMT forms, promotion and demotion included, and compares it with a
// map after every operation; it also checks that every earlier version is
// left intact (persistence is what keeps snapshots O(1)).
func TestValueSetAgainstMap(t *testing.T) {
	tests := []struct {
		name     string
		universe int // values are drawn from [0, universe)
		ops      int
	}{
		{"small sets around the promotion boundary", smallSetMax + 3, 20_000},
		{"large sets", 5_000, 100_000},
		{"sets around the HAMT's emptying", 3 * tailCap, 50_000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.universe)))
			var set valueSet[int]
			model := map[int]bool{}
			var versions keptVersions
			for i := range tc.ops {
				v := rng.IntN(tc.universe)
				var changed bool
				if rng.IntN(100) < 55 {
					set, changed = set.with(v)
					if changed == model[v] {
						t.Fatalf("op %d: with(%d) reported added=%v, model had it=%v", i, v, changed, model[v])
					}
					model[v] = true
				} else {
					set, changed = set.without(v)
					if changed != model[v] {
						t.Fatalf("op %d: without(%d) reported removed=%v, model had it=%v", i, v, changed, model[v])
					}
					delete(model, v)
				}
				if set.len() != len(model) || set.contains(v) != model[v] {
					t.Fatalf("op %d: len %d contains(%d)=%v; model len %d has=%v", i, set.len(), v, set.contains(v), len(model), model[v])
				}
				if msg := checkSet(set); msg != "" {
					t.Fatalf("op %d: %s", i, msg)
				}
				if i%997 == 0 {
					versions.keep(t, i, set, model)
				}
			}
			versions.check(t)
		})
	}
}

// keptVersions are versions of a set kept while later updates build on
// them, with what each held when kept: no later write may change one.
type keptVersions []keptVersion

type keptVersion struct {
	set  valueSet[int]
	want []int
}

// keep checks that set holds model's values (at op) and keeps it.
func (vs *keptVersions) keep(t *testing.T, op int, set valueSet[int], model map[int]bool) {
	t.Helper()
	got := set.appendTo(nil)
	slices.Sort(got)
	want := slices.Sorted(maps.Keys(model))
	if !slices.Equal(got, want) {
		t.Fatalf("op %d: set holds %d values, model %d", op, len(got), len(want))
	}
	*vs = append(*vs, keptVersion{set, want})
}

// check checks every kept version against what it held, and its shape.
func (vs keptVersions) check(t *testing.T) {
	t.Helper()
	for i, ver := range vs {
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

// TestHAMTCollisions exercises the collision lists at the bottom of the
// trie, which maphash makes too rare to reach by chance.
func TestHAMTCollisions(t *testing.T) {
	const h = 0xdeadbeef // every value "hashes" to h
	n := (&hamtNode[int]{}).withAll([]hashedValue[int]{{h, 1}, {h, 2}})
	n = n.withAll([]hashedValue[int]{{h, 3}})
	if n.size != 3 {
		t.Fatalf("three colliding values make a set of size %d", n.size)
	}
	for _, v := range []int{1, 2, 3} {
		if !n.contains(0, h, v) {
			t.Fatalf("collision set lost %d", v)
		}
	}
	if n.contains(0, h, 4) {
		t.Fatal("collision set contains a value never added")
	}
	got := n.appendTo(nil)
	slices.Sort(got)
	if !slices.Equal(got, []int{1, 2, 3}) {
		t.Fatalf("collision set yields %v", got)
	}
	for i, v := range []int{2, 1, 3} {
		var removed bool
		n, removed = n.without(0, h, v)
		if !removed {
			t.Fatalf("removing %d reported no change", v)
		}
		if i < 2 && (n == nil || n.contains(0, h, v)) {
			t.Fatalf("after removing %d the set is %v", v, n)
		}
	}
	if n != nil {
		t.Fatalf("removing every colliding value left %v", n)
	}
}

// checkSet verifies a set's shape: a slice form of at most smallSetMax
// values; in the HAMT form more than smallSetDemote values, and nodes whose
// size counts their values, whose bitmaps match their arrays, whose
// sub-nodes hold at least two values, and whose values sit where their
// hashes lead.
func checkSet(s valueSet[int]) string {
	if s.big == nil {
		if len(s.small) > smallSetMax {
			return fmt.Sprintf("a slice set of %d values, more than smallSetMax", len(s.small))
		}
		return ""
	}
	if s.len() <= smallSetDemote {
		return fmt.Sprintf("a HAMT set of %d values, at most smallSetDemote", s.len())
	}
	if tail := s.small; tail != nil {
		if len(tail) == 0 || cap(tail) != tailCap {
			return fmt.Sprintf("a tail of length %d and capacity %d", len(tail), cap(tail))
		}
		if claimed := chunkOf(tail).claimed.Load(); int(claimed) < len(tail) {
			return fmt.Sprintf("a tail of %d values in a chunk that handed out %d", len(tail), claimed)
		}
		for i, v := range tail {
			if slices.Contains(tail[:i], v) || s.big.contains(hashOf(v), v) {
				return fmt.Sprintf("value %d is twice in the set", v)
			}
		}
	}
	big := s.big
	if big.root == nil {
		return "a big set without a HAMT"
	}
	if (big.midc == nil) != (big.mid == nil) && len(big.mid) > 0 {
		return "mid values without their chunk"
	}
	if big.midc != nil && big.filter == nil {
		return "a mid chunk without a filter"
	}
	if c := big.midc; c != nil {
		if int(c.claimed.Load()) < len(big.mid) || len(big.mid) > len(c.vals) {
			return fmt.Sprintf("%d mid values in a chunk that handed out %d", len(big.mid), c.claimed.Load())
		}
		for i, v := range big.mid {
			h := hashOf(v)
			if c.find(len(big.mid), h, v) != i || c.find(i, h, v) >= 0 || big.root.contains(0, h, v) {
				return fmt.Sprintf("mid value %d is not indexed at %d, or is twice in the set", v, i)
			}
		}
	}
	if f := big.filter; f != nil {
		// The filter must hold every value outside the tail, or an
		// insert would add a value twice.
		missing := -1
		big.root.all(func(v int) bool {
			if !f.mayHold(hashOf(v)) {
				missing = v
				return false
			}
			return true
		})
		for _, v := range big.mid {
			if !f.mayHold(hashOf(v)) {
				missing = v
			}
		}
		if missing >= 0 {
			return fmt.Sprintf("value %d is not in the set's filter", missing)
		}
	}
	var walk func(n *hamtNode[int], shift uint) (int, string)
	walk = func(n *hamtNode[int], shift uint) (int, string) {
		count := len(n.values)
		if shift < hashBits {
			if bits.OnesCount32(n.dataMap) != len(n.values) || bits.OnesCount32(n.nodeMap) != len(n.children) || n.dataMap&n.nodeMap != 0 {
				return 0, "bitmaps do not match the arrays"
			}
			for _, v := range n.values {
				if bit := slotBit(hashOf(v), shift); n.dataMap&bit == 0 || n.values[rank(n.dataMap, bit)] != v {
					return 0, fmt.Sprintf("value %d is not where its hash leads", v)
				}
			}
		}
		for _, c := range n.children {
			k, msg := walk(c, shift+hamtBits)
			if msg != "" {
				return 0, msg
			}
			if k < 2 {
				return 0, fmt.Sprintf("a sub-node holds %d values: a lone value belongs in its parent", k)
			}
			count += k
		}
		if count != n.size {
			return 0, fmt.Sprintf("a node's size is %d, it holds %d", n.size, count)
		}
		return count, ""
	}
	_, msg := walk(s.big.root, 0)
	return msg
}

// TestValueSetTailSharing adds to one version of a large set twice: the
// versions share the tail's chunk, and neither may see the other's value.
// Run under the race detector, the concurrent part checks that a claimed
// slot is written by one goroutine only.
func TestValueSetTailSharing(t *testing.T) {
	var base valueSet[int]
	for v := range 100 {
		base, _ = base.with(v)
	}
	if base.big == nil || len(base.small) == 0 {
		t.Fatalf("want a HAMT with a tail, got root %v and a tail of %d", base.big != nil, len(base.small))
	}
	a, _ := base.with(1000)
	b, _ := base.with(2000)
	c, _ := a.with(3000)
	for _, tc := range []struct {
		name     string
		set      valueSet[int]
		has, not []int
	}{
		{"base", base, []int{0, 99}, []int{1000, 2000, 3000}},
		{"a", a, []int{0, 99, 1000}, []int{2000, 3000}},
		{"b", b, []int{0, 99, 2000}, []int{1000, 3000}},
		{"c", c, []int{0, 99, 1000, 3000}, []int{2000}},
	} {
		for _, v := range tc.has {
			if !tc.set.contains(v) {
				t.Errorf("%s lost %d", tc.name, v)
			}
		}
		for _, v := range tc.not {
			if tc.set.contains(v) || slices.Contains(tc.set.appendTo(nil), v) {
				t.Errorf("%s holds %d, added to another version", tc.name, v)
			}
		}
		if msg := checkSet(tc.set); msg != "" {
			t.Errorf("%s: %s", tc.name, msg)
		}
	}

	extendConcurrently(t, base, 8, 3*tailCap)
}

// extendConcurrently extends base from writers goroutines at once, each
// adding perWriter values of its own (writer g's are (g+1)*100,000 on), and
// checks every result: its size, that it holds its writer's values and no
// other writer's, and its shape; and that base did not change.
func extendConcurrently(t *testing.T, base valueSet[int], writers, perWriter int) {
	t.Helper()
	const stride = 100_000
	before := base.len()
	results := make([]valueSet[int], writers)
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := base
			for i := range perWriter {
				var added bool
				if s, added = s.with(stride*(g+1) + i); !added {
					panic("a new value was not added")
				}
				if !s.contains(stride*(g+1) + i) {
					panic("an added value is missing")
				}
			}
			results[g] = s
		}()
	}
	wg.Wait()
	for g, s := range results {
		if s.len() != before+perWriter {
			t.Fatalf("writer %d: %d values, want %d", g, s.len(), before+perWriter)
		}
		for _, v := range s.appendTo(nil) {
			if v >= stride && v/stride != g+1 {
				t.Fatalf("writer %d's set holds %d, written by another", g, v)
			}
		}
		for h := range writers {
			if h != g && s.contains(stride*(h+1)) {
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
	if base.len() != before {
		t.Fatalf("base changed: %d values, had %d", base.len(), before)
	}
}
