//go:build lockcount

package lockcount

import (
	"sync"
	"sync/atomic"

	"github.com/weighstation/weighstation/internal/lockrank"
)

// Enabled reports whether acquisitions are counted: under the lockcount
// build tag only.
const Enabled = true

// Under the lockcount build tag the locks wrap sync's and lockrank's, and
// count.
type (
	Mutex[L Label]                   = mutex[L, sync.Mutex, *sync.Mutex]
	RWMutex[L Label]                 = rwMutex[L, sync.RWMutex, *sync.RWMutex]
	RankedMutex[R lockrank.Ranker]   = mutex[rankLabel[R], lockrank.Mutex[R], *lockrank.Mutex[R]]
	RankedRWMutex[R lockrank.Ranker] = rwMutex[rankLabel[R], lockrank.RWMutex[R], *lockrank.RWMutex[R]]
)

// mutex counts the acquisitions of the lock M (whose methods are P's)
// under L.
type mutex[L Label, M any, P interface {
	*M
	Lock()
	TryLock() bool
	Unlock()
}] struct{ m M }

func (m *mutex[L, M, P]) Lock()         { count[L](); P(&m.m).Lock() }
func (m *mutex[L, M, P]) TryLock() bool { count[L](); return P(&m.m).TryLock() }
func (m *mutex[L, M, P]) Unlock()       { P(&m.m).Unlock() }

// rwMutex counts the acquisitions of the read-write lock M (whose methods
// are P's) under L, its readers' as its writer's.
type rwMutex[L Label, M any, P interface {
	*M
	Lock()
	Unlock()
	RLock()
	RUnlock()
}] struct{ m M }

func (m *rwMutex[L, M, P]) Lock()    { count[L](); P(&m.m).Lock() }
func (m *rwMutex[L, M, P]) Unlock()  { P(&m.m).Unlock() }
func (m *rwMutex[L, M, P]) RLock()   { count[L](); P(&m.m).RLock() }
func (m *rwMutex[L, M, P]) RUnlock() { P(&m.m).RUnlock() }

// counter is one label's count.
type counter struct {
	name func() string
	n    atomic.Uint64
}

// counters holds a *counter by label (the label type's zero value). A
// label's is stored at its first acquisition and only loaded after, which
// takes no lock.
var counters sync.Map

func count[L Label]() {
	var l L
	c, ok := counters.Load(l)
	if !ok {
		c, _ = counters.LoadOrStore(l, &counter{name: l.LockLabel})
	}
	c.(*counter).n.Add(1)
}

// Counts returns the acquisitions counted so far, by label name (labels of
// one name add up).
func Counts() map[string]uint64 {
	out := map[string]uint64{}
	counters.Range(func(_, c any) bool {
		out[c.(*counter).name()] += c.(*counter).n.Load()
		return true
	})
	return out
}
