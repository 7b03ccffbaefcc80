// Package wake pokes a goroutine that waits on a channel of one slot: a
// poke never blocks, and pokes made before the goroutine wakes coalesce
// into one wake-up.
package wake

// Poke sends on ch unless a send is already waiting in it (ch has a buffer
// of one), or no goroutine is receiving (an unbuffered ch).
func Poke(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
