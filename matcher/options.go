package matcher

// Option configures a Trie at New.
type Option func(*options)

type options struct {
	cacheSize     int
	cacheAdmitAll bool // test-only (export_test.go): fill on every miss
	cacheCounters bool // test-only (export_test.go): count hits and misses
	// test-only: called by a missing Match between its match and its
	// check of the version word, so a test can write there.
	cacheAfterMissMatch func()
	// test-only: writes leave the version word alone, so tests can show
	// that they catch a cache that is never invalidated.
	cacheBrokenNoVersion bool
}

// WithCacheSize bounds the result cache to entries results (rounded up to a
// power of two, at least 2, at most MaxCacheSize); 0 or less turns the
// cache off. The default is
// DefaultCacheSize, the bound of nats-server's Sublist cache.
//
// The cache's memory is bounded by the number of entries: each holds a copy
// of its subject and of at most 128 values (a larger result is not cached),
// plus 16 bytes of slot and admission marks per entry allocated up front.
func WithCacheSize(entries int) Option {
	return func(o *options) { o.cacheSize = entries }
}

// WithoutCache turns the result cache off. Every Match then walks the trie,
// and writes skip the cache's version word. Worth it where subjects rarely
// repeat between writes, or where the 16 KiB the default cache allocates up
// front matters more than hot subjects do.
func WithoutCache() Option { return WithCacheSize(0) }
