// Package rwtrie is the plain answer to concurrent subject matching: a
// subscription trie behind one sync.RWMutex. It exists as a benchmark peer
// for matcher's lock-free trie, built with the same tokenizer and the same
// append-into-a-buffer Match, so that the comparison measures the
// concurrency scheme and not incidental differences. It is not used in
// production code.
package rwtrie

import (
	"strings"
	"sync"
)

// Trie is a mutable subscription trie guarded by a reader-writer lock.
type Trie[T comparable] struct {
	mu   sync.RWMutex
	root *level[T]
}

type level[T comparable] struct {
	literals   map[string]*node[T]
	star, full *node[T]
}

type node[T comparable] struct {
	subs map[T]struct{}
	next *level[T]
}

// New returns an empty trie.
func New[T comparable]() *Trie[T] {
	return &Trie[T]{root: &level[T]{literals: map[string]*node[T]{}}}
}

func (l *level[T]) child(token string, create bool) *node[T] {
	var slot **node[T]
	switch token {
	case "*":
		slot = &l.star
	case ">":
		slot = &l.full
	default:
		n := l.literals[token]
		if n == nil && create {
			n = &node[T]{}
			l.literals[token] = n
		}
		return n
	}
	if *slot == nil && create {
		*slot = &node[T]{}
	}
	return *slot
}

// Subscribe adds v under pattern. The pattern is assumed valid.
func (t *Trie[T]) Subscribe(pattern string, v T) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.root
	tokens := strings.Split(pattern, ".")
	for i, tok := range tokens {
		n := l.child(tok, true)
		if i == len(tokens)-1 {
			if n.subs == nil {
				n.subs = map[T]struct{}{}
			}
			n.subs[v] = struct{}{}
			return
		}
		if n.next == nil {
			n.next = &level[T]{literals: map[string]*node[T]{}}
		}
		l = n.next
	}
}

// Unsubscribe removes v from pattern. Empty nodes are kept: the peer is
// measured on matching, and pruning would only slow its writes.
func (t *Trie[T]) Unsubscribe(pattern string, v T) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.root
	tokens := strings.Split(pattern, ".")
	for i, tok := range tokens {
		n := l.child(tok, false)
		if n == nil {
			return false
		}
		if i == len(tokens)-1 {
			_, ok := n.subs[v]
			delete(n.subs, v)
			return ok
		}
		if n.next == nil {
			return false
		}
		l = n.next
	}
	return false
}

// Match appends the values of every pattern matching subject to dst.
func (t *Trie[T]) Match(subject string, dst []T) []T {
	var buf [32]string
	tokens := buf[:0]
	start := 0
	for i := 0; i < len(subject); i++ {
		if subject[i] == '.' {
			tokens = append(tokens, subject[start:i])
			start = i + 1
		}
	}
	tokens = append(tokens, subject[start:])
	t.mu.RLock()
	dst = matchLevel(t.root, tokens, dst)
	t.mu.RUnlock()
	return dst
}

func matchLevel[T comparable](l *level[T], tokens []string, dst []T) []T {
	if l.full != nil {
		dst = appendSubs(l.full, dst)
	}
	last := len(tokens) == 1
	for _, n := range [2]*node[T]{l.star, l.literals[tokens[0]]} {
		if n == nil {
			continue
		}
		if last {
			dst = appendSubs(n, dst)
		} else if n.next != nil {
			dst = matchLevel(n.next, tokens[1:], dst)
		}
	}
	return dst
}

func appendSubs[T comparable](n *node[T], dst []T) []T {
	for v := range n.subs {
		dst = append(dst, v)
	}
	return dst
}
