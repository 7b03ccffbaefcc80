package protocol

import (
	"testing"
	"time"
	"unsafe"
)

// TestCoalescerCopiesItsKeys: a key given as a view of a buffer the caller
// then reuses is remembered by its bytes at the time.
func TestCoalescerCopiesItsKeys(t *testing.T) {
	c := NewErrorCoalescer(time.Second, 10)
	now := time.Now()
	buf := []byte("orders.created")
	if !c.Allow(unsafe.String(&buf[0], len(buf)), now) {
		t.Fatal("the first error was not allowed")
	}
	copy(buf, "ORDERS") // the caller's buffer, reused
	if c.Allow("orders.created", now) {
		t.Fatal("a second error for the same subject within the interval was allowed: the key was not copied")
	}
}

// TestCoalescerBoundsItsKeysBytes: long keys (subjects may be 1,024 bytes)
// fill its memory before its count of keys; a new key past the bytes is
// suppressed until keys older than the interval can be forgotten.
func TestCoalescerBoundsItsKeysBytes(t *testing.T) {
	c := NewErrorCoalescer(time.Second, 4) // 4 keys, 4*ErrorKeyBytes bytes
	now := time.Now()
	long := func(b byte) string {
		k := make([]byte, 2*ErrorKeyBytes-4)
		for i := range k {
			k[i] = b
		}
		return string(k)
	}
	steps := []struct {
		key  string
		at   time.Duration
		want bool
	}{
		{long('a'), 0, true},
		{long('b'), 0, true},
		{long('c'), 0, false},           // two keys, but their bytes are full
		{"short", 0, true},              // eight bytes were left
		{long('c'), time.Second, false}, // nothing older than the interval yet
		{long('c'), 2 * time.Second, true},
	}
	for i, s := range steps {
		if got := c.Allow(s.key, now.Add(s.at)); got != s.want {
			t.Fatalf("step %d (%.8s… at %s): Allow = %v, want %v", i, s.key, s.at, got, s.want)
		}
	}
	if c.keyBytes > c.maxBytes || c.Suppressed() != 2 {
		t.Fatalf("%d bytes of keys (max %d), %d suppressed; want within, 2", c.keyBytes, c.maxBytes, c.Suppressed())
	}
}
