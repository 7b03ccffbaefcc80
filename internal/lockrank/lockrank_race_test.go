//go:build race

package lockrank_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/weighstation/weighstation/internal/lockrank"
)

// locks is one lock of each kind and rank, by name.
type locks struct {
	a     lockrank.Mutex[one]
	b, b2 lockrank.Mutex[two]
	c     lockrank.Mutex[three]
	rw    lockrank.RWMutex[three]
}

type locker interface {
	Lock()
	Unlock()
}

// reader is an RWMutex's read side.
type reader struct{ rw *lockrank.RWMutex[three] }

func (r reader) Lock()   { r.rw.RLock() }
func (r reader) Unlock() { r.rw.RUnlock() }

func (l *locks) step(t *testing.T, s string) {
	t.Helper()
	m, ok := map[string]locker{"a": &l.a, "b": &l.b, "b2": &l.b2, "c": &l.c, "rw": reader{&l.rw}, "w": &l.rw}[s[1:]]
	if !ok {
		t.Fatalf("no lock %q", s[1:])
	}
	switch s[0] {
	case '+':
		m.Lock()
	case '-':
		m.Unlock()
	case '?':
		if !m.(interface{ TryLock() bool }).TryLock() {
			t.Fatalf("TryLock %s failed", s[1:])
		}
	default:
		t.Fatalf("no operation %q", s[0])
	}
}

// Steps: +x locks x, ?x try-locks it, -x unlocks it. a is of rank one, b
// and b2 of two, c of three; rw (read) and w (write) are an
// RWMutex of rank three.
func TestOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []string
		want  []lockrank.Violation
	}{
		{"in order", []string{"+a", "+b", "+c", "-c", "-b", "-a"}, nil},
		{"inverted", []string{"+b", "+a", "-a", "-b"}, []lockrank.Violation{{Acquired: rankOne, Held: rankTwo}}},
		{"inverted across a gap", []string{"+c", "+a", "-a", "-c"}, []lockrank.Violation{{Acquired: rankOne, Held: rankThree}}},
		{"same rank", []string{"+b", "+b2", "-b2", "-b"}, []lockrank.Violation{{Acquired: rankTwo, Held: rankTwo}}},
		{"release, then acquire lower", []string{"+b", "-b", "+a", "-a"}, nil},
		{"release the lower first", []string{"+a", "+c", "-a", "+b", "-b", "-c"}, []lockrank.Violation{{Acquired: rankTwo, Held: rankThree}}},
		{"release the higher first", []string{"+a", "+c", "-c", "+b", "-b", "-a"}, nil},
		{"read lock inverted", []string{"+rw", "+b", "-b", "-rw"}, []lockrank.Violation{{Acquired: rankTwo, Held: rankThree}}},
		{"read lock under a higher rank", []string{"+c", "+rw", "-rw", "-c"}, []lockrank.Violation{{Acquired: rankThree, Held: rankThree}}},
		{"write lock in order", []string{"+a", "+w", "-w", "-a"}, nil},
		{"TryLock out of order cannot wait", []string{"+b", "?a", "-a", "-b"}, nil},
		{"what a TryLock holds is checked", []string{"?b", "+a", "-a", "-b"}, []lockrank.Violation{{Acquired: rankOne, Held: rankTwo}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := collect(t)
			var l locks
			for _, s := range tc.steps {
				l.step(t, s)
			}
			if !equal(*got, tc.want) {
				t.Errorf("violations %v, want %v", *got, tc.want)
			}
		})
	}
}

func equal(a, b []lockrank.Violation) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The default handler panics, before the lock is taken, naming both locks.
func TestInversionPanics(t *testing.T) {
	prev := lockrank.SetViolationHandler(nil)
	defer lockrank.SetViolationHandler(prev)
	var a lockrank.Mutex[one]
	var b lockrank.Mutex[two]
	b.Lock()
	defer b.Unlock()
	func() {
		defer func() {
			r := recover()
			var v *lockrank.Violation
			if err, ok := r.(error); !ok || !errors.As(err, &v) {
				t.Fatalf("recovered %v, want a *lockrank.Violation", r)
			}
			if got, want := v.Error(), "lock ordering problem: one (rank 1) acquired while holding two (rank 2)"; got != want {
				t.Errorf("got %q, want %q", got, want)
			}
		}()
		a.Lock()
		t.Error("Lock returned after an inversion")
	}()
	if !a.TryLock() {
		t.Fatal("the panicking Lock left the lock held")
	}
	a.Unlock()
	found := false
	for _, v := range lockrank.Violations() {
		found = found || v == lockrank.Violation{Acquired: rankOne, Held: rankTwo}
	}
	if !found {
		t.Errorf("Violations() = %v, without the one that panicked", lockrank.Violations())
	}
}

// What one goroutine holds does not constrain another.
func TestGoroutinesIndependent(t *testing.T) {
	got := collect(t)
	var a lockrank.Mutex[one]
	var b lockrank.Mutex[two]
	var c lockrank.Mutex[three]
	var rw lockrank.RWMutex[three]
	c.Lock()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				a.Lock()
				b.Lock()
				rw.RLock()
				rw.RUnlock()
				b.Unlock()
				a.Unlock()
			}
		}()
	}
	wg.Wait()
	c.Unlock()
	if len(*got) != 0 {
		t.Errorf("violations %v", *got)
	}
}

// A lock unlocked by another goroutine than the one that locked it is no
// longer held by the one that locked it.
func TestUnlockOnAnotherGoroutine(t *testing.T) {
	got := collect(t)
	var a lockrank.Mutex[one]
	var b lockrank.Mutex[two]
	var rw lockrank.RWMutex[three]
	b.Lock()
	rw.RLock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Unlock()
		rw.RUnlock()
	}()
	<-done
	a.Lock()
	a.Unlock()
	if len(*got) != 0 {
		t.Errorf("violations %v", *got)
	}
}

// The bookkeeping is shared by every goroutine, and must not order them
// for the race detector: a race between two goroutines that only take
// ranked locks is still reported. The race runs in a child process, whose
// failure is the expected outcome.
func TestRacesStayVisible(t *testing.T) {
	if os.Getenv("LOCKRANK_RACY_CHILD") == "1" {
		racy()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRacesStayVisible$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LOCKRANK_RACY_CHILD=1")
	out, _ := cmd.CombinedOutput()
	if !bytes.Contains(out, []byte("WARNING: DATA RACE")) {
		t.Fatalf("the race detector saw no race through the ranked locks' bookkeeping:\n%s", out)
	}
}

var racyValue int

// racy writes racyValue on one goroutine and reads it on another, each
// under a different ranked lock, nothing ordering the two accesses: the
// detector reports whichever comes second. The wait after both only keeps
// the process alive until the writer ran.
func racy() {
	var a lockrank.Mutex[one]
	var b lockrank.Mutex[two]
	var wrote sync.WaitGroup
	wrote.Go(func() {
		racyValue = 1
		a.Lock()
		a.Unlock()
	})
	b.Lock()
	_ = racyValue
	b.Unlock()
	wrote.Wait()
}
