package matcher

import (
	"cmp"
	"hash/maphash"
	"iter"
	"math/bits"
	"slices"
	"sync/atomic"
	"unsafe"
)

// valueSet is an immutable set of the values subscribed through one pattern.
// Every update returns a new set and leaves the old one intact, so a C-node
// (and so a snapshot) that holds the old set keeps seeing exactly it.
//
// Small sets, the common case, are a slice copied on write: appending them to
// a match result is one copy. Past smallSetMax values the set becomes a hash
// array mapped trie (HAMT) of 32-way nodes plus a tail: the values added
// since the HAMT was last written, in an append-only chunk of tailCap
// slots. Adding a value to a large set appends it to the tail, without
// copying anything but the C-node that holds the set; when the tail is full
// its values go into the HAMT in one batch, which copies each node on their
// paths once (O(log32 n) nodes per batch at the top, one bottom node per
// value). So with 30,000 subscribers on one subject an insert costs a
// hash, a HAMT lookup and a scan of the tail, not a copy of 30,000 values
// nor of the HAMT's path.
//
// It is 32 bytes, so that a branch is 64: the size of a large set is its
// root's count plus its tail's length.
type valueSet[T comparable] struct {
	// small holds the values when root is nil. When root is not nil it is
	// the tail: nil, or a prefix of a tailChunk's slots (chunkOf).
	small []T
	root  *hamtNode[T] // the values outside the tail, when the set is large
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

	// tailCap is the number of values a large set's tail holds before they
	// go into the HAMT in one batch. A larger tail spreads the copies of
	// the HAMT's upper levels over more inserts, but a removal from the
	// tail copies it and every lookup of an absent value scans it.
	tailCap = 64
)

// tailChunk holds a large set's tail. Its slots are append-only and shared
// by every version of the set that extends the same prefix: a set whose
// tail is slots[:n] adds a value by claiming position n (claimed from n to
// n+1, by CAS), writing the slot and returning slots[:n+1]. A version
// reads only its own prefix, written before the version was published, so
// a slot is written once, before any version that holds it exists, and
// never changes after. Only one claim of a position succeeds; a writer
// that loses it (another version already extends this prefix, or a claim
// whose write failed to commit burned the position) copies the tail into
// a fresh chunk instead. slots comes first, so that a tail's first slot's
// address is its chunk's.
type tailChunk[T comparable] struct {
	slots   [tailCap]T
	claimed atomic.Uint32 // positions handed out; never decreases
}

// chunkOf returns the chunk whose slots tail (a large set's non-nil tail)
// is a prefix of.
func chunkOf[T comparable](tail []T) *tailChunk[T] {
	return (*tailChunk[T])(unsafe.Pointer(unsafe.SliceData(tail)))
}

// newTail returns a tail in a fresh chunk holding vals and then v.
func newTail[T comparable](vals []T, v T) []T {
	ch := new(tailChunk[T])
	n := copy(ch.slots[:], vals)
	ch.slots[n] = v
	ch.claimed.Store(uint32(n + 1))
	return ch.slots[: n+1 : tailCap]
}

// tailWithout returns tail without position i: a prefix of the same chunk
// when i is the last position (the chunk's claims are past it, so the next
// insert copies), else a fresh chunk, or nil when nothing is left.
func tailWithout[T comparable](tail []T, i int) []T {
	n := len(tail) - 1
	switch {
	case n == 0:
		return nil
	case i == n:
		return tail[:n]
	}
	ch := new(tailChunk[T])
	copy(ch.slots[:], tail[:i])
	copy(ch.slots[i:], tail[i+1:])
	ch.claimed.Store(uint32(n))
	return ch.slots[:n:tailCap]
}

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

// hamtLeaf1 to hamtLeaf32 put a node without sub-nodes (most nodes at the
// bottom of a large set) and its values in one allocation.
type (
	hamtLeaf1[T comparable] struct {
		n hamtNode[T]
		v [1]T
	}
	hamtLeaf2[T comparable] struct {
		n hamtNode[T]
		v [2]T
	}
	hamtLeaf4[T comparable] struct {
		n hamtNode[T]
		v [4]T
	}
	hamtLeaf8[T comparable] struct {
		n hamtNode[T]
		v [8]T
	}
	hamtLeaf16[T comparable] struct {
		n hamtNode[T]
		v [16]T
	}
	hamtLeaf32[T comparable] struct {
		n hamtNode[T]
		v [32]T
	}
)

// allocLeaf returns a new node without sub-nodes and with room for k values
// (values has length k), in one allocation while k <= hamtWidth.
func allocLeaf[T comparable](k int) *hamtNode[T] {
	switch {
	case k == 0:
		return &hamtNode[T]{}
	case k == 1:
		b := &hamtLeaf1[T]{}
		b.n.values = b.v[:]
		return &b.n
	case k == 2:
		b := &hamtLeaf2[T]{}
		b.n.values = b.v[:]
		return &b.n
	case k <= 4:
		b := &hamtLeaf4[T]{}
		b.n.values = b.v[:k:k]
		return &b.n
	case k <= 8:
		b := &hamtLeaf8[T]{}
		b.n.values = b.v[:k:k]
		return &b.n
	case k <= 16:
		b := &hamtLeaf16[T]{}
		b.n.values = b.v[:k:k]
		return &b.n
	case k <= 32:
		b := &hamtLeaf32[T]{}
		b.n.values = b.v[:k:k]
		return &b.n
	}
	return &hamtNode[T]{values: make([]T, k)}
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
		return s.root.size + len(s.small)
	}
	return len(s.small)
}

// appendTo appends every value to dst. It never allocates beyond dst's growth.
func (s valueSet[T]) appendTo(dst []T) []T {
	dst = append(dst, s.small...)
	if s.root == nil {
		return dst
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
	for _, v := range s.small {
		if !yield(v) {
			return false
		}
	}
	return s.root == nil || s.root.all(yield)
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
	if slices.Contains(s.small, v) {
		return true
	}
	return s.root != nil && s.root.contains(0, hashOf(v), v)
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
	if slices.Contains(s.small, v) {
		return s, false
	}
	if s.root == nil {
		if len(s.small) < smallSetMax {
			small := make([]T, len(s.small)+1)
			copy(small, s.small)
			small[len(s.small)] = v
			return valueSet[T]{small: small}, true
		}
		// Promote to a HAMT, with an empty tail.
		items := make([]hashedValue[T], 0, len(s.small)+1)
		items = appendHashed(items, s.small)
		items = append(items, hashedValue[T]{hashOf(v), v})
		return valueSet[T]{root: (&hamtNode[T]{}).withAll(0, items)}, true
	}
	h := hashOf(v)
	if s.root.contains(0, h, v) {
		return s, false
	}
	tail := s.small
	n := len(tail)
	switch {
	case n == tailCap:
		// The tail is full: its values and v go into the HAMT.
		items := make([]hashedValue[T], 0, n+1)
		items = appendHashed(items, tail)
		items = append(items, hashedValue[T]{h, v})
		return valueSet[T]{root: s.root.withAll(0, items)}, true
	case n > 0:
		if ch := chunkOf(tail); ch.claimed.CompareAndSwap(uint32(n), uint32(n+1)) {
			ch.slots[n] = v
			return valueSet[T]{small: ch.slots[: n+1 : tailCap], root: s.root}, true
		}
	}
	return valueSet[T]{small: newTail(tail, v), root: s.root}, true
}

// hashedValue is a value with its hash, for batch inserts.
type hashedValue[T comparable] struct {
	h uint64
	v T
}

func appendHashed[T comparable](items []hashedValue[T], vals []T) []hashedValue[T] {
	for _, v := range vals {
		items = append(items, hashedValue[T]{hashOf(v), v})
	}
	return items
}

// without returns the set with v removed, and whether v was present. When v
// is absent it returns s itself.
func (s valueSet[T]) without(v T) (valueSet[T], bool) {
	i := slices.Index(s.small, v)
	if s.root == nil {
		if i < 0 {
			return s, false
		}
		return valueSet[T]{small: removed(s.small, i)}, true
	}
	root, tail := s.root, s.small
	if i >= 0 {
		tail = tailWithout(tail, i)
	} else {
		var found bool
		if root, found = root.without(0, hashOf(v), v); !found {
			return s, false
		}
	}
	switch size := s.len() - 1; {
	case size <= smallSetDemote:
		small := make([]T, 0, size)
		small = append(small, tail...)
		if root != nil {
			small = root.appendTo(small)
		}
		return valueSet[T]{small: small}, true
	case root == nil:
		// The HAMT emptied but the tail holds more than a small set
		// keeps: the tail becomes the HAMT.
		items := appendHashed(make([]hashedValue[T], 0, len(tail)), tail)
		return valueSet[T]{root: (&hamtNode[T]{}).withAll(0, items)}, true
	}
	return valueSet[T]{small: tail, root: root}, true
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
		if len(n.children) == 0 {
			c = allocLeaf[T](len(n.values) - 1)
			c.dataMap, c.size = n.dataMap, n.size
			copy(c.values, n.values[:pos])
			copy(c.values[pos:], n.values[pos+1:])
		} else {
			c = n.cloned(len(n.children), 0)
			c.values = removed(n.values, pos)
		}
		c.dataMap &^= bit
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

// withAll returns n with every item added. The items are distinct and none
// is in n. It copies each node on the items' paths once, so a batch of k
// values costs one copy of the levels they share instead of k.
func (n *hamtNode[T]) withAll(shift uint, items []hashedValue[T]) *hamtNode[T] {
	if shift >= hashBits {
		c := n.cloned(0, 0)
		c.values = make([]T, len(n.values), len(n.values)+len(items))
		copy(c.values, n.values)
		for _, it := range items {
			c.values = append(c.values, it.v)
		}
		c.size += len(items)
		return c
	}
	slot := func(h uint64) uint32 { return slotBit(h, shift) }
	slices.SortFunc(items, func(a, b hashedValue[T]) int { return cmp.Compare(slot(a.h), slot(b.h)) })
	// The new bitmaps: a slot that gets one item and held nothing holds
	// the item; a slot that gets more, or gets any and held something,
	// holds a sub-node.
	dataMap, nodeMap := n.dataMap, n.nodeMap
	for bit, group := range slotGroups(items, slot) {
		if len(group) == 1 && (dataMap|nodeMap)&bit == 0 {
			dataMap |= bit
		} else {
			dataMap &^= bit
			nodeMap |= bit
		}
	}
	var c *hamtNode[T]
	if nodeMap == 0 {
		c = allocLeaf[T](bits.OnesCount32(dataMap))
	} else {
		c = allocHamt[T](bits.OnesCount32(nodeMap))
	}
	c.dataMap, c.nodeMap, c.size = dataMap, nodeMap, n.size+len(items)
	// What no item touches is copied in bulk: at the upper levels, where
	// items only go into sub-nodes, the values are shared and the sub-node
	// array is one copy.
	if nodeMap == n.nodeMap {
		copy(c.children, n.children)
	} else {
		for m := nodeMap & n.nodeMap; m != 0; m &= m - 1 {
			bit := m & -m
			c.children[rank(nodeMap, bit)] = n.children[rank(n.nodeMap, bit)]
		}
	}
	switch k := bits.OnesCount32(dataMap); {
	case dataMap == n.dataMap && n.nodeMap != 0:
		// Shared, unless n is a leaf whose values may sit in its own
		// allocation (allocLeaf), which c would then keep alive.
		c.values = n.values
	case k > 0:
		if c.values == nil {
			c.values = make([]T, k)
		}
		for m := dataMap & n.dataMap; m != 0; m &= m - 1 {
			bit := m & -m
			c.values[rank(dataMap, bit)] = n.values[rank(n.dataMap, bit)]
		}
	}
	for bit, group := range slotGroups(items, slot) {
		if dataMap&bit != 0 { // a new value in a slot that was empty
			c.values[rank(dataMap, bit)] = group[0].v
			continue
		}
		var child *hamtNode[T]
		switch {
		case n.nodeMap&bit != 0:
			child = n.children[rank(n.nodeMap, bit)].withAll(shift+hamtBits, group)
		case n.dataMap&bit != 0:
			// The value held here moves down with the group.
			old := n.values[rank(n.dataMap, bit)]
			moved := make([]hashedValue[T], 0, len(group)+1)
			moved = append(moved, hashedValue[T]{hashOf(old), old})
			child = (&hamtNode[T]{}).withAll(shift+hamtBits, append(moved, group...))
		default:
			child = (&hamtNode[T]{}).withAll(shift+hamtBits, group)
		}
		c.children[rank(nodeMap, bit)] = child
	}
	return c
}

// slotGroups yields the runs of items (sorted by slot) that share a slot,
// with the slot's bit.
func slotGroups[T comparable](items []hashedValue[T], slot func(uint64) uint32) iter.Seq2[uint32, []hashedValue[T]] {
	return func(yield func(uint32, []hashedValue[T]) bool) {
		for i := 0; i < len(items); {
			bit := slot(items[i].h)
			j := i + 1
			for j < len(items) && slot(items[j].h) == bit {
				j++
			}
			if !yield(bit, items[i:j]) {
				return
			}
			i = j
		}
	}
}
