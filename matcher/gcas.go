package matcher

import (
	"runtime"
	"sync/atomic"
)

// ctrie is the lock-free core shared by Trie (writable) and Snapshot
// (read-only): a root slot and the GCAS / RDCSS machinery of Prokopec et al.,
// "Concurrent Tries with Efficient Non-Blocking Snapshots" (PPoPP 2012).
type ctrie[T comparable] struct {
	root     atomic.Pointer[rootRef[T]]
	readOnly bool
}

// rootRef is what the root slot holds: a root I-node, or an RDCSS descriptor
// while a snapshot is swapping the root.
type rootRef[T comparable] struct {
	in   *iNode[T]
	desc *rdcssDescriptor[T]
}

// rdcssDescriptor proposes replacing the root old by nv, on the condition
// that old's main node is still expMain when the proposal completes.
type rdcssDescriptor[T comparable] struct {
	old     *rootRef[T]
	expMain *mainNode[T]
	nv      *iNode[T]
	// outcome is decided once, by CAS, before the root slot changes, so that
	// the snapshotting goroutine and every helper agree on it.
	outcome atomic.Int32
}

const (
	rdcssPending int32 = iota
	rdcssCommitted
	rdcssAborted
)

// brokenPlainStore is a test-only switch (see export_test.go): GCAS becomes a
// plain store after a yield, losing concurrent updates, so the
// linearizability check can show that it catches a broken trie.
var brokenPlainStore atomic.Bool

// gcas proposes n as in's main node, replacing old. It reports whether the
// write took effect. Why it is safe: the CAS on in.main only succeeds if no
// other write committed since old was read (old is a fresh allocation per
// write, and the GC never reuses an address we still hold, so there is no
// ABA); the commit then checks, through the root, that no snapshot began
// since in's generation (in.gen == root.gen). If one did, the write is rolled
// back and the caller restarts in the new generation, so a snapshot never
// sees half of a write.
func (t *ctrie[T]) gcas(in *iNode[T], old, n *mainNode[T]) bool {
	if brokenPlainStore.Load() {
		runtime.Gosched()
		in.main.Store(n)
		return true
	}
	n.prev.Store(old)
	if in.main.CompareAndSwap(old, n) {
		t.gcasCommit(in, n)
		return n.prev.Load() == nil
	}
	return false
}

// gcasRead returns in's committed main node, helping a pending write to
// commit or roll back first. A reader never waits for a writer.
func (t *ctrie[T]) gcasRead(in *iNode[T]) *mainNode[T] {
	m := in.main.Load()
	if m.prev.Load() == nil {
		return m
	}
	return t.gcasCommit(in, m)
}

// gcasCommit decides a pending GCAS and returns the committed main node.
func (t *ctrie[T]) gcasCommit(in *iNode[T], m *mainNode[T]) *mainNode[T] {
	for {
		// Aborting a pending snapshot here is what makes RDCSS safe: a
		// snapshot cannot complete while a write on the root is undecided.
		root := t.readRoot(true)
		p := m.prev.Load()
		switch {
		case p == nil:
			return m
		case p.failed:
			// Roll back: put the replaced node back (the marker's prev).
			// Whoever wins this CAS (us or another helper) restores it;
			// everyone re-reads.
			if restore := p.prev.Load(); in.main.CompareAndSwap(m, restore) {
				return restore
			}
			m = in.main.Load()
		case root.gen == in.gen && !t.readOnly:
			// Still in the generation the write started in: commit.
			if m.prev.CompareAndSwap(p, nil) {
				return m
			}
		default:
			// A snapshot began (or this view is read-only): fail the write.
			marker := &mainNode[T]{failed: true}
			marker.prev.Store(p)
			m.prev.CompareAndSwap(p, marker)
			m = in.main.Load()
		}
	}
}

// readRoot returns the root I-node, completing (abort: aborting) a pending
// snapshot's RDCSS first.
func (t *ctrie[T]) readRoot(abort bool) *iNode[T] {
	if r := t.root.Load(); r.desc == nil {
		return r.in
	}
	return t.rdcssComplete(abort)
}

func (t *ctrie[T]) rdcssComplete(abort bool) *iNode[T] {
	for {
		r := t.root.Load()
		if r.desc == nil {
			return r.in
		}
		d := r.desc
		if abort {
			d.outcome.CompareAndSwap(rdcssPending, rdcssAborted)
		} else if t.gcasRead(d.old.in) == d.expMain {
			// gcasRead may itself abort d (a write on the root was pending):
			// then the CAS below loses and the outcome stays aborted.
			d.outcome.CompareAndSwap(rdcssPending, rdcssCommitted)
		} else {
			d.outcome.CompareAndSwap(rdcssPending, rdcssAborted)
		}
		next := d.old
		if d.outcome.Load() == rdcssCommitted {
			next = &rootRef[T]{in: d.nv}
		}
		if t.root.CompareAndSwap(r, next) {
			return next.in
		}
	}
}

// rdcssRoot replaces the root old by nv if old's main node is still expMain.
func (t *ctrie[T]) rdcssRoot(old *rootRef[T], expMain *mainNode[T], nv *iNode[T]) bool {
	d := &rdcssDescriptor[T]{old: old, expMain: expMain, nv: nv}
	if !t.root.CompareAndSwap(old, &rootRef[T]{desc: d}) {
		return false
	}
	t.rdcssComplete(false)
	return d.outcome.Load() == rdcssCommitted
}
