//go:build !race

package lockrank

import "sync"

// Enabled reports whether acquisitions are checked: under the race build
// tag only.
const Enabled = false

// Mutex is a sync.Mutex of rank R.Rank().
type Mutex[R Ranker] struct{ mu sync.Mutex }

func (m *Mutex[R]) Lock()         { m.mu.Lock() }
func (m *Mutex[R]) TryLock() bool { return m.mu.TryLock() }
func (m *Mutex[R]) Unlock()       { m.mu.Unlock() }

// RWMutex is a sync.RWMutex of rank R.Rank(), for its readers as for its
// writer.
type RWMutex[R Ranker] struct{ mu sync.RWMutex }

func (m *RWMutex[R]) Lock()    { m.mu.Lock() }
func (m *RWMutex[R]) Unlock()  { m.mu.Unlock() }
func (m *RWMutex[R]) RLock()   { m.mu.RLock() }
func (m *RWMutex[R]) RUnlock() { m.mu.RUnlock() }

// Violations returns the violations reported so far: none, unchecked.
func Violations() []Violation { return nil }
