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

// matchState is everything one Match needs, on its stack: the tokenized
// subject and the read log. It is kept small because Go zeroes it on every
// call.
type matchState[T comparable] struct {
	subjectTokens
	recording bool
	reads     [inlineReads]recordedRead[T]
	nreads    int
	spill     []recordedRead[T] // reads past inlineReads
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

func (ms *matchState[T]) record(in *iNode[T], m *mainNode[T]) {
	if ms.nreads < inlineReads {
		ms.reads[ms.nreads] = recordedRead[T]{in: in, m: m}
	} else {
		ms.spill = append(ms.spill, recordedRead[T]{in: in, m: m})
	}
	ms.nreads++
}

// unchanged reports whether every I-node read still holds what was read. A
// match that read one I-node needs no check: a single read is atomic.
func (ms *matchState[T]) unchanged() bool {
	if ms.nreads <= 1 {
		return true
	}
	for i := range min(ms.nreads, inlineReads) {
		if ms.reads[i].in.main.Load() != ms.reads[i].m {
			return false
		}
	}
	for _, r := range ms.spill {
		if r.in.main.Load() != r.m {
			return false
		}
	}
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
	var ms matchState[T]
	if !ms.tokenize(subject) {
		return dst
	}
	base := len(dst)
	// While the version word stays at version nothing commits, so a walk
	// that starts and ends with the word there read one state (the
	// argument that makes a hit linearizable): it needs no read log and no
	// validation.
	ms.recording = false
	dst = t.matchLevel(t.readRoot(false), &ms, 0, dst)
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
	var ms matchState[T]
	if !ms.tokenize(subject) {
		return dst
	}
	return t.matchTokens(&ms, dst)
}

// matchTokens matches a tokenized subject, validating what it read (see the
// comment at the top of this file) and falling back to a snapshot.
func (t *Trie[T]) matchTokens(ms *matchState[T], dst []T) []T {
	base := len(dst)
	for range matchAttempts {
		ms.recording, ms.nreads, ms.spill = true, 0, ms.spill[:0]
		dst = t.matchLevel(t.readRoot(false), ms, 0, dst[:base])
		if ms.unchanged() {
			return dst
		}
	}
	return t.Snapshot().matchTokens(ms, dst[:base])
}

// matchLevel matches the tokens from i on at in. A snapshot does not record
// its reads: it cannot change.
func (c *ctrie[T]) matchLevel(in *iNode[T], ms *matchState[T], i int, dst []T) []T {
	m := c.gcasRead(in)
	if ms.recording {
		ms.record(in, m)
	}
	// A tomb's C-node is empty, so a tombed I-node matches nothing.
	if m.full != nil {
		dst = m.full.subs.appendTo(dst) // '>' matches this token and any after it
	}
	if m.star != nil {
		dst = c.follow(m.star, ms, i, dst)
	}
	if len(m.literals) > 0 {
		if br := m.literal(ms.keys[i], ms.token(i)); br != nil {
			dst = c.follow(br, ms, i, dst)
		}
	}
	return dst
}

func (c *ctrie[T]) follow(br *branch[T], ms *matchState[T], i int, dst []T) []T {
	if i == ms.n-1 {
		return br.subs.appendTo(dst)
	}
	if br.child == nil {
		return dst
	}
	return c.matchLevel(br.child, ms, i+1, dst)
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
