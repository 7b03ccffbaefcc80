package lockrank_test

import (
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/weighstation/weighstation/internal/lockrank"
)

const (
	rankOne lockrank.Rank = iota + 1
	rankTwo
	rankThree
)

func init() {
	lockrank.SetNames(map[lockrank.Rank]string{rankOne: "one", rankTwo: "two", rankThree: "three"})
}

type (
	one   struct{}
	two   struct{}
	three struct{}
)

func (one) Rank() lockrank.Rank   { return rankOne }
func (two) Rank() lockrank.Rank   { return rankTwo }
func (three) Rank() lockrank.Rank { return rankThree }

// collect records the violations until the test ends, instead of panicking.
func collect(t *testing.T) *[]lockrank.Violation {
	var mu sync.Mutex
	var got []lockrank.Violation
	prev := lockrank.SetViolationHandler(func(v *lockrank.Violation) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, *v)
	})
	t.Cleanup(func() { lockrank.SetViolationHandler(prev) })
	return &got
}

// With or without the race build tag, the wrappers are mutexes.
func TestPlainMutex(t *testing.T) {
	var mu lockrank.Mutex[one]
	var wg sync.WaitGroup
	n := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				mu.Lock()
				n++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if n != 8000 {
		t.Fatalf("n = %d under the mutex, want 8000", n)
	}

	mu.Lock()
	if mu.TryLock() {
		t.Fatal("TryLock took a held mutex")
	}
	mu.Unlock()
	if !mu.TryLock() {
		t.Fatal("TryLock failed on a free mutex")
	}
	mu.Unlock()

	// Readers share an RWMutex; a writer waits for them.
	var rw lockrank.RWMutex[two]
	rw.RLock()
	read := make(chan struct{})
	go func() {
		rw.RLock()
		close(read)
		rw.RUnlock()
	}()
	select {
	case <-read:
	case <-time.After(10 * time.Second):
		t.Fatal("a second reader waited for the first")
	}
	wrote := make(chan struct{})
	go func() {
		rw.Lock()
		close(wrote)
		rw.Unlock()
	}()
	select {
	case <-wrote:
		t.Fatal("a writer took the lock from a reader")
	case <-time.After(20 * time.Millisecond):
	}
	rw.RUnlock()
	<-wrote
}

// Locks taken in order are never a violation.
func TestInOrder(t *testing.T) {
	got := collect(t)
	var a lockrank.Mutex[one]
	var b lockrank.RWMutex[two]
	var c lockrank.Mutex[three]
	a.Lock()
	b.RLock()
	c.Lock()
	c.Unlock()
	b.RUnlock()
	b.Lock()
	b.Unlock()
	a.Unlock()
	if len(*got) != 0 {
		t.Fatalf("violations %v", *got)
	}
}

// Without the race build tag the wrappers cost nothing: the rank is a
// type, not a field.
func TestNoCostWithoutRace(t *testing.T) {
	if lockrank.Enabled {
		t.Skip("the race build tracks the holder")
	}
	if got, want := unsafe.Sizeof(lockrank.Mutex[one]{}), unsafe.Sizeof(sync.Mutex{}); got != want {
		t.Errorf("Mutex is %d bytes, sync.Mutex %d", got, want)
	}
	if got, want := unsafe.Sizeof(lockrank.RWMutex[one]{}), unsafe.Sizeof(sync.RWMutex{}); got != want {
		t.Errorf("RWMutex is %d bytes, sync.RWMutex %d", got, want)
	}
}

func TestViolationMessage(t *testing.T) {
	v := &lockrank.Violation{Acquired: rankOne, Held: rankThree}
	if got, want := v.Error(), "lock ordering problem: one (rank 1) acquired while holding three (rank 3)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := lockrank.Rank(200).String(); got != "rank 200" {
		t.Errorf("an unnamed rank is %q", got)
	}
}
