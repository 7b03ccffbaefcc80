// Package broadcast wakes every waiter at once: a channel closed at the
// next change, then replaced, so that any number of readers can wait for
// a change without registering.
package broadcast

// Signal is a channel closed at the next Notify. Its owner's lock guards
// it: C needs at least a read lock, Notify the write lock.
type Signal struct{ ch chan struct{} }

// New returns a Signal ready to wait on.
func New() Signal { return Signal{ch: make(chan struct{})} }

// C returns the channel that the next Notify closes.
func (s *Signal) C() <-chan struct{} { return s.ch }

// Notify wakes everyone waiting on C and starts a new channel.
func (s *Signal) Notify() {
	close(s.ch)
	s.ch = make(chan struct{})
}
