package pending

import "testing"

// TestSharedBodyIsReleasedOnEveryPath: a body pushed to several queues is
// released by each path a message leaves a queue by (refused, shed for
// overflow, dropped with the queue, taken and written), exactly once each,
// and a release too many panics.
func TestSharedBodyIsReleasedOnEveryPath(t *testing.T) {
	body := NewShared(100)
	if len(body.Bytes) != 100 || cap(body.Bytes) != 256 {
		t.Fatalf("body of %d bytes in a buffer of %d, want 100 in the 256-byte class", len(body.Bytes), cap(body.Bytes))
	}
	m := Message{Subject: "s", Data: body.Bytes, Body: body}
	full := New(Limits{MaxMessages: 1, MaxBytes: 1 << 20, Overflow: DropNewest})
	full.Push(Message{Subject: "s", Data: []byte("x")})
	oldest := New(Limits{MaxMessages: 1, MaxBytes: 1 << 20, Overflow: DropOldest})
	dropped := New(roomyLimits)
	taken := New(roomyLimits)
	for _, q := range []*Queue{full, oldest, dropped, taken} {
		body.Retain()
		q.Push(m)
	}
	// full refused it; oldest holds it until the next push sheds it.
	body.Retain()
	oldest.Push(Message{Subject: "s", Data: []byte("y"), Body: nil})
	dropped.Close(ReasonClosed)
	got, ok := taken.Take()
	if !ok || got.Body != body {
		t.Fatal("the taken message lost its body")
	}
	got.Body.Release()
	taken.Done(true)
	if n := body.refs.Load(); n != 2 { // NewShared's own and the extra Retain above
		t.Fatalf("%d references left, want 2", n)
	}
	body.Release()
	body.Release()
	defer func() {
		if recover() == nil {
			t.Fatal("a release too many did not panic")
		}
	}()
	body.Release()
}

// roomyLimits: room for everything the test pushes.
var roomyLimits = Limits{MaxMessages: 100, MaxBytes: 1 << 20, Overflow: DropNewest}

// TestLargeBodiesAreNotPooled: over 1 MiB, a body is allocated and left to
// the collector.
func TestLargeBodiesAreNotPooled(t *testing.T) {
	b := NewShared(2 << 20)
	if b.class != -1 || len(b.Bytes) != 2<<20 {
		t.Fatalf("class %d, %d bytes", b.class, len(b.Bytes))
	}
	b.Release()
}
