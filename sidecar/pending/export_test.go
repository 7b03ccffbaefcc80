package pending

// Sheddable is how many queues b may shed, for tests.
func Sheddable(b *Budget) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.sheddable)
}
