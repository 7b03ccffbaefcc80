package matcher

import (
	"encoding/binary"
	"math/bits"
	"slices"
	"sync/atomic"
	"unsafe"
)

// generation stamps I-nodes. Pointer identity is the generation: a snapshot
// gives the live trie's root a new one. It must not be zero-sized, or two
// generations could share an address.
type generation struct{ _ byte }

// iNode is the indirection node. It is never replaced in its parent by a
// write below it: writes swap its main pointer instead, so concurrent writes
// at different depths never lose each other (the I-node invariant).
type iNode[T comparable] struct {
	main atomic.Pointer[mainNode[T]]
	gen  *generation
}

func newINode[T comparable](main *mainNode[T], gen *generation) *iNode[T] {
	in := &iNode[T]{gen: gen}
	in.main.Store(main)
	return in
}

// mainNode is what an I-node points to: a C-node (embedded, so that a
// reader reaches the branches in one hop), or a tomb, or, only ever in a
// prev field, a failure marker of GCAS. It is 64 bytes (for any T), and a
// write allocates it together with its branches (allocMain).
type mainNode[T comparable] struct {
	// prev is GCAS's proposal state: nil once committed; the main node this
	// one replaced while the write is pending; or a failure marker. In a
	// failure marker (failed set), prev holds the main node to roll back
	// to. It comes first so that a reader's check of it and the branches it
	// reads next share one cache line.
	prev atomic.Pointer[mainNode[T]]

	cNode[T] // the branches; empty for a tomb

	// tomb marks a tombed I-node: its C-node became empty and it waits to be
	// cut out of its parent. A tomb is the last main node an I-node ever has
	// (the T-node invariant), so no write can land in a node being removed.
	tomb   bool
	failed bool
}

// cNode is an immutable level of the trie: one branch per next token. It is
// a value: writers build a modified copy and publish it in a new main node.
//
// Everything Match reads (with mainNode.prev) fits in the first 64 bytes of
// the main node: the literals' slice header, the keys and table pointers,
// and the '*' and '>' pointers.
type cNode[T comparable] struct {
	literals []branch[T] // the literal tokens' branches
	// keys holds tokenKey of each literal, in literals' order, while there
	// are at most linearScanMax (else nil): a lookup scans 8 keys in one
	// cache line instead of touching one 64-byte branch per key.
	keys  *uint64
	table *literalTable // indexes literals when there are more than linearScanMax
	star  *branch[T]    // the '*' branch, or nil
	full  *branch[T]    // the '>' branch (values only: '>' is always last), or nil
}

// mainBlock1 to mainBlock8 put a main node, its literals' keys and room for
// its branches in one allocation: a write that copies a level pays one
// allocation, not one for each part.
type (
	mainBlock1[T comparable] struct {
		m mainNode[T]
		k [1]uint64
		b [1]branch[T]
	}
	mainBlock2[T comparable] struct {
		m mainNode[T]
		k [2]uint64
		b [2]branch[T]
	}
	mainBlock4[T comparable] struct {
		m mainNode[T]
		k [4]uint64
		b [4]branch[T]
	}
	mainBlock8[T comparable] struct {
		m mainNode[T]
		k [8]uint64
		b [8]branch[T]
	}
)

// allocMain returns a new main node and room for n branches and their keys,
// in one allocation while n <= 8 (a level with more literals has a probing
// table instead of keys, allocated apart anyway).
func allocMain[T comparable](n int) (*mainNode[T], []branch[T], []uint64) {
	switch {
	case n == 0:
		return &mainNode[T]{}, nil, nil
	case n == 1:
		b := &mainBlock1[T]{}
		return &b.m, b.b[:], b.k[:]
	case n == 2:
		b := &mainBlock2[T]{}
		return &b.m, b.b[:], b.k[:]
	case n <= 4:
		b := &mainBlock4[T]{}
		return &b.m, b.b[:n:n], b.k[:n:n]
	case n <= 8:
		b := &mainBlock8[T]{}
		return &b.m, b.b[:n:n], b.k[:n:n]
	}
	return &mainNode[T]{}, make([]branch[T], n), nil
}

// literalTable is open addressing with linear probing over a C-node's
// literals: 0 is an empty slot, i+1 stands for literals[i]. Its length is a
// power of two at least twice the number of literals.
type literalTable struct {
	slots []int32
	shift uint8
}

// branch is immutable: the values subscribed through the pattern that ends at
// token, and the I-node of the next level, if any patterns go deeper. It is
// 64 bytes: one cache line.
type branch[T comparable] struct {
	key   uint64 // tokenKey(token), for literal branches
	token string
	subs  valueSet[T]
	child *iNode[T]
}

// is reports whether the literal branch is for the token whose key is key.
// A key holds every byte of a token of up to 7 bytes, so only longer tokens
// need the string compare (and the load of the token's bytes).
func (b *branch[T]) is(key uint64, token string) bool {
	return b.key == key && (len(token) <= 7 || b.token == token)
}

func (b *branch[T]) isEmpty() bool { return b.subs.len() == 0 && b.child == nil }

// linearScanMax is the number of literal branches up to which comparing
// every key beats hashing one: past it, a lookup probes table.
const linearScanMax = 8

// tokenKey packs a token's length and its first 7 bytes into one word, so
// that lookups compare words and confirm an equal key with one string
// compare. The length saturates at 255 (a token may be up to
// MaxSubjectLength bytes): a length kept modulo 256 would give a token of 7
// bytes or fewer, whose key is trusted without the compare, the key of a
// longer one that begins with it.
func tokenKey(token string) uint64 { return keyAt(token, 0, len(token)) }

// keyAt is tokenKey of s[start:end], read with one 8-byte load where s is
// long enough (the subject around a token, not just the token, must hold 8
// bytes), so that each key costs a few instructions. subjectTokens.tokenize
// does the same for all of a subject's tokens in one loop.
func keyAt(s string, start, end int) uint64 {
	if len(s) < 8 {
		return keyAtShort(s, start, end)
	}
	return keyFrom(unsafe.StringData(s), len(s), start, end)
}

// keyFrom is keyAt on the len bytes at p, len >= 8: the 8 bytes from start,
// or, near the end, the last 8 bytes shifted so that the token's first byte
// comes first, masked to the token's first 7 and tagged with its length.
func keyFrom(p *byte, len, start, end int) uint64 {
	off := min(start, len-8)
	w := binary.LittleEndian.Uint64(unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(p), off)), 8))
	w >>= (8 * (start - off)) & 63 // start-off < 8; the mask spares a check for shifts past 63
	n := end - start
	return packKey(w, n)
}

func keyAtShort(s string, start, end int) uint64 {
	n := end - start
	var w uint64
	for i := n - 1; i >= 0; i-- {
		w = w<<8 | uint64(s[start+i])
	}
	return packKey(w, n)
}

// packKey is the key of an n-byte token whose first bytes are w's low
// ones: its first 7 bytes, and its length, saturated at 255, in the top
// byte.
func packKey(w uint64, n int) uint64 {
	return w&(1<<(8*min(n, 7))-1) | uint64(min(n, 255))<<56
}

// slotOf is the table slot a key hashes to (Fibonacci hashing).
func slotOf(key uint64, shift uint8) int { return int((key * 0x9E3779B97F4A7C15) >> shift) }

func (cn *cNode[T]) isEmpty() bool {
	return len(cn.literals) == 0 && cn.star == nil && cn.full == nil
}

// literal finds the branch of a literal token whose tokenKey is key. On
// Match's hot path: it returns a pointer into the immutable C-node. A key
// holds every byte of a token of up to 7 bytes, so only longer tokens need
// the string compare.
func (cn *cNode[T]) literal(key uint64, token string) *branch[T] {
	if cn.table == nil {
		// No early exit: a scan of all (at most 8) keys whose compare
		// compiles to a conditional move has no branch to mispredict
		// on where the key sits. Keys are unique for tokens of up to 7
		// bytes; longer tokens may share one and take the slow path.
		found := -1
		keys := unsafe.Slice(cn.keys, len(cn.literals))
		for i, k := range keys {
			if k == key {
				found = i
			}
		}
		if found < 0 {
			return nil
		}
		if len(token) > 7 {
			return cn.longLiteral(keys, key, token)
		}
		return &cn.literals[found]
	}
	slots := cn.table.slots
	mask := len(slots) - 1
	for h := slotOf(key, cn.table.shift); ; h = (h + 1) & mask {
		j := slots[h]
		if j == 0 {
			return nil
		}
		if br := &cn.literals[j-1]; br.is(key, token) {
			return br
		}
	}
}

// longLiteral finds a token longer than 7 bytes among keys that may repeat.
func (cn *cNode[T]) longLiteral(keys []uint64, key uint64, token string) *branch[T] {
	for i, k := range keys {
		if k == key && cn.literals[i].token == token {
			return &cn.literals[i]
		}
	}
	return nil
}

// literalIndex is literal's position in literals, or -1; for writers.
func (cn *cNode[T]) literalIndex(key uint64, token string) int {
	br := cn.literal(key, token)
	if br == nil {
		return -1
	}
	for i := range cn.literals {
		if &cn.literals[i] == br {
			return i
		}
	}
	panic("matcher: literal outside its C-node") // unreachable: literal returns an element of literals
}

// lookup returns token's branch ('*' and '>' included), or an empty branch
// for token.
func (cn *cNode[T]) lookup(token string) branch[T] {
	switch token {
	case singleWildcard:
		if cn.star != nil {
			return *cn.star
		}
	case fullWildcard:
		if cn.full != nil {
			return *cn.full
		}
	default:
		if br := cn.literal(tokenKey(token), token); br != nil {
			return *br
		}
	}
	return branch[T]{token: token}
}

// with returns a new main node holding a copy of cn in which br replaces the
// branch of br.token; an empty br removes it. The node and its branches are
// one allocation (allocMain), and replacing a literal keeps the probing
// table, which maps keys to positions that do not move.
func (cn *cNode[T]) with(br branch[T]) *mainNode[T] {
	switch br.token {
	case singleWildcard, fullWildcard:
		var m *mainNode[T]
		var nb *branch[T]
		if !br.isEmpty() {
			var room []branch[T]
			m, room, _ = allocMain[T](1)
			room[0] = br
			nb = &room[0]
		} else {
			m = &mainNode[T]{}
		}
		m.cNode = *cn
		if br.token == singleWildcard {
			m.star = nb
		} else {
			m.full = nb
		}
		return m
	}
	br.key = tokenKey(br.token)
	i, n := cn.literalIndex(br.key, br.token), len(cn.literals)
	switch {
	case i >= 0 && !br.isEmpty(): // replace: positions, and so keys and table, hold
		m, room, keys := allocMain[T](n)
		m.cNode = *cn
		copy(room, cn.literals)
		room[i] = br
		m.setLiterals(room, keys, cn.table, false)
		return m
	case i >= 0: // remove
		m, room, keys := allocMain[T](n - 1)
		m.cNode = *cn
		copy(room, cn.literals[:i])
		copy(room[i:], cn.literals[i+1:])
		m.setLiterals(room, keys, nil, false)
		return m
	case !br.isEmpty(): // add, at the end
		m, room, keys := allocMain[T](n + 1)
		m.cNode = *cn
		copy(room, cn.literals)
		room[n] = br
		m.setLiterals(room, keys, cn.table, true)
		return m
	}
	m := &mainNode[T]{} // removing what is not there: an unchanged copy
	m.cNode = *cn
	return m
}

// setLiterals sets literals and their index: keys (which has room for one
// per literal) while there are at most linearScanMax, a probing table past
// that. A table is prev when the positions did not change (kept), a copy of
// prev with one slot set when one literal was appended and prev stays at
// most half full, and else built afresh.
func (cn *cNode[T]) setLiterals(literals []branch[T], keys []uint64, prev *literalTable, appended bool) {
	n := len(literals)
	if n == 0 {
		literals = nil
	}
	cn.literals, cn.keys, cn.table = literals, nil, nil
	if n <= linearScanMax {
		if n > 0 {
			if keys == nil {
				keys = make([]uint64, n)
			}
			for i := range literals {
				keys[i] = literals[i].key
			}
			cn.keys = &keys[0]
		}
		return
	}
	switch {
	case prev != nil && !appended:
		cn.table = prev
	case prev != nil && len(prev.slots) >= 2*n:
		t := &literalTable{slots: slices.Clone(prev.slots), shift: prev.shift}
		t.insert(literals[n-1].key, n-1)
		cn.table = t
	default:
		size := 1 << bits.Len(uint(2*n-1)) // a power of two >= 2n
		t := &literalTable{slots: make([]int32, size), shift: uint8(64 - bits.TrailingZeros(uint(size)))}
		for i := range literals {
			t.insert(literals[i].key, i)
		}
		cn.table = t
	}
}

func (t *literalTable) insert(key uint64, i int) {
	mask := len(t.slots) - 1
	h := slotOf(key, t.shift)
	for t.slots[h] != 0 {
		h = (h + 1) & mask
	}
	t.slots[h] = int32(i + 1)
}

// forEach calls f for every branch, '>' included (with no child).
func (cn *cNode[T]) forEach(f func(br *branch[T])) {
	for i := range cn.literals {
		f(&cn.literals[i])
	}
	if cn.star != nil {
		f(cn.star)
	}
	if cn.full != nil {
		f(cn.full)
	}
}

// withChildren returns a copy of cn in which every child I-node is replaced
// by f's result (nil cuts the child), and whether anything changed. Branches
// left with neither values nor a child disappear.
func (cn *cNode[T]) withChildren(f func(child *iNode[T]) *iNode[T]) (cNode[T], bool) {
	changed := false
	n := *cn
	if cn.star != nil && cn.star.child != nil {
		if c := f(cn.star.child); c != cn.star.child {
			changed = true
			n.star = &branch[T]{token: singleWildcard, subs: cn.star.subs, child: c}
			if n.star.isEmpty() {
				n.star = nil
			}
		}
	}
	var literals []branch[T]
	for i, lb := range cn.literals {
		if lb.child != nil {
			if c := f(lb.child); c != lb.child {
				if literals == nil {
					literals = make([]branch[T], i, len(cn.literals))
					copy(literals, cn.literals[:i])
				}
				changed = true
				lb.child = c
			}
		}
		if literals != nil && !lb.isEmpty() {
			literals = append(literals, lb)
		}
	}
	if literals != nil {
		n.setLiterals(literals, nil, nil, false)
	}
	return n, changed
}

// chainLevel is one level of a fresh chain: its I-node, main node, only
// branch and (at the last level) the one value, so that newChain makes a
// whole chain in one allocation instead of three per level. The parts of a
// level that later writes replace stay allocated with the block until the
// whole chain is unreachable: at most the chain's own size.
type chainLevel[T comparable] struct {
	in  iNode[T]
	m   mainNode[T]
	key [1]uint64
	br  [1]branch[T]
	v   [1]T
}

// newChain builds the fresh path for tokens: the I-node holding tokens[0]'s
// branch, and so on down to the branch of the last token, which holds v.
func newChain[T comparable](tokens []string, v T, gen *generation) *iNode[T] {
	levels := make([]chainLevel[T], len(tokens))
	for i := len(levels) - 1; i >= 0; i-- {
		l := &levels[i]
		l.in.gen = gen
		br := &l.br[0]
		br.token = tokens[i]
		if i == len(levels)-1 {
			l.v[0] = v
			br.subs = valueSet[T]{small: l.v[:]}
		} else {
			br.child = &levels[i+1].in
		}
		switch br.token {
		case singleWildcard:
			l.m.star = br
		case fullWildcard:
			l.m.full = br
		default:
			br.key = tokenKey(br.token)
			l.key[0] = br.key
			l.m.literals, l.m.keys = l.br[:], &l.key[0]
		}
		l.in.main.Store(&l.m)
	}
	return &levels[0].in
}

// newMain returns a main node holding cn (for the rarer writes that build a
// C-node first: renewals and compressions).
func newMain[T comparable](cn cNode[T]) *mainNode[T] { return &mainNode[T]{cNode: cn} }
