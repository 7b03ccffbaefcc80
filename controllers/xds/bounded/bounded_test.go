package bounded

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

func TestLRUNeverGrowsPastItsCapacity(t *testing.T) {
	tests := []struct {
		name     string
		capacity int
		adds     int
		wantLen  int
		evicted  int
	}{
		{"under", 3, 2, 2, 0},
		{"at", 3, 3, 3, 0},
		{"one past", 3, 4, 3, 1},
		{"a flood", 3, 10_000, 3, 9_997},
		{"capacity 0 holds 1", 0, 5, 1, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLRU[int, string](tc.capacity)
			evicted := 0
			l.OnEvict = func(int, string) { evicted++ }
			for i := range tc.adds {
				l.Add(i, fmt.Sprint(i))
			}
			if l.Len() != tc.wantLen || evicted != tc.evicted {
				t.Fatalf("len %d, evicted %d; want %d, %d", l.Len(), evicted, tc.wantLen, tc.evicted)
			}
			if _, ok := l.Get(tc.adds - 1); !ok {
				t.Fatal("the newest entry was evicted")
			}
		})
	}
}

func TestLRUEvictsTheLeastRecentlyUsed(t *testing.T) {
	l := NewLRU[string, int](2)
	l.Add("a", 1)
	l.Add("b", 2)
	l.Get("a") // b is now the least recently used
	l.Add("c", 3)
	if _, ok := l.Get("b"); ok {
		t.Fatal("b survived")
	}
	for _, k := range []string{"a", "c"} {
		if _, ok := l.Get(k); !ok {
			t.Fatalf("%s evicted", k)
		}
	}
	l.Remove("a")
	if l.Len() != 1 {
		t.Fatalf("len %d after Remove, want 1", l.Len())
	}
}

func TestLimitersPerKeyAtTheEdge(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l := NewLimiters[string](rate.Limit(2), 3, 2)
	for i := range 3 {
		if !l.Allow("a", now) {
			t.Fatalf("token %d of a burst of 3 refused", i+1)
		}
	}
	if l.Allow("a", now) {
		t.Fatal("a 4th token in a burst of 3 allowed")
	}
	if !l.Allow("b", now) {
		t.Fatal("another key shares a's bucket")
	}
	if l.Allow("a", now.Add(499*time.Millisecond)) {
		t.Fatal("a token before its refill (500 ms at 2/s)")
	}
	if !l.Allow("a", now.Add(500*time.Millisecond)) {
		t.Fatal("no token after its refill")
	}
	// A third key evicts the least recently used (b): the map stays at 2.
	l.Allow("c", now)
	if n, evicted := l.Len(); n != 2 || evicted != 1 {
		t.Fatalf("%d keys, %d evicted; want 2, 1", n, evicted)
	}
}
