package matcher

// SetBrokenPlainStore switches GCAS to a plain store that loses concurrent
// updates, so tests can show the linearizability check catches it.
func SetBrokenPlainStore(broken bool) { brokenPlainStore.Store(broken) }

// NodeCount counts the I-nodes reachable from the live root, tombs included.
func NodeCount[T comparable](t *Trie[T]) int {
	var count func(in *iNode[T]) int
	count = func(in *iNode[T]) int {
		n := 1
		t.gcasRead(in).forEach(func(br *branch[T]) {
			if br.child != nil {
				n += count(br.child)
			}
		})
		return n
	}
	return count(t.readRoot(false))
}
