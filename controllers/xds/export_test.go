package xds

// SetMaxLoggedChanges shortens the Cache's change log for a test and
// returns what restores it.
func SetMaxLoggedChanges(n int) (restore func()) {
	before := maxLoggedChanges
	maxLoggedChanges = n
	return func() { maxLoggedChanges = before }
}
