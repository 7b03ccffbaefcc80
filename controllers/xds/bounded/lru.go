// Package bounded holds the operator's fixed-size structures for state
// that callers it does not trust can make it keep: a least-recently-used
// map that evicts past its bound rather than grow, and token buckets keyed
// by caller on top of it.
//
// Why a package of its own: the xDS server (per peer, per token) and the
// report service (per pod) both keep state per caller, and both must stay
// within a stated size whatever a flood of callers does.
package bounded

import "container/list"

// LRU is a map of at most Cap entries: adding to a full one evicts the
// least recently used entry. It is not safe for concurrent use; callers
// hold their own lock.
type LRU[K comparable, V any] struct {
	cap     int
	entries map[K]*list.Element
	order   *list.List // front: most recently used
	// OnEvict, when set, is told of every entry evicted for room (not of
	// those removed with Remove).
	OnEvict func(K, V)
}

type entry[K comparable, V any] struct {
	key   K
	value V
}

// NewLRU returns an empty LRU of at most capacity entries (at least 1).
func NewLRU[K comparable, V any](capacity int) *LRU[K, V] {
	capacity = max(capacity, 1)
	return &LRU[K, V]{cap: capacity, entries: make(map[K]*list.Element, min(capacity, 1024)), order: list.New()}
}

// Get returns the value of key and marks it used.
func (l *LRU[K, V]) Get(key K) (V, bool) {
	e, ok := l.entries[key]
	if !ok {
		var zero V
		return zero, false
	}
	l.order.MoveToFront(e)
	return e.Value.(*entry[K, V]).value, true
}

// Add sets key's value, marks it used, and evicts the least recently used
// entry if the LRU is over its capacity; it reports whether it evicted.
func (l *LRU[K, V]) Add(key K, value V) (evicted bool) {
	if e, ok := l.entries[key]; ok {
		e.Value.(*entry[K, V]).value = value
		l.order.MoveToFront(e)
		return false
	}
	l.entries[key] = l.order.PushFront(&entry[K, V]{key: key, value: value})
	if l.order.Len() <= l.cap {
		return false
	}
	oldest := l.order.Back()
	l.order.Remove(oldest)
	old := oldest.Value.(*entry[K, V])
	delete(l.entries, old.key)
	if l.OnEvict != nil {
		l.OnEvict(old.key, old.value)
	}
	return true
}

// Remove drops key.
func (l *LRU[K, V]) Remove(key K) {
	if e, ok := l.entries[key]; ok {
		l.order.Remove(e)
		delete(l.entries, key)
	}
}

// Len is the number of entries.
func (l *LRU[K, V]) Len() int { return l.order.Len() }

// Cap is the most entries the LRU holds.
func (l *LRU[K, V]) Cap() int { return l.cap }
