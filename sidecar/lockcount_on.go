//go:build lockcount

package sidecar

import (
	"sync/atomic"

	"github.com/weighstation/weighstation/internal/lockrank"
)

// Under the lockcount build tag every acquisition of a sidecar lock (Lock,
// RLock, and TryLock whatever it returns) is counted by rank, for the
// delivery path's diagnostic (TestDeliveryLockAcquisitions). The
// subpackages count theirs the same way (pending, upstream, latency).

var lockAcquisitions [64]atomic.Uint64 // by rank

func countLock[R lockrank.Ranker]() {
	var r R
	lockAcquisitions[r.Rank()].Add(1)
}

type mutex[R lockrank.Ranker] struct{ m lockrank.Mutex[R] }

func (m *mutex[R]) Lock()         { countLock[R](); m.m.Lock() }
func (m *mutex[R]) TryLock() bool { countLock[R](); return m.m.TryLock() }
func (m *mutex[R]) Unlock()       { m.m.Unlock() }

type rwMutex[R lockrank.Ranker] struct{ m lockrank.RWMutex[R] }

func (m *rwMutex[R]) Lock()    { countLock[R](); m.m.Lock() }
func (m *rwMutex[R]) Unlock()  { m.m.Unlock() }
func (m *rwMutex[R]) RLock()   { countLock[R](); m.m.RLock() }
func (m *rwMutex[R]) RUnlock() { m.m.RUnlock() }

// lockCounts is the acquisitions so far, by the lock's name.
func lockCounts() map[string]uint64 {
	out := map[string]uint64{}
	for r := range lockAcquisitions {
		if n := lockAcquisitions[r].Load(); n > 0 {
			out[lockrank.Rank(r).String()] = n
		}
	}
	return out
}
