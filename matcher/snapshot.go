package matcher

import "iter"

// Snapshot is a read-only view of a Trie as of the instant Trie.Snapshot
// linearized. Later writes to the trie never show in it. It is safe for
// concurrent use and costs nothing to keep except the memory of the nodes it
// alone still references.
type Snapshot[T comparable] struct {
	ctrie[T]
}

// Match is Trie.Match on the snapshot.
func (s *Snapshot[T]) Match(subject string, dst []T) []T {
	var ms subjectTokens
	if !ms.tokenize(subject) {
		return dst
	}
	return s.matchTokens(&ms, dst)
}

func (s *Snapshot[T]) matchTokens(ms *subjectTokens, dst []T) []T {
	dst, _ = s.matchWalk(s.readRoot(false), ms, dst, false)
	return dst
}

// All iterates over every (pattern, value) pair, in no particular order.
func (s *Snapshot[T]) All() iter.Seq2[string, T] {
	return func(yield func(string, T) bool) {
		path := make([]string, 0, MaxTokens)
		s.walk(s.readRoot(false), path, yield)
	}
}

func (s *Snapshot[T]) walk(in *iNode[T], path []string, yield func(string, T) bool) bool {
	more := true
	s.gcasRead(in).forEach(func(br *branch[T]) {
		if !more {
			return
		}
		p := append(path, br.token)
		if br.subs.len() > 0 {
			pattern := subjectOf(p)
			more = br.subs.all(func(v T) bool { return yield(pattern, v) })
		}
		if more && br.child != nil {
			more = s.walk(br.child, p, yield)
		}
	})
	return more
}

// Len returns the number of (pattern, value) pairs, counting in O(n).
func (s *Snapshot[T]) Len() int {
	return s.count(s.readRoot(false))
}

func (s *Snapshot[T]) count(in *iNode[T]) int {
	n := 0
	s.gcasRead(in).forEach(func(br *branch[T]) {
		n += br.subs.len()
		if br.child != nil {
			n += s.count(br.child)
		}
	})
	return n
}
