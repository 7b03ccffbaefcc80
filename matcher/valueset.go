package matcher

import (
	"hash/maphash"
	"math/bits"
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
type valueSet[T comparable] struct {
	small []T          // the values, when root is nil
	root  *hamtNode[T] // the values, when the set is large
	size  int
}

const (
	// smallSetMax is the largest set kept as a plain slice. Copying 8 values
	// is cheaper than hashing once.
	smallSetMax = 8
	// smallSetDemote is the size at which a HAMT set turns back into a
	// slice; lower than smallSetMax so that a set oscillating around the
	// boundary does not convert on every update.
	smallSetDemote = smallSetMax / 2

	// 32-way nodes. 64-way nodes split slots less often (30,000 values
	// leave about 7 per bottom node instead of 29) but copy twice the
	// pointers per level; measured on the fan-in benchmark, 32-way was as
	// fast for inserts and faster for insert+remove.
	hamtBits  = 5
	hamtWidth = 1 << hamtBits
	hamtMask  = hamtWidth - 1
	// hashBits is the width of maphash's hash; a HAMT deeper than this keeps
	// colliding values in a plain list.
	hashBits = 64
)

// hashSeed is per process: the HAMT's shape never leaves memory.
var hashSeed = maphash.MakeSeed()

func hashOf[T comparable](v T) uint64 { return maphash.Comparable(hashSeed, v) }

// hamtNode is a bitmap-compressed 32-way node in the CHAMP layout: values
// stored at this level and sub-nodes live in separate arrays, so an update
// copies only the array it changes, and an array of pointer-free values
// (integers, say) is never scanned by the garbage collector. Hashes are not
// stored; the rare split of two values recomputes one.
type hamtNode[T comparable] struct {
	dataMap    uint32         // which 5-bit slots hold a value
	nodeMap    uint32         // which 5-bit slots hold a sub-node
	values     []T            // in dataMap bit order
	children   []*hamtNode[T] // in nodeMap bit order
	collisions []T            // only at depth >= hashBits: values whose hashes are equal
}

func slotBit(h uint64, shift uint) uint32 { return 1 << ((h >> shift) & hamtMask) }

func rank(bitmap, bit uint32) int { return bits.OnesCount32(bitmap & (bit - 1)) }

func (n *hamtNode[T]) isEmpty() bool {
	return len(n.values) == 0 && len(n.children) == 0 && len(n.collisions) == 0
}

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

// replaced returns a copy of xs with position i set to x.
func replaced[E any](xs []E, i int, x E) []E {
	out := make([]E, len(xs))
	copy(out, xs)
	out[i] = x
	return out
}

func (s valueSet[T]) len() int { return s.size }

// appendTo appends every value to dst. It never allocates beyond dst's growth.
func (s valueSet[T]) appendTo(dst []T) []T {
	if s.root == nil {
		return append(dst, s.small...)
	}
	return s.root.appendTo(dst)
}

func (n *hamtNode[T]) appendTo(dst []T) []T {
	dst = append(dst, n.collisions...)
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
	for _, v := range n.collisions {
		if !yield(v) {
			return false
		}
	}
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
		for _, x := range s.small {
			if x == v {
				return true
			}
		}
		return false
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
	for _, x := range n.collisions {
		if x == v {
			return true
		}
	}
	return false
}

// with returns the set with v added, and whether v was new. When v is
// already present it returns s itself, so callers can skip the write.
func (s valueSet[T]) with(v T) (valueSet[T], bool) {
	if s.root == nil {
		for _, x := range s.small {
			if x == v {
				return s, false
			}
		}
		if len(s.small) < smallSetMax {
			small := make([]T, len(s.small)+1)
			copy(small, s.small)
			small[len(s.small)] = v
			return valueSet[T]{small: small, size: len(small)}, true
		}
		// Promote to a HAMT.
		var root *hamtNode[T] = &hamtNode[T]{}
		for _, x := range s.small {
			root, _ = root.with(0, hashOf(x), x)
		}
		root, _ = root.with(0, hashOf(v), v)
		return valueSet[T]{root: root, size: s.size + 1}, true
	}
	root, added := s.root.with(0, hashOf(v), v)
	if !added {
		return s, false
	}
	return valueSet[T]{root: root, size: s.size + 1}, true
}

func (n *hamtNode[T]) with(shift uint, h uint64, v T) (*hamtNode[T], bool) {
	if shift >= hashBits {
		for _, x := range n.collisions {
			if x == v {
				return n, false
			}
		}
		return &hamtNode[T]{collisions: inserted(n.collisions, len(n.collisions), v)}, true
	}
	bit := slotBit(h, shift)
	c := *n
	switch {
	case n.dataMap&bit != 0:
		pos := rank(n.dataMap, bit)
		old := n.values[pos]
		if old == v {
			return n, false
		}
		// Two values share this slot: push both one level down.
		child := hamtPair(shift+hamtBits, hashOf(old), old, h, v)
		c.dataMap &^= bit
		c.values = removed(n.values, pos)
		c.nodeMap |= bit
		c.children = inserted(n.children, rank(c.nodeMap, bit), child)
	case n.nodeMap&bit != 0:
		pos := rank(n.nodeMap, bit)
		child, added := n.children[pos].with(shift+hamtBits, h, v)
		if !added {
			return n, false
		}
		c.children = replaced(n.children, pos, child)
	default:
		c.dataMap |= bit
		c.values = inserted(n.values, rank(c.dataMap, bit), v)
	}
	return &c, true
}

// hamtPair builds the smallest sub-trie holding two distinct values.
func hamtPair[T comparable](shift uint, h1 uint64, v1 T, h2 uint64, v2 T) *hamtNode[T] {
	if shift >= hashBits {
		return &hamtNode[T]{collisions: []T{v1, v2}}
	}
	b1, b2 := slotBit(h1, shift), slotBit(h2, shift)
	if b1 == b2 {
		return &hamtNode[T]{nodeMap: b1, children: []*hamtNode[T]{hamtPair(shift+hamtBits, h1, v1, h2, v2)}}
	}
	if b2 < b1 {
		v1, v2 = v2, v1
	}
	return &hamtNode[T]{dataMap: b1 | b2, values: []T{v1, v2}}
}

// without returns the set with v removed, and whether v was present. When v
// is absent it returns s itself.
func (s valueSet[T]) without(v T) (valueSet[T], bool) {
	if s.root == nil {
		for i, x := range s.small {
			if x == v {
				if len(s.small) == 1 {
					return valueSet[T]{}, true
				}
				small := make([]T, 0, len(s.small)-1)
				small = append(small, s.small[:i]...)
				small = append(small, s.small[i+1:]...)
				return valueSet[T]{small: small, size: len(small)}, true
			}
		}
		return s, false
	}
	root, removed := s.root.without(0, hashOf(v), v)
	if !removed {
		return s, false
	}
	if s.size-1 <= smallSetDemote {
		small := make([]T, 0, s.size-1)
		if root != nil {
			small = root.appendTo(small)
		}
		return valueSet[T]{small: small, size: len(small)}, true
	}
	return valueSet[T]{root: root, size: s.size - 1}, true
}

// without returns the node with v removed (nil when it became empty).
func (n *hamtNode[T]) without(shift uint, h uint64, v T) (*hamtNode[T], bool) {
	if shift >= hashBits {
		for i, x := range n.collisions {
			if x == v {
				if len(n.collisions) == 1 {
					return nil, true
				}
				return &hamtNode[T]{collisions: removed(n.collisions, i)}, true
			}
		}
		return n, false
	}
	bit := slotBit(h, shift)
	c := *n
	switch {
	case n.dataMap&bit != 0:
		pos := rank(n.dataMap, bit)
		if n.values[pos] != v {
			return n, false
		}
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
			c.nodeMap &^= bit
			c.children = removed(n.children, pos)
		case len(child.values) == 1 && len(child.children) == 0 && len(child.collisions) == 0:
			// Pull a lone value up, so that removals keep the trie as
			// shallow as inserts would have built it.
			c.nodeMap &^= bit
			c.children = removed(n.children, pos)
			c.dataMap |= bit
			c.values = inserted(n.values, rank(c.dataMap, bit), child.values[0])
		default:
			c.children = replaced(n.children, pos, child)
		}
	default:
		return n, false
	}
	if c.isEmpty() {
		return nil, true
	}
	return &c, true
}
