package wake

import "testing"

func TestPokeCoalescesAndNeverBlocks(t *testing.T) {
	ch := make(chan struct{}, 1)
	Poke(ch)
	Poke(ch) // the slot is full: does not block
	if len(ch) != 1 {
		t.Fatalf("after two pokes the channel holds %d, want 1", len(ch))
	}
	<-ch
	Poke(make(chan struct{})) // nobody receives: does not block
}
