package xds

// SetMaxLoggedChanges shortens the Cache's change log for a test and
// returns what restores it.
func SetMaxLoggedChanges(n int) (restore func()) {
	before := maxLoggedChanges
	maxLoggedChanges = n
	return func() { maxLoggedChanges = before }
}

// CollectionVersion is a collection's version now, as a response would
// carry it.
func CollectionVersion(c *Cache, collection string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	prefix := collection[:len(collection)-1]
	return c.collectionVersionLocked(prefix)
}
