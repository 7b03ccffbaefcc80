package matcher

import "unsafe"

// SetBrokenPlainStore switches GCAS to a plain store that loses concurrent
// updates, so tests can show the linearizability check catches it.
func SetBrokenPlainStore(broken bool) { brokenPlainStore.Store(broken) }

// NodeCount counts the I-nodes reachable from the live root, tombs included.
func NodeCount[T comparable](t *Trie[T]) int {
	var count func(in *iNode[T]) int
	count = func(in *iNode[T]) int {
		n := 1
		t.gcasRead(in).forEach(func(br *branch[T]) {
			if br.child != nil {
				n += count(br.child)
			}
		})
		return n
	}
	return count(t.readRoot(false))
}

// WithCacheAdmitAll makes every cache miss fill (no second-miss admission),
// so that tests exercise hits and invalidation on every subject.
func WithCacheAdmitAll() Option { return func(o *options) { o.cacheAdmitAll = true } }

// WithCacheCounters counts the cache's hits and misses (see CacheStatsOf).
func WithCacheCounters() Option { return func(o *options) { o.cacheCounters = true } }

// CacheStats are the counters of a trie made WithCacheCounters.
type CacheStats struct {
	Hits, Misses, Bypassed, Fills, NotAdmitted, FillsAborted uint64
}

// Matches is the number of Match calls the counters saw.
func (s CacheStats) Matches() uint64 { return s.Hits + s.Misses + s.Bypassed }

// HitRatio is hits over matches (0 with no matches).
func (s CacheStats) HitRatio() float64 {
	if s.Matches() == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Matches())
}

// CacheStatsOf reads t's counters; ok is false when t has no cache or was not
// made WithCacheCounters.
func CacheStatsOf[T comparable](t *Trie[T]) (s CacheStats, ok bool) {
	if t.cache == nil || t.cache.counters == nil {
		return s, false
	}
	c := t.cache.counters
	return CacheStats{
		Hits: c[counterHits].Load(), Misses: c[counterMisses].Load(), Bypassed: c[counterBypassed].Load(),
		Fills: c[counterFills].Load(), NotAdmitted: c[counterNotAdmitted].Load(), FillsAborted: c[counterFillsAborted].Load(),
	}, true
}

// CacheEntries counts the slots holding an entry of the current version.
// CacheSlots is the number of results t's cache can hold.
func CacheSlots[T comparable](t *Trie[T]) int {
	if t.cache == nil {
		return 0
	}
	return len(t.cache.buckets) * cacheWays
}

func CacheEntries[T comparable](t *Trie[T]) int {
	if t.cache == nil {
		return 0
	}
	n, v := 0, t.cache.version.Load()
	for i := range t.cache.buckets {
		for j := range t.cache.buckets[i].slots {
			if e := t.cache.buckets[i].slots[j].Load(); e != nil && e.version == v {
				n++
			}
		}
	}
	return n
}

// WithCacheAfterMissMatch calls f in every missing Match, after the match and
// before the check of the version word that decides whether to fill.
func WithCacheAfterMissMatch(f func()) Option {
	return func(o *options) { o.cacheAfterMissMatch = f }
}

// WithBrokenCacheVersion makes writes leave the cache's version word alone:
// a cache that is never invalidated, for tests to show they catch it.
func WithBrokenCacheVersion() Option { return func(o *options) { o.cacheBrokenNoVersion = true } }

// CacheTableBytes is the size of t's bucket table, allocated at New.
func CacheTableBytes[T comparable](t *Trie[T]) int {
	if t.cache == nil {
		return 0
	}
	return len(t.cache.buckets) * int(unsafe.Sizeof(t.cache.buckets[0]))
}
