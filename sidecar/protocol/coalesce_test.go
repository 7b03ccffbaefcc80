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
