package matcher

// Trie is a lock-free, linearizable concurrent subscription trie mapping NATS
// subject patterns to values. The zero value is not usable; call New.
type Trie[T comparable] struct {
	ctrie[T]
	cache *resultCache[T] // nil when the cache is off
}

// New returns an empty trie. Its result cache is on, holding
// DefaultCacheSize results, unless an option says otherwise.
func New[T comparable](opts ...Option) *Trie[T] {
	o := options{cacheSize: DefaultCacheSize}
	for _, opt := range opts {
		opt(&o)
	}
	t := &Trie[T]{}
	t.root.Store(&rootRef[T]{in: newINode(newMain(cNode[T]{}), &generation{})})
	if o.cacheSize > 0 {
		t.cache = newResultCache[T](&o)
	}
	return t
}

// Subscribe adds v under pattern. Subscribing the same pair again changes
// nothing. It fails only on an invalid pattern, naming the rule it breaks.
func (t *Trie[T]) Subscribe(pattern string, v T) error {
	var buf [MaxTokens]string
	tokens, err := tokenize(pattern, buf[:0], true)
	if err != nil {
		return err
	}
	if c := t.cache; c != nil {
		// Every commit must fall inside the window, so that a version
		// word seen quiescent names one state of the trie (cache.go).
		c.beginWrite()
		defer c.endWrite()
	}
	for {
		root := t.readRoot(false)
		if t.insert(root, nil, tokens, 0, v, root.gen) {
			return nil
		}
	}
}

// Unsubscribe removes v from pattern and reports whether it was there.
func (t *Trie[T]) Unsubscribe(pattern string, v T) (removed bool, err error) {
	var buf [MaxTokens]string
	tokens, err := tokenize(pattern, buf[:0], true)
	if err != nil {
		return false, err
	}
	if c := t.cache; c != nil {
		c.beginWrite()
		defer c.endWrite()
	}
	for {
		root := t.readRoot(false)
		if removed, done := t.remove(root, nil, tokens, 0, v, root.gen); done {
			return removed, nil
		}
	}
}

// insert adds v for tokens[i:] at in, whose parent is parent (nil for the
// root). It reports false when the caller must restart from the root: a GCAS
// lost a race, a snapshot began, or a tomb was met.
func (t *Trie[T]) insert(in, parent *iNode[T], tokens []string, i int, v T, startGen *generation) bool {
	for {
		m := t.gcasRead(in)
		if m.tomb {
			// The T-node invariant: no write lands in a tombed I-node. Help
			// cut it out of the parent, then retry from the root.
			t.clean(parent, i-1 == 0, startGen)
			return false
		}
		br := m.lookup(tokens[i])
		if i == len(tokens)-1 {
			subs, added := br.subs.with(v)
			if !added {
				return true // already subscribed: linearized at the read of m
			}
			br.subs = subs
			return t.gcas(in, m, m.with(br))
		}
		if br.child == nil {
			br.child = newChain(tokens[i+1:], v, startGen)
			return t.gcas(in, m, m.with(br))
		}
		if br.child.gen == startGen {
			return t.insert(br.child, in, tokens, i+1, v, startGen)
		}
		// The child predates the last snapshot and is shared with it: give
		// this level fresh copies of its children before writing below.
		if !t.gcas(in, m, newMain(t.renewed(&m.cNode, startGen))) {
			return false
		}
	}
}

// remove takes v out of tokens[i:] at in. done false means restart.
func (t *Trie[T]) remove(in, parent *iNode[T], tokens []string, i int, v T, startGen *generation) (removed, done bool) {
	for {
		m := t.gcasRead(in)
		if m.tomb {
			t.clean(parent, i-1 == 0, startGen)
			return false, false
		}
		br := m.lookup(tokens[i])
		if i == len(tokens)-1 {
			subs, found := br.subs.without(v)
			if !found {
				return false, true
			}
			br.subs = subs
			nm := t.contracted(m.with(br), parent == nil)
			if !t.gcas(in, m, nm) {
				return false, false
			}
			if nm.tomb {
				t.cleanParent(parent, in, tokens[i-1], i-1 == 0, startGen)
			}
			return true, true
		}
		if br.child == nil {
			return false, true
		}
		if br.child.gen != startGen {
			if !t.gcas(in, m, newMain(t.renewed(&m.cNode, startGen))) {
				return false, false
			}
			continue
		}
		removed, done = t.remove(br.child, in, tokens, i+1, v, startGen)
		// The removal below may have tombed this node (via cleanParent on
		// it); if so, cut it out of our parent in turn, so that compression
		// climbs as far as the emptiness goes.
		if removed && done && parent != nil {
			if t.gcasRead(in).tomb {
				t.cleanParent(parent, in, tokens[i-1], i-1 == 0, startGen)
			}
		}
		return removed, done
	}
}

// contracted turns a fresh, unpublished main node whose C-node is empty into
// a tomb, except at the root, which is never tombed. Every other I-node so
// points to a C-node with a branch, or to a tomb on its way out.
func (t *Trie[T]) contracted(m *mainNode[T], isRoot bool) *mainNode[T] {
	if m.isEmpty() && !isRoot {
		m.tomb = true
	}
	return m
}

// clean compresses parent: every branch pointing at a tombed I-node loses
// that child.
func (t *Trie[T]) clean(parent *iNode[T], parentIsRoot bool, startGen *generation) {
	if parent == nil || parent.gen != startGen {
		return
	}
	m := t.gcasRead(parent)
	if m.tomb {
		return
	}
	cut := func(child *iNode[T]) *iNode[T] {
		if t.gcasRead(child).tomb {
			return nil
		}
		return child
	}
	if ncn, changed := m.withChildren(cut); changed {
		t.gcas(parent, m, t.contracted(newMain(ncn), parentIsRoot))
	}
}

// cleanParent cuts the tombed child (reached through token) out of parent,
// retrying while the generation holds; another goroutine may also have
// done it already.
func (t *Trie[T]) cleanParent(parent, child *iNode[T], token string, parentIsRoot bool, startGen *generation) {
	for {
		m := t.gcasRead(parent)
		if m.tomb {
			return
		}
		br := m.lookup(token)
		if br.child != child || !t.gcasRead(child).tomb {
			return
		}
		br.child = nil
		if t.gcas(parent, m, t.contracted(m.with(br), parentIsRoot)) || t.readRoot(false).gen != startGen {
			return
		}
	}
}

// renewed copies cn with each child I-node copied into gen, so that writes
// below never touch I-nodes a snapshot shares.
func (t *Trie[T]) renewed(cn *cNode[T], gen *generation) cNode[T] {
	n, _ := cn.withChildren(func(child *iNode[T]) *iNode[T] {
		if child.gen == gen {
			return child
		}
		return newINode(t.gcasRead(child), gen)
	})
	return n
}

// Snapshot returns a read-only view of the trie as of one instant, in O(1):
// it swaps in a new root generation; the old generation becomes the
// snapshot, and the live trie copies nodes lazily the first time a write
// passes through them.
func (t *Trie[T]) Snapshot() *Snapshot[T] {
	for {
		r := t.root.Load()
		if r.desc != nil {
			t.rdcssComplete(false)
			continue
		}
		expMain := t.gcasRead(r.in)
		if t.rdcssRoot(r, expMain, newINode(expMain, &generation{})) {
			s := &Snapshot[T]{}
			s.readOnly = true
			s.root.Store(r)
			return s
		}
	}
}

// Len returns the number of (pattern, value) pairs. It counts a snapshot, so
// it is exact and linearizable, costs O(n), and makes the next writes copy
// the nodes they pass through: call it for reporting, not per message.
func (t *Trie[T]) Len() int { return t.Snapshot().Len() }
