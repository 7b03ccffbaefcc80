// Package lockrank checks a static lock order, after the Go runtime's own
// (runtime/lockrank.go): every lock has a rank, and a goroutine may
// acquire a lock only when its rank is greater than the rank of every
// ranked lock it holds. Two goroutines that both keep to that order cannot
// deadlock on these locks, whatever paths they take; a test that breaks
// it fails the first time the inverted acquisition happens, not the rare
// time two goroutines interleave badly.
//
// The check is compiled in under the race build tag only (make test runs
// go test -race): without it, Mutex and RWMutex are a sync.Mutex and a
// sync.RWMutex, of the same size, whose methods only forward. A lock's
// rank is a type parameter, a zero-size type whose Rank method returns it,
// so that a field's declaration carries its rank and no constructor can
// forget to set it:
//
//	type configRank struct{}
//
//	func (configRank) Rank() lockrank.Rank { return rankConfig }
//
//	type Server struct {
//		configMu lockrank.Mutex[configRank]
//	}
//
// A violation is reported to the handler SetViolationHandler installs;
// the default panics with the *Violation before the lock is taken. Locks
// that are not lockrank's (a sync.Mutex) are not seen: they neither
// count as held nor are checked.
//
// Under race, each acquisition costs a walk of the goroutine's stack (its
// id), and the bookkeeping is kept out of the race detector's sight, so
// that it orders no goroutines and hides no data race.
package lockrank

import (
	"fmt"
	"sync"
)

// Rank orders locks: a goroutine acquires them in increasing rank, and
// never holds two of one rank at once. The ranks are one order for the
// whole program.
type Rank uint8

// Ranker is the type parameter of Mutex and RWMutex: a zero-size type
// whose Rank method returns the lock's rank (a constant).
type Ranker interface{ Rank() Rank }

var names struct {
	sync.RWMutex
	byRank map[Rank]string
}

// SetNames names ranks, for String and the violation messages. The
// program's lock order table calls it, at init.
func SetNames(byRank map[Rank]string) {
	names.Lock()
	defer names.Unlock()
	if names.byRank == nil {
		names.byRank = map[Rank]string{}
	}
	for r, name := range byRank {
		names.byRank[r] = name
	}
}

// String is the rank's name, or "rank N" when it has none.
func (r Rank) String() string {
	names.RLock()
	defer names.RUnlock()
	if name, ok := names.byRank[r]; ok {
		return name
	}
	return fmt.Sprintf("rank %d", uint8(r))
}

// Violation is one acquisition out of order: Acquired was being taken
// while the goroutine held Held, whose rank is not lower (Held is the
// highest-ranked lock it held).
type Violation struct {
	Acquired, Held Rank
}

func (v *Violation) Error() string {
	return fmt.Sprintf("lock ordering problem: %s (rank %d) acquired while holding %s (rank %d)",
		v.Acquired, uint8(v.Acquired), v.Held, uint8(v.Held))
}

var handler struct {
	sync.Mutex
	f func(*Violation)
}

// SetViolationHandler makes f the receiver of violations and returns the
// one it replaces (nil for the default). f runs on the goroutine that
// broke the order, before it takes the lock; if f returns, the lock is
// taken as asked. nil restores the default, which panics with the
// *Violation. A test that breaks the order on purpose installs one and
// restores the previous one when it ends. Without the race build tag
// nothing is checked and f is never called.
func SetViolationHandler(f func(*Violation)) (previous func(*Violation)) {
	handler.Lock()
	defer handler.Unlock()
	previous, handler.f = handler.f, f
	return previous
}
