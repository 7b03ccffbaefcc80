package matcher

import (
	"encoding/binary"
	"math/bits"
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
// prev field, a failure marker of GCAS.
type mainNode[T comparable] struct {
	// prev is GCAS's proposal state: nil once committed; the main node this
	// one replaced while the write is pending; or a failure marker (failed
	// set, restore holding the main node to roll back to). It comes first
	// so that a reader's check of it and the branches it reads next share
	// one cache line.
	prev atomic.Pointer[mainNode[T]]

	cNode[T] // the branches; empty for a tomb

	// tomb marks a tombed I-node: its C-node became empty and it waits to be
	// cut out of its parent. A tomb is the last main node an I-node ever has
	// (the T-node invariant), so no write can land in a node being removed.
	tomb    bool
	failed  bool
	restore *mainNode[T]
}

func newMain[T comparable](cn cNode[T]) *mainNode[T] { return &mainNode[T]{cNode: cn} }

// cNode is an immutable level of the trie: one branch per next token. It is
// a value: writers build a modified copy and publish it in a new main node.
//
// Everything Match reads (with mainNode.prev) fits in the first 64 bytes of
// the main node: the literals' slice header, the table pointer, and the
// '*' and '>' pointers.
type cNode[T comparable] struct {
	literals []branch[T]   // the literal tokens' branches
	table    *literalTable // indexes literals when there are more than linearScanMax
	star     *branch[T]    // the '*' branch, or nil
	full     *valueSet[T]  // the values of the '>' branch (which never has a child), or nil
}

// literalTable is open addressing with linear probing over a C-node's
// literals: 0 is an empty slot, i+1 stands for literals[i]. Its length is a
// power of two at least twice the number of literals.
type literalTable struct {
	slots []int32
	shift uint8
}

// branch is immutable: the values subscribed through the pattern that ends at
// token, and the I-node of the next level, if any patterns go deeper.
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
// compare.
func tokenKey(token string) uint64 { return keyAt(token, 0, len(token)) }

// keyAt is tokenKey of s[start:end], read with one 8-byte load where s is
// long enough (the subject around a token, not just the token, must hold 8
// bytes), so that Match computes each key in a few instructions.
func keyAt(s string, start, end int) uint64 {
	n := end - start
	var w uint64
	switch b := unsafe.Slice(unsafe.StringData(s), len(s)); {
	case start+8 <= len(b):
		w = binary.LittleEndian.Uint64(b[start:])
	case len(b) >= 8:
		w = binary.LittleEndian.Uint64(b[len(b)-8:]) >> (8 * (start + 8 - len(b)))
	default:
		for i := n - 1; i >= 0; i-- {
			w = w<<8 | uint64(b[start+i])
		}
	}
	if n < 7 {
		w &= 1<<(8*n) - 1
	} else {
		w &= 1<<56 - 1
	}
	return w | uint64(n)<<56
}

// slotOf is the table slot a key hashes to (Fibonacci hashing).
func slotOf(key uint64, shift uint8) int { return int((key * 0x9E3779B97F4A7C15) >> shift) }

func (cn *cNode[T]) isEmpty() bool {
	return len(cn.literals) == 0 && cn.star == nil && cn.full == nil
}

// literal finds the branch of a literal token whose tokenKey is key. On
// Match's hot path: it returns a pointer into the immutable C-node.
func (cn *cNode[T]) literal(key uint64, token string) *branch[T] {
	if cn.table == nil {
		for i := range cn.literals {
			if cn.literals[i].is(key, token) {
				return &cn.literals[i]
			}
		}
		return nil
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
			return branch[T]{token: token, subs: *cn.full}
		}
	default:
		if br := cn.literal(tokenKey(token), token); br != nil {
			return *br
		}
	}
	return branch[T]{token: token}
}

// with returns a copy of cn in which br replaces the branch of br.token; an
// empty br removes it.
func (cn *cNode[T]) with(br branch[T]) cNode[T] {
	n := *cn
	switch br.token {
	case singleWildcard:
		n.star = nil
		if !br.isEmpty() {
			n.star = &br
		}
		return n
	case fullWildcard:
		n.full = nil
		if br.subs.len() > 0 {
			n.full = &br.subs
		}
		return n
	}
	br.key = tokenKey(br.token)
	literals := make([]branch[T], 0, len(cn.literals)+1)
	for _, lb := range cn.literals {
		if lb.token != br.token {
			literals = append(literals, lb)
		}
	}
	if !br.isEmpty() {
		literals = append(literals, br)
	}
	n.setLiterals(literals)
	return n
}

func (cn *cNode[T]) setLiterals(literals []branch[T]) {
	cn.literals, cn.table = literals, nil
	if len(literals) <= linearScanMax {
		return
	}
	size := 1 << bits.Len(uint(2*len(literals)-1)) // a power of two >= 2n
	t := &literalTable{slots: make([]int32, size), shift: uint8(64 - bits.TrailingZeros(uint(size)))}
	mask := size - 1
	for i := range literals {
		h := slotOf(literals[i].key, t.shift)
		for t.slots[h] != 0 {
			h = (h + 1) & mask
		}
		t.slots[h] = int32(i + 1)
	}
	cn.table = t
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
		f(&branch[T]{token: fullWildcard, subs: *cn.full})
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
		n.setLiterals(literals)
	}
	return n, changed
}

// newChain builds the fresh path for tokens: the I-node holding tokens[0]'s
// branch, and so on down to the branch of the last token, which holds v.
func newChain[T comparable](tokens []string, v T, gen *generation) *iNode[T] {
	subs, _ := valueSet[T]{}.with(v)
	br := branch[T]{token: tokens[len(tokens)-1], subs: subs}
	for i := len(tokens) - 1; ; i-- {
		var empty cNode[T]
		in := newINode(newMain(empty.with(br)), gen)
		if i == 0 {
			return in
		}
		br = branch[T]{token: tokens[i-1], child: in}
	}
}
