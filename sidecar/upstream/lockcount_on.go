//go:build lockcount

package upstream

import (
	"sync"
	"sync/atomic"
)

// Under the lockcount build tag this package's locks count their
// acquisitions (Lock, RLock and TryLock, whatever it returns), for the
// sidecar's delivery path diagnostic.

var lockAcquisitions atomic.Uint64

// LockAcquisitions is the number of this package's lock acquisitions so
// far (lockcount build tag only).
func LockAcquisitions() uint64 { return lockAcquisitions.Load() }

type mutex struct{ m sync.Mutex }

func (m *mutex) Lock()         { lockAcquisitions.Add(1); m.m.Lock() }
func (m *mutex) TryLock() bool { lockAcquisitions.Add(1); return m.m.TryLock() }
func (m *mutex) Unlock()       { m.m.Unlock() }

type rwMutex struct{ m sync.RWMutex }

func (m *rwMutex) Lock()    { lockAcquisitions.Add(1); m.m.Lock() }
func (m *rwMutex) Unlock()  { m.m.Unlock() }
func (m *rwMutex) RLock()   { lockAcquisitions.Add(1); m.m.RLock() }
func (m *rwMutex) RUnlock() { m.m.RUnlock() }
