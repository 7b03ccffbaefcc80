package matcher

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// Reading several I-nodes one after another is not atomic: a wildcard match
// that reads the root's '>' branch, then a deeper I-node, could see a
// subscription made after one it missed. Match therefore records every
// (I-node, main node) pair it read and, at the end, checks that each I-node
// still holds the same main node. Main nodes are fresh allocations that the
// GC never reuses while we hold them, and a rolled-back GCAS restores a node
// that was never replaced by a committed one, so "the same pointer at the
// first read and at the check" means "unchanged in between": every value
// read held at the instant of the last read, which is Match's linearization
// point. A failed check retries; after matchAttempts it matches an O(1)
// snapshot instead, so a reader under endless churn still finishes.
const (
	// inlineReads is the number of I-node reads one Match records in a
	// fixed array on its stack. A 5-token subject reads at most 31 I-nodes
	// (one per level per '*' and literal path) and, against the hot
	// workload, about a dozen. A match that reads more spills its log to
	// the heap: that is the one case in which Match allocates.
	inlineReads = 24
	// matchAttempts is how many validated attempts Match makes before it
	// falls back to a snapshot.
	matchAttempts = 4
)

type recordedRead[T comparable] struct {
	in *iNode[T]
	m  *mainNode[T]
}

// subjectTokens is a literal subject split into tokens: where they end, and
// their keys (computed once, not at every visit). It does not depend on the
// trie's value type, so its methods compile once and inline.
type subjectTokens struct {
	subject string
	ends    [MaxTokens]uint16 // ends[i] is the offset just past token i
	n       int               // number of tokens
	keys    [MaxTokens]uint64 // tokenKey of each token
}

func (ms *subjectTokens) token(i int) string {
	start := 0
	if i > 0 {
		start = int(ms.ends[i-1]) + 1
	}
	return ms.subject[start:ms.ends[i]]
}

// tokenize splits a literal subject into ms and reports whether it is valid
// (see ValidateSubject); it never builds an error, so it never allocates.
//
// It reads 8 bytes at a time: every byte NATS refuses, and the separator,
// are <= '.', so one word operation flags the bytes that need a look
// (separators, whitespace and a few punctuation bytes) and the letters and
// digits between them cost nothing each.
func (ms *subjectTokens) tokenize(s string) bool {
	if len(s) == 0 || len(s) > MaxSubjectLength {
		return false
	}
	b := unsafe.Slice(unsafe.StringData(s), len(s))
	ms.subject, ms.n = s, 0
	start, i := 0, 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		// Bit 7 of a byte of (x&0x7f..)+0x51.. is set iff its low 7 bits
		// are >= 0x2f, with no carry between bytes; or-ing x sets it for
		// bytes >= 0x80 too. What stays clear is a byte <= '.' (0x2e).
		flagged := ^((x&0x7f7f7f7f7f7f7f7f + 0x5151515151515151) | x) & 0x8080808080808080
		for flagged != 0 {
			j := i + bits.TrailingZeros64(flagged)>>3
			flagged &= flagged - 1
			if c := b[j]; c != tokenSeparator {
				if isWhitespace(c) {
					return false
				}
				continue
			}
			if !ms.addToken(s, start, j) {
				return false
			}
			start = j + 1
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c <= tokenSeparator {
			if c != tokenSeparator {
				if isWhitespace(c) {
					return false
				}
				continue
			}
			if !ms.addToken(s, start, i) {
				return false
			}
			start = i + 1
		}
	}
	if !ms.addToken(s, start, len(s)) {
		return false
	}
	// The keys, in one loop over the tokens found.
	if len(s) < 8 {
		start := 0
		for t := range ms.n {
			ms.keys[t] = keyAtShort(s, start, int(ms.ends[t]))
			start = int(ms.ends[t]) + 1
		}
		return true
	}
	p, start := unsafe.StringData(s), 0
	for t := range ms.n {
		end := int(ms.ends[t])
		ms.keys[t] = keyFrom(p, len(s), start, end)
		start = end + 1
	}
	return true
}

// addToken records that a token ends at end, refusing an empty token, one
// too many, and a wildcard.
func (ms *subjectTokens) addToken(s string, start, end int) bool {
	switch n := end - start; {
	case n == 0, ms.n == MaxTokens:
		return false
	case n == 1 && (s[start] == '*' || s[start] == '>'):
		return false
	}
	ms.ends[ms.n] = uint16(end) // end <= MaxSubjectLength fits
	ms.n++
	return true
}

// Match appends to dst the values of every pattern that matches subject and
// returns the extended slice. It allocates nothing beyond dst's growth
// (unless the subject's wildcard paths visit more than inlineReads I-nodes,
// or the result cache stores this result), so a caller that reuses dst
// matches with zero allocations.
//
// A value subscribed through several matching patterns appears once per
// pattern; the caller decides about duplicates, as nats-server does. The
// order of the values is unspecified.
//
// subject must be a valid literal subject (see ValidateSubject). For any
// other input, a wildcard subject included, Match appends nothing: the
// sidecar refuses such subjects before matching.
//
// With the result cache on (the default), a subject matched again before
// any write is answered from the cache: one hash, two loads and a copy of
// the result into dst.
func (t *Trie[T]) Match(subject string, dst []T) []T {
	c := t.cache
	if c == nil {
		return t.matchUncached(subject, dst)
	}
	version := c.version.Load()
	if version&activeMask != 0 {
		// A write is in progress: the word names no single state.
		c.count(counterBypassed)
		return t.matchUncached(subject, dst)
	}
	h := hashSubject(subject)
	if e := c.lookup(h, version, subject); e != nil {
		c.count(counterHits)
		return appendValues(dst, e.values)
	}
	c.count(counterMisses)
	var ms subjectTokens
	if !ms.tokenize(subject) {
		return dst
	}
	base := len(dst)
	// While the version word stays at version nothing commits, so a walk
	// that starts and ends with the word there read one state (the
	// argument that makes a hit linearizable): it needs no read log and no
	// validation.
	dst, _ = t.matchWalk(t.readRoot(false), &ms, dst, false)
	if c.afterMissMatch != nil {
		c.afterMissMatch()
	}
	if c.version.Load() != version {
		// A write began during the walk, which may have read parts of
		// two states: walk again, validating, and cache nothing.
		c.count(counterFillsAborted)
		return t.matchTokens(&ms, dst[:base])
	}
	switch {
	case len(dst)-base > maxCachedValues:
	case !c.admit(h):
		c.count(counterNotAdmitted)
	default:
		c.fill(h, version, subject, dst[base:])
	}
	return dst
}

func (t *Trie[T]) matchUncached(subject string, dst []T) []T {
	var ms subjectTokens
	if !ms.tokenize(subject) {
		return dst
	}
	return t.matchTokens(&ms, dst)
}

// matchTokens matches a tokenized subject, validating what it read (see the
// comment at the top of this file) and falling back to a snapshot.
func (t *Trie[T]) matchTokens(ms *subjectTokens, dst []T) []T {
	base := len(dst)
	for range matchAttempts {
		var unchanged bool
		if dst, unchanged = t.matchWalk(t.readRoot(false), ms, dst[:base], true); unchanged {
			return dst
		}
	}
	return t.Snapshot().matchTokens(ms, dst[:base])
}

// matchWalk appends the values of every pattern under root that matches ms. With
// validate set it logs each (I-node, main node) it reads and reports whether
// every I-node still held what it read once the walk was done; without it
// (a snapshot, which cannot change, or a walk that the cache's version word
// vouches for) it reports true.
//
// It is one loop, not a recursion, so that the log and the stack of
// branches still to walk are this function's own local arrays: a pointer
// stored into a local variable needs no GC write barrier, where one stored
// through a pointer to the caller's frame (the recursion's shared log)
// goes through the barrier whenever a collection is marking.
func (c *ctrie[T]) matchWalk(root *iNode[T], ms *subjectTokens, dst []T, validate bool) ([]T, bool) {
	var (
		reads  [inlineReads]recordedRead[T]
		nreads int
		spill  []recordedRead[T] // reads past inlineReads
		// pendingIn[k] is an I-node still to walk at token pendingAt[k]:
		// the '*' branch's child, when a literal branch also goes on
		// (walked first). Levels on the stack strictly increase, so it
		// never holds more than MaxTokens-1.
		pendingIn [MaxTokens]*iNode[T]
		pendingAt [MaxTokens]uint8
		npending  int
	)
	last := ms.n - 1
	in, i := root, 0
	for {
		m := c.gcasRead(in)
		if validate {
			if nreads < inlineReads {
				reads[nreads] = recordedRead[T]{in: in, m: m}
			} else {
				spill = append(spill, recordedRead[T]{in: in, m: m})
			}
			nreads++
		}
		// A tomb's C-node is empty, so a tombed I-node matches nothing.
		if m.full != nil {
			dst = m.full.subs.appendTo(dst) // '>' matches this token and any after it
		}
		var next *iNode[T]
		if br := m.star; br != nil {
			if i == last {
				dst = br.subs.appendTo(dst)
			} else {
				next = br.child
			}
		}
		if len(m.literals) > 0 {
			if br := m.literal(ms.keys[i], ms.token(i)); br != nil {
				switch {
				case i == last:
					dst = br.subs.appendTo(dst)
				case br.child == nil:
				case next == nil:
					next = br.child
				default:
					pendingIn[npending], pendingAt[npending] = next, uint8(i+1)
					npending++
					next = br.child
				}
			}
		}
		switch {
		case next != nil:
			in, i = next, i+1
		case npending > 0:
			npending--
			in, i = pendingIn[npending], int(pendingAt[npending])
		default:
			return dst, !validate || unchanged(reads[:min(nreads, inlineReads)], spill)
		}
	}
}

// unchanged reports whether every I-node read still holds what was read. A
// walk that read one I-node needs no check: a single read is atomic.
func unchanged[T comparable](reads, spill []recordedRead[T]) bool {
	if len(reads)+len(spill) <= 1 {
		return true
	}
	for _, r := range reads {
		if r.in.main.Load() != r.m {
			return false
		}
	}
	for _, r := range spill {
		if r.in.main.Load() != r.m {
			return false
		}
	}
	return true
}

// appendValues is append(dst, values...) for a cache hit, storing a few
// values one by one: for a T that holds pointers the runtime's bulk copy is
// a call to typedslicecopy, which costs more than a store or two, and most
// results are that small. A dst without room for them may grow more than
// once (up to three times for four values, where append grows once); Match
// is for callers that reuse dst, and a check of the room first cost the
// hit about 1 ns of its 15 on nats-server's hot subject.
func appendValues[T comparable](dst, values []T) []T {
	if len(values) > 4 {
		return append(dst, values...)
	}
	for _, v := range values {
		dst = append(dst, v)
	}
	return dst
}
