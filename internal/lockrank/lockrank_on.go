//go:build race

package lockrank

import (
	"runtime"
	"sync"
	"unsafe"
)

// Enabled reports whether acquisitions are checked: under the race build
// tag only.
const Enabled = true

// Mutex is a sync.Mutex of rank R.Rank().
type Mutex[R Ranker] struct {
	mu sync.Mutex
	// lockedBy is the goroutine that locked it (under mu): Unlock, which
	// may run on another goroutine, releases it from that one's locks.
	lockedBy uint64
}

// Lock checks the order, then locks.
func (m *Mutex[R]) Lock() {
	m.lockedBy = acquire[R](unsafe.Pointer(m), m.mu.Lock)
}

// TryLock is not checked, since it never waits, and so can be part of no
// deadlock; what the goroutine takes while holding it is.
func (m *Mutex[R]) TryLock() bool {
	if !m.mu.TryLock() {
		return false
	}
	var r R
	m.lockedBy = goid()
	hold(m.lockedBy, r.Rank(), unsafe.Pointer(m))
	return true
}

func (m *Mutex[R]) Unlock() {
	release(m.lockedBy, unsafe.Pointer(m))
	m.mu.Unlock()
}

// RWMutex is a sync.RWMutex of rank R.Rank(), for its readers as for its
// writer: a reader waits for a writer, so its order matters as much.
type RWMutex[R Ranker] struct {
	mu     sync.RWMutex
	writer uint64 // the goroutine that write-locked it (under mu)
}

func (m *RWMutex[R]) Lock() {
	m.writer = acquire[R](unsafe.Pointer(m), m.mu.Lock)
}

func (m *RWMutex[R]) Unlock() {
	release(m.writer, unsafe.Pointer(m))
	m.mu.Unlock()
}

func (m *RWMutex[R]) RLock() {
	acquire[R](unsafe.Pointer(m), m.mu.RLock)
}

// RUnlock releases the read lock of this goroutine, or, when it holds
// none, of a goroutine that does (one may read-lock and another unlock).
func (m *RWMutex[R]) RUnlock() {
	releaseRead(goid(), unsafe.Pointer(m))
	m.mu.RUnlock()
}

// acquire checks that the calling goroutine may take held, a lock of rank
// R.Rank(), takes it (lock), and records it held by the goroutine, whose
// id it returns.
func acquire[R Ranker](held unsafe.Pointer, lock func()) uint64 {
	var r R
	g := goid()
	check(g, r.Rank())
	lock()
	hold(g, r.Rank(), held)
	return g
}

// goid is the calling goroutine's id, from the first line of its stack
// trace ("goroutine 18 [running]:"). It costs a stack walk, a few
// microseconds, which a race build can afford.
func goid() uint64 {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	var id uint64
	for _, c := range buf[len("goroutine "):n] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uint64(c-'0')
	}
	return id
}

// maxHeld bounds the ranked locks one goroutine holds at once, and
// maxRecorded the violations Violations returns.
const (
	maxHeld     = 32
	maxRecorded = 16
)

type heldLock struct {
	lock unsafe.Pointer
	rank Rank
}

// holder is what one goroutine holds.
type holder struct {
	id   uint64
	n    int
	held [maxHeld]heldLock
}

// book is the goroutines that hold ranked locks, and the violations. The
// race detector must not see it: its mutex, a happens-before edge between
// every two goroutines that take ranked locks, would hide their data
// races. So the mutex is taken with synchronization events off
// (runtime.RaceDisable), and its fields are touched only by go:norace
// functions, with no map, append or copy (which the runtime instruments
// itself), so that their unordered accesses are not reported either.
var book struct {
	mu      sync.Mutex
	holders []*holder // the first n hold at least one lock
	n       int
	free    []*holder // the first nFree are for reuse
	nFree   int

	violations  [maxRecorded]Violation
	nViolations int
}

// check reports a violation if g holds a lock whose rank is not below
// rank.
func check(g uint64, rank Rank) {
	runtime.RaceDisable()
	book.mu.Lock()
	v, bad := checkLocked(g, rank)
	book.mu.Unlock()
	runtime.RaceEnable()
	if bad {
		report(&v)
	}
}

//go:norace
func checkLocked(g uint64, rank Rank) (Violation, bool) {
	h := find(g)
	if h == nil {
		return Violation{}, false
	}
	highest := h.held[0].rank
	for i := 1; i < h.n; i++ {
		highest = max(highest, h.held[i].rank)
	}
	if rank > highest {
		return Violation{}, false
	}
	v := Violation{Acquired: rank, Held: highest}
	if book.nViolations < maxRecorded {
		book.violations[book.nViolations] = v
	}
	book.nViolations++
	return v, true
}

// report hands v to the handler, or panics with it.
func report(v *Violation) {
	handler.Lock()
	f := handler.f
	handler.Unlock()
	if f == nil {
		panic(v)
	}
	f(v)
}

// hold records that g holds lock.
func hold(g uint64, rank Rank, lock unsafe.Pointer) {
	runtime.RaceDisable()
	book.mu.Lock()
	ok := holdLocked(g, rank, lock)
	book.mu.Unlock()
	runtime.RaceEnable()
	if !ok {
		panic("lockrank: a goroutine holds more ranked locks at once than it can check")
	}
}

//go:norace
func holdLocked(g uint64, rank Rank, lock unsafe.Pointer) bool {
	h := find(g)
	if h == nil {
		h = newHolder(g)
	}
	if h.n == maxHeld {
		return false
	}
	h.held[h.n] = heldLock{lock: lock, rank: rank}
	h.n++
	return true
}

// release forgets that g holds lock.
func release(g uint64, lock unsafe.Pointer) {
	runtime.RaceDisable()
	book.mu.Lock()
	releaseLocked(find(g), lock)
	book.mu.Unlock()
	runtime.RaceEnable()
}

// releaseRead forgets a read lock of g's, or else of another goroutine's.
func releaseRead(g uint64, lock unsafe.Pointer) {
	runtime.RaceDisable()
	book.mu.Lock()
	if !releaseLocked(find(g), lock) {
		releaseAnyLocked(lock)
	}
	book.mu.Unlock()
	runtime.RaceEnable()
}

//go:norace
func releaseAnyLocked(lock unsafe.Pointer) {
	for i := 0; i < book.n; i++ {
		if releaseLocked(book.holders[i], lock) {
			return
		}
	}
}

//go:norace
func releaseLocked(h *holder, lock unsafe.Pointer) bool {
	if h == nil {
		return false
	}
	for i := h.n - 1; i >= 0; i-- {
		if h.held[i].lock != lock {
			continue
		}
		for j := i; j < h.n-1; j++ {
			h.held[j] = h.held[j+1]
		}
		h.n--
		h.held[h.n] = heldLock{}
		if h.n == 0 {
			dropHolder(h)
		}
		return true
	}
	return false
}

//go:norace
func find(g uint64) *holder {
	for i := 0; i < book.n; i++ {
		if book.holders[i].id == g {
			return book.holders[i]
		}
	}
	return nil
}

//go:norace
func newHolder(g uint64) *holder {
	var h *holder
	if book.nFree > 0 {
		book.nFree--
		h, book.free[book.nFree] = book.free[book.nFree], nil
	} else {
		h = new(holder)
	}
	h.id = g
	if book.n == len(book.holders) {
		grown := make([]*holder, 2*len(book.holders)+16)
		for i := 0; i < book.n; i++ {
			grown[i] = book.holders[i]
		}
		book.holders = grown
	}
	book.holders[book.n] = h
	book.n++
	return h
}

// dropHolder takes h, which holds nothing now, out of the book.
//
//go:norace
func dropHolder(h *holder) {
	for i := 0; i < book.n; i++ {
		if book.holders[i] == h {
			book.n--
			book.holders[i], book.holders[book.n] = book.holders[book.n], nil
			break
		}
	}
	h.id = 0
	if book.nFree == len(book.free) {
		if len(book.free) >= 64 {
			return // enough kept for reuse
		}
		grown := make([]*holder, 2*len(book.free)+8)
		for i := 0; i < book.nFree; i++ {
			grown[i] = book.free[i]
		}
		book.free = grown
	}
	book.free[book.nFree] = h
	book.nFree++
}

// Violations returns the first violations reported (at most 16), also
// those a handler let pass.
func Violations() []Violation {
	runtime.RaceDisable()
	book.mu.Lock()
	out := violationsLocked()
	book.mu.Unlock()
	runtime.RaceEnable()
	return out
}

//go:norace
func violationsLocked() []Violation {
	n := min(book.nViolations, maxRecorded)
	out := make([]Violation, n)
	for i := 0; i < n; i++ {
		out[i] = book.violations[i]
	}
	return out
}
