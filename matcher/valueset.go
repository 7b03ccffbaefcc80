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
// hash, a lookup and a scan of the tail, not a copy of 30,000 values nor
// of the HAMT's path.
//
// Past midMin values, full tails go not into the HAMT but into a mid
// chunk: an append-only array of values with a hash index of their
// positions, shared by every version that extends the same prefix, as a
// tail's chunk is. When the mid chunk is full its values go into the HAMT
// in one batch about as large as the HAMT, which copies each of the HAMT's
// nodes about once, so a value costs a constant number of copies instead of
// a copy of a bottom node and of the node above it. A removal of a mid
// value moves the other mid values into the HAMT: O(mid values) once, which
// at least as many inserts put there.
//
// It is 32 bytes, so that a branch is 64.
type valueSet[T comparable] struct {
	// small holds the values when big is nil. When big is not nil it is
	// the tail: nil, or a prefix of a tailChunk's slots (chunkOf).
	small []T
	big   *bigSet[T] // the values outside the tail, when the set is large
}

// bigSet is the part of a large set outside its tail: a HAMT and a prefix
// of a mid chunk. It is immutable; a version of the set that only changes
// its tail shares it.
type bigSet[T comparable] struct {
	root *hamtNode[T] // never nil; may be empty
	mid  []T          // a prefix of midc.vals; nil when midc is
	midc *midChunk[T]

	// filter, when not nil, holds a superset of the values in root and
	// mid; it is not nil while midc is not. noted counts the values noted
	// in it along this version's history (other versions sharing it add
	// their own, so it is an estimate): when a new mid chunk would take
	// the filter past its capacity, a fresh one is built from root. It
	// outlives the mid chunks it served, so that a removal from the mid
	// values, which moves them into the HAMT, does not cost a walk of the
	// whole HAMT when the next chunk comes.
	filter *valueFilter
	noted  int

	// nextCap, when not 0, is the capacity of the next mid chunk (else
	// the HAMT's size): a removal that empties a chunk of few values asks
	// for a small one next, so that a large set whose recent values often
	// leave does not allocate and clear a chunk as large as the HAMT each
	// time.
	nextCap int
}

// len is the number of values in the HAMT and the mid values.
func (b *bigSet[T]) len() int { return b.root.size + len(b.mid) }

// valueFilter is a Bloom filter of value hashes: one 64-bit word per four
// values of capacity (16 bits a value), four bits set in one word per
// value. It is shared by every version that extends the one it was made
// for, and its bits are only ever set (by atomic Or), so it holds a
// superset of the values of every such version: a value it does not hold
// is in neither the HAMT nor the mid values, and an insert of a new value
// skips the walk down the HAMT. A version is published after the bits of
// its values are set, so any goroutine that reads the version sees them.
type valueFilter struct {
	words []atomic.Uint64 // a power of two of them
}

func newValueFilter(capacity int) *valueFilter {
	return &valueFilter{words: make([]atomic.Uint64, 1<<bits.Len(uint(max(capacity, 256)/4-1)))}
}

// capacity is the number of values the filter is sized for.
func (f *valueFilter) capacity() int { return 4 * len(f.words) }

func filterBits(h uint64) uint64 {
	return 1<<(h>>40&63) | 1<<(h>>46&63) | 1<<(h>>52&63) | 1<<(h>>58&63)
}

// note adds h to the filter.
func (f *valueFilter) note(h uint64) {
	w := &f.words[h&uint64(len(f.words)-1)]
	if b := filterBits(h); w.Load()&b != b {
		w.Or(b)
	}
}

// mayHold reports false when no version sharing f has the value of hash h
// in its HAMT or mid values.
func (f *valueFilter) mayHold(h uint64) bool {
	b := filterBits(h)
	return f.words[h&uint64(len(f.words)-1)].Load()&b == b
}

// filterFor returns the filter for b (which has no mid values) about to
// take a mid chunk of capacity values, and its count of noted values: b's
// own while it has room for them, else a new one, twice the size the HAMT
// and the chunk need, holding the HAMT's values (a walk of the HAMT,
// which the chunk's capacity, about the HAMT's size, pays for).
func (b *bigSet[T]) filterFor(capacity int) (*valueFilter, int) {
	if f := b.filter; f != nil && b.noted+capacity <= f.capacity() {
		return f, b.noted
	}
	f := newValueFilter(2 * (b.root.size + capacity))
	b.root.all(func(v T) bool {
		f.note(hashOf(v))
		return true
	})
	return f, b.root.size
}

// midChunk holds a large set's mid values. Like a tail's chunk, its vals
// are append-only and shared by every version extending the same prefix:
// a version whose mid is vals[:n] adds a batch of k values by claiming
// positions n to n+k (claimed from n to n+k, by CAS), writing them and
// their index entries, and then publishing a version holding vals[:n+k].
// A slot is written once, before any version that holds it exists.
//
// index is open addressing with linear probing over the hashes' top bits:
// 0 is an empty slot, p+1 stands for vals[p]. Entries are only ever added
// (by CAS); a version of length n ignores entries for positions >= n,
// which belong to other versions or to claims whose write never
// committed. It has at least twice as many slots as vals.
type midChunk[T comparable] struct {
	vals    []T
	claimed atomic.Uint32 // positions handed out; never decreases
	shift   uint8         // 64 - log2(len(index))
	index   []atomic.Uint32
}

// newMidChunk returns an empty chunk with room for capacity values.
func newMidChunk[T comparable](capacity int) *midChunk[T] {
	size := 1 << bits.Len(uint(2*capacity-1)) // a power of two >= 2*capacity
	return &midChunk[T]{
		vals:  make([]T, capacity),
		shift: uint8(64 - bits.TrailingZeros(uint(size))),
		index: make([]atomic.Uint32, size),
	}
}

// copied returns a fresh chunk of c's capacity holding mid (a prefix of
// c's values).
func (c *midChunk[T]) copied(mid []T) *midChunk[T] {
	nc := newMidChunk[T](len(c.vals))
	items := appendHashed(make([]hashedValue[T], 0, len(mid)), mid)
	nc.claimed.Store(uint32(len(mid)))
	nc.add(0, items)
	return nc
}

// find returns the position of v (hash h) among the first n values, or -1.
func (c *midChunk[T]) find(n int, h uint64, v T) int {
	mask := len(c.index) - 1
	for i := int(h >> c.shift); ; i = (i + 1) & mask {
		e := c.index[i].Load()
		if e == 0 {
			return -1
		}
		if p := int(e - 1); p < n && c.vals[p] == v {
			return p
		}
	}
}

// add writes items at positions n on, which the caller claimed, and
// indexes them.
func (c *midChunk[T]) add(n int, items []hashedValue[T]) {
	mask := len(c.index) - 1
	for j, it := range items {
		p := n + j
		c.vals[p] = it.v
		for i := int(it.h >> c.shift); ; i = (i + 1) & mask {
			if c.index[i].CompareAndSwap(0, uint32(p+1)) {
				break
			}
		}
	}
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
	// need a level more, so more allocations per update; 64-way copy
	// twice the pointers.
	hamtBits  = 5
	hamtWidth = 1 << hamtBits
	hamtMask  = hamtWidth - 1
	// hashBits is the width of maphash's hash; a HAMT deeper than this keeps
	// colliding values in a plain list (values, with empty bitmaps).
	hashBits = 64

	// tailCap is the number of values a large set's tail holds before they
	// go into the HAMT (or the mid chunk) in one batch. A larger tail
	// spreads the copies of the HAMT's upper levels over more inserts, but
	// a removal from the tail copies it and every lookup of an absent value
	// scans it.
	tailCap = 64

	// midMin is the size from which a large set's full tails go into a
	// mid chunk; a mid chunk holds about as many values as the HAMT, and
	// at least midMin.
	midMin = 1024
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

// slotBit is the bit of h's slot at the level shift: the hash's bits are
// taken from the top down, so that items sorted by hash are sorted by slot
// at every level at once (withAll sorts a batch once).
func slotBit(h uint64, shift uint) uint32 {
	return 1 << (bits.RotateLeft64(h, int(shift)+hamtBits) & hamtMask)
}

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
	if s.big != nil {
		return s.big.len() + len(s.small)
	}
	return len(s.small)
}

// appendTo appends every value to dst. It never allocates beyond dst's growth.
func (s valueSet[T]) appendTo(dst []T) []T {
	dst = append(dst, s.small...)
	if s.big == nil {
		return dst
	}
	dst = append(dst, s.big.mid...)
	return s.big.root.appendTo(dst)
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
	if s.big == nil {
		return true
	}
	for _, v := range s.big.mid {
		if !yield(v) {
			return false
		}
	}
	return s.big.root.all(yield)
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
	return s.big != nil && s.big.contains(hashOf(v), v)
}

// contains reports whether v (hash h) is in the HAMT or the mid values.
func (b *bigSet[T]) contains(h uint64, v T) bool {
	if f := b.filter; f != nil && !f.mayHold(h) {
		return false
	}
	if c := b.midc; c != nil && c.find(len(b.mid), h, v) >= 0 {
		return true
	}
	return b.root.contains(0, h, v)
}

// noting notes items in f (when not nil) and returns noted plus their number.
func noting[T comparable](f *valueFilter, noted int, items []hashedValue[T]) int {
	if f == nil {
		return noted
	}
	for _, it := range items {
		f.note(it.h)
	}
	return noted + len(items)
}

// withRootBatch returns b with items (distinct, none in b) added
// to its HAMT, and noted in its filter, which it keeps.
func (b *bigSet[T]) withRootBatch(items []hashedValue[T]) *bigSet[T] {
	noted := noting(b.filter, b.noted, items)
	return &bigSet[T]{root: b.root.withAll(items), mid: b.mid, midc: b.midc, filter: b.filter, noted: noted, nextCap: b.nextCap}
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
	if s.big == nil {
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
		root := (&hamtNode[T]{}).withAll(items)
		return valueSet[T]{big: &bigSet[T]{root: root}}, true
	}
	h := hashOf(v)
	big := s.big
	if big.contains(h, v) {
		return s, false
	}
	tail := s.small
	n := len(tail)
	switch {
	case n == tailCap:
		// The tail is full: its values and v go into the mid chunk or
		// the HAMT.
		items := make([]hashedValue[T], 0, n+1)
		items = appendHashed(items, tail)
		items = append(items, hashedValue[T]{h, v})
		return valueSet[T]{big: big.withBatch(items)}, true
	case n > 0:
		if ch := chunkOf(tail); ch.claimed.CompareAndSwap(uint32(n), uint32(n+1)) {
			ch.slots[n] = v
			return valueSet[T]{small: ch.slots[: n+1 : tailCap], big: big}, true
		}
	}
	return valueSet[T]{small: newTail(tail, v), big: big}, true
}

// withBatch returns b with items (distinct, none in b) added: appended to
// the mid chunk when the set is large enough and the chunk has room and
// the positions are free; else, with the mid values, into the HAMT.
func (b *bigSet[T]) withBatch(items []hashedValue[T]) *bigSet[T] {
	if b.len() < midMin {
		if b.midc == nil {
			// Below midMin a set takes no mid chunk, so a filter kept from
			// a larger past would only fill up: the batch is not noted in
			// it, and the next chunk builds one.
			return &bigSet[T]{root: b.root.withAll(items)}
		}
		return b.withRootBatch(items)
	}
	c, n, f, noted := b.midc, len(b.mid), b.filter, b.noted
	if c == nil {
		capacity := b.nextCap
		if capacity == 0 {
			capacity = b.root.size
		}
		capacity = max(midMin, capacity)
		f, noted = b.filterFor(capacity)
		c = newMidChunk[T](capacity)
	}
	noted = noting(f, noted, items)
	if n+len(items) <= len(c.vals) {
		if !c.claimed.CompareAndSwap(uint32(n), uint32(n+len(items))) {
			// Another version extends this prefix (or a claim whose
			// write did not commit burned it): copy the prefix into
			// a fresh chunk, as a tail does; else every later batch
			// of this version would fail the same claim.
			c = c.copied(b.mid)
			c.claimed.Store(uint32(n + len(items)))
		}
		c.add(n, items)
		return &bigSet[T]{root: b.root, mid: c.vals[: n+len(items) : n+len(items)], midc: c, filter: f, noted: noted}
	}
	// The mid chunk is full: everything in it goes into the HAMT, and the
	// next batch starts a new chunk beside it (keeping the filter while
	// it has room).
	all := make([]hashedValue[T], 0, n+len(items))
	all = appendHashed(all, b.mid)
	all = append(all, items...)
	root := b.root.withAll(all)
	return &bigSet[T]{root: root, filter: f, noted: noted}
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
	if s.big == nil {
		if i < 0 {
			return s, false
		}
		return valueSet[T]{small: removed(s.small, i)}, true
	}
	big, tail := s.big, s.small
	if i >= 0 {
		tail = tailWithout(tail, i)
	} else {
		h := hashOf(v)
		if big.filter != nil && !big.filter.mayHold(h) {
			return s, false // in neither the HAMT nor the mid values
		}
		root, found := big.root.without(0, h, v)
		switch {
		case found:
			if root == nil {
				root = &hamtNode[T]{}
			}
			big = &bigSet[T]{root: root, mid: big.mid, midc: big.midc, filter: big.filter, noted: big.noted, nextCap: big.nextCap}
		case big.midc != nil:
			p := big.midc.find(len(big.mid), h, v)
			if p < 0 {
				return s, false
			}
			// The mid values but v go into the HAMT: a removal costs
			// O(mid values) once, after at least as many inserts. The
			// filter, which holds them already, stays for the next
			// chunk, which is twice as large as these mid values were.
			items := make([]hashedValue[T], 0, len(big.mid)-1)
			items = appendHashed(items, big.mid[:p])
			items = appendHashed(items, big.mid[p+1:])
			big = &bigSet[T]{root: big.root.withAll(items), filter: big.filter, noted: big.noted, nextCap: 2 * len(big.mid)}
		default:
			return s, false
		}
	}
	if size := big.len() + len(tail); size <= smallSetDemote {
		small := make([]T, 0, size)
		small = append(small, tail...)
		small = append(small, big.mid...)
		small = big.root.appendTo(small)
		return valueSet[T]{small: small}, true
	}
	return valueSet[T]{small: tail, big: big}, true
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

// withAll returns the HAMT n with every item added (distinct, none in n;
// their order is the caller's to lose: they are sorted here). Sorted by
// hash, the items are sorted by slot at every level, so one sort serves
// the whole batch.
func (n *hamtNode[T]) withAll(items []hashedValue[T]) *hamtNode[T] {
	slices.SortFunc(items, func(a, b hashedValue[T]) int { return cmp.Compare(a.h, b.h) })
	return n.withSorted(0, items)
}

// withSorted adds items, sorted by hash, at the level shift. It copies each
// node on the items' paths once, so a batch of k values costs one copy of
// the levels they share instead of k.
func (n *hamtNode[T]) withSorted(shift uint, items []hashedValue[T]) *hamtNode[T] {
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
			child = n.children[rank(n.nodeMap, bit)].withSorted(shift+hamtBits, group)
		case n.dataMap&bit != 0:
			// The value held here moves down with the group.
			old := n.values[rank(n.dataMap, bit)]
			oh := hashOf(old)
			at, _ := slices.BinarySearchFunc(group, oh, func(it hashedValue[T], h uint64) int { return cmp.Compare(it.h, h) })
			moved := make([]hashedValue[T], 0, len(group)+1)
			moved = append(moved, group[:at]...)
			moved = append(moved, hashedValue[T]{oh, old})
			moved = append(moved, group[at:]...)
			child = (&hamtNode[T]{}).withSorted(shift+hamtBits, moved)
		default:
			child = (&hamtNode[T]{}).withSorted(shift+hamtBits, group)
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
