package matcher

import (
	"hash/maphash"
	"math/bits"
	"slices"
)

// valueSet is an immutable set of the values subscribed through one pattern.
// Every update returns a new set and leaves the old one intact, so a C-node
// (and so a snapshot) that holds the old set keeps seeing exactly it.
//
// Small sets, the common case, are a slice copied on write: appending them to
// a match result is one copy. Past smallSetMax values the set becomes a hash
// array mapped trie (HAMT) of 32-way nodes, so that adding or removing a value
// copies O(log32 n) nodes instead of the whole set: with 30,000 subscribers on
// one subject an update copies 3 small nodes, not 30,000 values.
//
// It is 32 bytes, so that a branch is 64: the size of a large set is its
// root's count.
type valueSet[T comparable] struct {
	small []T          // the values, when root is nil
	root  *hamtNode[T] // the values, when the set is large
}

const (
	// smallSetMax is the largest set kept as a plain slice. Copying 8 values
	// is cheaper than hashing once.
	smallSetMax = 8
	// smallSetDemote is the size at which a HAMT set turns back into a
	// slice; lower than smallSetMax so that a set oscillating around the
	// boundary does not convert on every update.
	smallSetDemote = smallSetMax / 2

	// 32-way nodes. 16-way nodes copy half the pointers per level but
	// need a level more, and measured slower on the fan-in benchmarks
	// (more allocations); 64-way copy twice the pointers.
	hamtBits  = 5
	hamtWidth = 1 << hamtBits
	hamtMask  = hamtWidth - 1
	// hashBits is the width of maphash's hash; a HAMT deeper than this keeps
	// colliding values in a plain list (values, with empty bitmaps).
	hashBits = 64
)

// hashSeed is per process: the HAMT's shape never leaves memory.
var hashSeed = maphash.MakeSeed()

func hashOf[T comparable](v T) uint64 { return maphash.Comparable(hashSeed, v) }

// hamtNode is a bitmap-compressed 32-way node in the CHAMP layout: values
// stored at this level and sub-nodes live in separate arrays, so an update
// copies only what it changes, and an array of pointer-free values
// (integers, say) is never scanned by the garbage collector. The node and
// its sub-node array are one allocation (allocHamt): a copied level costs
// one allocation, or two when its values change. Hashes are not stored;
// the rare split of two values recomputes one.
type hamtNode[T comparable] struct {
	dataMap  uint32         // which 5-bit slots hold a value
	nodeMap  uint32         // which 5-bit slots hold a sub-node
	size     int            // values in this sub-trie
	values   []T            // in dataMap bit order; at depth >= hashBits, the colliding values
	children []*hamtNode[T] // in nodeMap bit order
}

// hamtBlock1 to hamtBlock32 put a node and its sub-node array in one
// allocation.
type (
	hamtBlock1[T comparable] struct {
		n hamtNode[T]
		c [1]*hamtNode[T]
	}
	hamtBlock2[T comparable] struct {
		n hamtNode[T]
		c [2]*hamtNode[T]
	}
	hamtBlock4[T comparable] struct {
		n hamtNode[T]
		c [4]*hamtNode[T]
	}
	hamtBlock8[T comparable] struct {
		n hamtNode[T]
		c [8]*hamtNode[T]
	}
	hamtBlock16[T comparable] struct {
		n hamtNode[T]
		c [16]*hamtNode[T]
	}
	hamtBlock32[T comparable] struct {
		n hamtNode[T]
		c [32]*hamtNode[T]
	}
)

// allocHamt returns a new node with room for k sub-nodes (children has
// length k).
func allocHamt[T comparable](k int) *hamtNode[T] {
	var n *hamtNode[T]
	switch {
	case k == 0:
		return &hamtNode[T]{}
	case k == 1:
		b := &hamtBlock1[T]{}
		n = &b.n
		n.children = b.c[:]
	case k == 2:
		b := &hamtBlock2[T]{}
		n = &b.n
		n.children = b.c[:]
	case k <= 4:
		b := &hamtBlock4[T]{}
		n = &b.n
		n.children = b.c[:k:k]
	case k <= 8:
		b := &hamtBlock8[T]{}
		n = &b.n
		n.children = b.c[:k:k]
	case k <= 16:
		b := &hamtBlock16[T]{}
		n = &b.n
		n.children = b.c[:k:k]
	default:
		b := &hamtBlock32[T]{}
		n = &b.n
		n.children = b.c[:k:k]
	}
	return n
}

// cloned returns a copy of n with room for k sub-nodes: n's, with a gap at
// gap when k is one more, without the one at gap when k is one fewer, or
// all of them when k equals their count (gap ignored).
func (n *hamtNode[T]) cloned(k, gap int) *hamtNode[T] {
	c := allocHamt[T](k)
	c.dataMap, c.nodeMap, c.size, c.values = n.dataMap, n.nodeMap, n.size, n.values
	switch {
	case k == len(n.children):
		copy(c.children, n.children)
	case k > len(n.children):
		copy(c.children, n.children[:gap])
		copy(c.children[gap+1:], n.children[gap:])
	default:
		copy(c.children, n.children[:gap])
		copy(c.children[gap:], n.children[gap+1:])
	}
	return c
}

func slotBit(h uint64, shift uint) uint32 { return 1 << ((h >> shift) & hamtMask) }

func rank(bitmap, bit uint32) int { return bits.OnesCount32(bitmap & (bit - 1)) }

// inserted returns a copy of xs with x at position i.
func inserted[E any](xs []E, i int, x E) []E {
	out := make([]E, len(xs)+1)
	copy(out, xs[:i])
	out[i] = x
	copy(out[i+1:], xs[i:])
	return out
}

// removed returns a copy of xs without position i (nil when empty).
func removed[E any](xs []E, i int) []E {
	if len(xs) == 1 {
		return nil
	}
	out := make([]E, 0, len(xs)-1)
	out = append(out, xs[:i]...)
	return append(out, xs[i+1:]...)
}

func (s valueSet[T]) len() int {
	if s.root != nil {
		return s.root.size
	}
	return len(s.small)
}

// appendTo appends every value to dst. It never allocates beyond dst's growth.
func (s valueSet[T]) appendTo(dst []T) []T {
	if s.root == nil {
		return append(dst, s.small...)
	}
	return s.root.appendTo(dst)
}

func (n *hamtNode[T]) appendTo(dst []T) []T {
	dst = append(dst, n.values...)
	for _, c := range n.children {
		dst = c.appendTo(dst)
	}
	return dst
}

// all calls yield for every value until it returns false.
func (s valueSet[T]) all(yield func(T) bool) bool {
	if s.root == nil {
		for _, v := range s.small {
			if !yield(v) {
				return false
			}
		}
		return true
	}
	return s.root.all(yield)
}

func (n *hamtNode[T]) all(yield func(T) bool) bool {
	for _, v := range n.values {
		if !yield(v) {
			return false
		}
	}
	for _, c := range n.children {
		if !c.all(yield) {
			return false
		}
	}
	return true
}

func (s valueSet[T]) contains(v T) bool {
	if s.root == nil {
		return slices.Contains(s.small, v)
	}
	return s.root.contains(0, hashOf(v), v)
}

func (n *hamtNode[T]) contains(shift uint, h uint64, v T) bool {
	for shift < hashBits {
		bit := slotBit(h, shift)
		switch {
		case n.dataMap&bit != 0:
			return n.values[rank(n.dataMap, bit)] == v
		case n.nodeMap&bit != 0:
			n, shift = n.children[rank(n.nodeMap, bit)], shift+hamtBits
		default:
			return false
		}
	}
	return slices.Contains(n.values, v)
}

// with returns the set with v added, and whether v was new. When v is
// already present it returns s itself, so callers can skip the write.
func (s valueSet[T]) with(v T) (valueSet[T], bool) {
	if s.root == nil {
		if slices.Contains(s.small, v) {
			return s, false
		}
		if len(s.small) < smallSetMax {
			small := make([]T, len(s.small)+1)
			copy(small, s.small)
			small[len(s.small)] = v
			return valueSet[T]{small: small}, true
		}
		// Promote to a HAMT.
		root := &hamtNode[T]{}
		for _, x := range s.small {
			root, _ = root.with(0, hashOf(x), x)
		}
		root, _ = root.with(0, hashOf(v), v)
		return valueSet[T]{root: root}, true
	}
	root, added := s.root.with(0, hashOf(v), v)
	if !added {
		return s, false
	}
	return valueSet[T]{root: root}, true
}

func (n *hamtNode[T]) with(shift uint, h uint64, v T) (*hamtNode[T], bool) {
	if shift >= hashBits {
		if slices.Contains(n.values, v) {
			return n, false
		}
		c := n.cloned(0, 0)
		c.values = inserted(n.values, len(n.values), v)
		c.size++
		return c, true
	}
	bit := slotBit(h, shift)
	var c *hamtNode[T]
	switch {
	case n.dataMap&bit != 0:
		pos := rank(n.dataMap, bit)
		old := n.values[pos]
		if old == v {
			return n, false
		}
		// Two values share this slot: push both one level down.
		gap := rank(n.nodeMap, bit)
		c = n.cloned(len(n.children)+1, gap)
		c.children[gap] = hamtPair(shift+hamtBits, hashOf(old), old, h, v)
		c.dataMap &^= bit
		c.nodeMap |= bit
		c.values = removed(n.values, pos)
	case n.nodeMap&bit != 0:
		pos := rank(n.nodeMap, bit)
		child, added := n.children[pos].with(shift+hamtBits, h, v)
		if !added {
			return n, false
		}
		c = n.cloned(len(n.children), 0)
		c.children[pos] = child
	default:
		c = n.cloned(len(n.children), 0)
		c.dataMap |= bit
		c.values = inserted(n.values, rank(c.dataMap, bit), v)
	}
	c.size++
	return c, true
}

// hamtPair builds the smallest sub-trie holding two distinct values.
func hamtPair[T comparable](shift uint, h1 uint64, v1 T, h2 uint64, v2 T) *hamtNode[T] {
	if shift >= hashBits {
		return &hamtNode[T]{size: 2, values: []T{v1, v2}}
	}
	b1, b2 := slotBit(h1, shift), slotBit(h2, shift)
	if b1 == b2 {
		n := allocHamt[T](1)
		n.nodeMap, n.size, n.children[0] = b1, 2, hamtPair(shift+hamtBits, h1, v1, h2, v2)
		return n
	}
	if b2 < b1 {
		v1, v2 = v2, v1
	}
	return &hamtNode[T]{dataMap: b1 | b2, size: 2, values: []T{v1, v2}}
}

// without returns the set with v removed, and whether v was present. When v
// is absent it returns s itself.
func (s valueSet[T]) without(v T) (valueSet[T], bool) {
	if s.root == nil {
		i := slices.Index(s.small, v)
		if i < 0 {
			return s, false
		}
		return valueSet[T]{small: removed(s.small, i)}, true
	}
	root, found := s.root.without(0, hashOf(v), v)
	if !found {
		return s, false
	}
	if root == nil || root.size <= smallSetDemote {
		var small []T
		if root != nil {
			small = root.appendTo(make([]T, 0, root.size))
		}
		return valueSet[T]{small: small}, true
	}
	return valueSet[T]{root: root}, true
}

// without returns the node with v removed (nil when it became empty).
func (n *hamtNode[T]) without(shift uint, h uint64, v T) (*hamtNode[T], bool) {
	if shift >= hashBits {
		i := slices.Index(n.values, v)
		if i < 0 {
			return n, false
		}
		if n.size == 1 {
			return nil, true
		}
		return &hamtNode[T]{size: n.size - 1, values: removed(n.values, i)}, true
	}
	bit := slotBit(h, shift)
	var c *hamtNode[T]
	switch {
	case n.dataMap&bit != 0:
		pos := rank(n.dataMap, bit)
		if n.values[pos] != v {
			return n, false
		}
		if n.size == 1 {
			return nil, true
		}
		c = n.cloned(len(n.children), 0)
		c.dataMap &^= bit
		c.values = removed(n.values, pos)
	case n.nodeMap&bit != 0:
		pos := rank(n.nodeMap, bit)
		child, found := n.children[pos].without(shift+hamtBits, h, v)
		if !found {
			return n, false
		}
		switch {
		case child == nil:
			c = n.cloned(len(n.children)-1, pos)
			c.nodeMap &^= bit
		case len(child.values) == 1 && len(child.children) == 0:
			// Pull a lone value up, so that removals keep the trie as
			// shallow as inserts would have built it.
			c = n.cloned(len(n.children)-1, pos)
			c.nodeMap &^= bit
			c.dataMap |= bit
			c.values = inserted(n.values, rank(c.dataMap, bit), child.values[0])
		default:
			c = n.cloned(len(n.children), 0)
			c.children[pos] = child
		}
	default:
		return n, false
	}
	c.size--
	return c, true
}
