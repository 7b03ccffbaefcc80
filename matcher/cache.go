package matcher

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"unsafe"
)

// The result cache maps a subject to the immutable result of matching it,
// for one version of the trie. It is the answer to nats-server's cached
// Sublist without the Sublist's costs: readers never lock (the Sublist takes
// its exclusive lock on every miss to fill), nothing is swept (a write makes
// every older entry unreachable by changing the version, and a stale entry
// is simply overwritten later), and a rotating workload that cannot hit does
// not pay for filling (admission on a subject's second miss).
//
// # Versions
//
// version is one word: the number of writes begun, shifted left by
// activeBits, plus the number of writes in progress. A write adds
// 1<<activeBits + 1 before it can commit anything and subtracts 1 once it
// has committed (or found nothing to do). Starts only ever raise the count
// of writes begun, and an end never lowers it, so if two reads of the word,
// at instants a < b, return the same value w with no write in progress,
// no write began or ended in between; every commit happens inside some
// write's begin/end window, so the trie's contents were the same at a and
// at b. A quiescent word value therefore names one state of the trie.
//
//   - A missing reader reads w (quiescent) before its walk and reads the
//     word again after it. If both are w, nothing committed in between, so
//     the walk read state(w) throughout: it needed no read log or
//     validation, and its result may be stored tagged w. If the word moved,
//     it walks again the validated way (match.go) and stores nothing.
//   - A reader reads the word w'; if it is quiescent and the entry for its
//     subject is tagged w', the contents at that read were state(w'), the
//     state the entry was computed from, and the read is inside the call:
//     a hit is linearized at its read of the word.
//   - A reader that sees a write in progress does not use the cache: the
//     word then names no single state.
//
// Entries are immutable and published with one atomic store, so a reader
// sees a whole entry or none. The cache is lossy: concurrent fills may
// overwrite each other, which costs a later miss, never a wrong result.
//
// The count of writes begun has 64-activeBits = 40 bits. When it wraps
// (after about 10^12 writes) old tags could name new states again, so the
// writer that wraps it clears every slot, and a filler that finds the word
// moved after storing its entry takes the entry back out. What remains is
// a reader descheduled in the middle of a walk or of a fill for 2^40
// writes (days at the highest write rate this trie sustains), which the
// design accepts.
const (
	// activeBits holds the number of writes in progress: up to 2^24-1
	// concurrent Subscribe or Unsubscribe calls, far more goroutines than
	// a process can run at once inside a write.
	activeBits = 24
	activeMask = 1<<activeBits - 1
	writeBegin = 1<<activeBits + 1

	// DefaultCacheSize is the number of results a Trie caches unless told
	// otherwise: nats-server's Sublist caches 1,024.
	DefaultCacheSize = 1024

	// MaxCacheSize is the most results a cache holds: WithCacheSize
	// takes a larger bound as this one (its slots alone, allocated up
	// front, are 16 MiB).
	MaxCacheSize = 1 << 20

	// cacheWays is the number of slots per bucket.
	cacheWays = 2

	// maxCachedValues bounds one entry: a result with more values is not
	// cached, so that the cache's memory stays bounded (DefaultCacheSize
	// entries of at most this many values) and a huge fan-out, whose copy
	// costs as much as the match, does not churn the heap.
	maxCachedValues = 128
)

// cacheSeed is per process: bucket positions never leave memory, and a
// client that does not know it cannot choose subjects that share a bucket.
var cacheSeed = rand.Uint64() // math/rand/v2's global source is seeded from the OS

type resultCache[T comparable] struct {
	// version is the word described above. Every write changes it, so it
	// sits alone on its cache line, away from the read-only fields below.
	version atomic.Uint64
	_       [56]byte

	buckets []cacheBucket[T] // a power of two of them

	admitAll        bool                             // test option: fill on every miss
	afterMissMatch  func()                           // test option: see options
	brokenNoVersion bool                             // test option: see options
	counters        *[numCacheCounters]atomic.Uint64 // test option: nil unless counting
}

// cacheBucket is where a subject's hash leads: two slots (a subject may sit
// in either, so that two hot subjects whose hashes collide do not evict each
// other) and the admission marks. It is 32 bytes, so a lookup and the
// admission check that follows a miss read one cache line.
type cacheBucket[T comparable] struct {
	slots [cacheWays]atomic.Pointer[cacheEntry[T]]
	// marks remembers the tags of the last two subjects that missed here
	// (32-bit tags, newest in the low half): a miss whose tag is there is
	// the subject's second miss in a short while, and only that one
	// fills. Lossy by design.
	marks atomic.Uint64
	_     [8]byte
}

// cacheEntry is immutable once published.
type cacheEntry[T comparable] struct {
	version uint64 // the quiescent version word the result was computed in
	hash    uint64
	subject string // a copy: the caller's string may live in a reused buffer
	values  []T
}

// The counters are a test hook: counting every hit on shared words would
// cost parallel readers a contended cache line, so production tries keep
// them off.
type cacheCounter int

const (
	counterHits         cacheCounter = iota // served from the cache
	counterMisses                           // looked up, not found, matched
	counterBypassed                         // a write was in progress: not looked up
	counterFills                            // results stored
	counterNotAdmitted                      // misses that did not fill: first misses
	counterFillsAborted                     // misses that did not fill: a write began during the match
	numCacheCounters
)

func (c *resultCache[T]) count(k cacheCounter) {
	if c.counters != nil {
		c.counters[k].Add(1)
	}
}

func newResultCache[T comparable](o *options) *resultCache[T] {
	size := cacheWays
	for size < min(o.cacheSize, MaxCacheSize) {
		size <<= 1
	}
	c := &resultCache[T]{
		buckets:  make([]cacheBucket[T], size/cacheWays),
		admitAll: o.cacheAdmitAll,

		afterMissMatch:  o.cacheAfterMissMatch,
		brokenNoVersion: o.cacheBrokenNoVersion,
	}
	if o.cacheCounters {
		c.counters = new([numCacheCounters]atomic.Uint64)
	}
	return c
}

// beginWrite opens a write's window: from here until endWrite, readers
// bypass the cache and no fill can succeed.
func (c *resultCache[T]) beginWrite() {
	if c.brokenNoVersion {
		return
	}
	if w := c.version.Add(writeBegin); w>>activeBits == 0 {
		// The count of writes begun wrapped: tags from the previous round
		// could match again.
		for i := range c.buckets {
			for j := range c.buckets[i].slots {
				c.buckets[i].slots[j].Store(nil)
			}
		}
	}
}

func (c *resultCache[T]) endWrite() {
	if !c.brokenNoVersion {
		c.version.Add(^uint64(0)) // -1: one write fewer in progress
	}
}

// hashSubject hashes a subject for the cache: a hit is a hash, two loads
// and a compare, so the hash is a large part of a hit's time. maphash (AES
// rounds) costs a large share of a hit on a short subject; this reads 16
// bytes at a time and folds the two words with one 64×64→128-bit multiply,
// as wyhash does, so that a 28-byte subject costs two dependent multiplies
// (the last 16 bytes, or for 8 to 16 bytes the first and the last 8, read
// overlapping what came before, so nothing past the end is read). The
// per-process seed is in both operands of every fold: a fold whose operand
// is zero loses the other, and no client can aim for that without knowing
// the seed. A subject under 8 bytes is its tokenKey, which holds every byte
// and the length. Hit or miss, the result is confirmed by comparing the
// subject, so the hash's quality only decides how evenly subjects spread
// over the buckets.
func hashSubject(subject string) uint64 {
	const (
		k0 = 0xa0761d6478bd642f
		k1 = 0xe7037ed1a0b428db
	)
	n := len(subject)
	s0, s1 := cacheSeed^k0, cacheSeed^k1
	if n < 8 {
		return mum(s0^tokenKey(subject), s1) // every byte and the length
	}
	b := unsafe.Slice(unsafe.StringData(subject), n)
	h := s0
	for i := 0; i+16 < n; i += 16 {
		h = mum(binary.LittleEndian.Uint64(b[i:])^h, binary.LittleEndian.Uint64(b[i+8:])^s1)
	}
	first := binary.LittleEndian.Uint64(b[max(n-16, 0):])
	return mum(first^h, binary.LittleEndian.Uint64(b[n-8:])^s1^uint64(n))
}

// mum folds a and b into one word: the two halves of their 128-bit
// product, xored.
func mum(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

func (c *resultCache[T]) bucket(h uint64) *cacheBucket[T] {
	return &c.buckets[h&uint64(len(c.buckets)-1)]
}

// lookup returns the entry for subject computed in version, or nil. It is
// the whole of a hit: two loads in one cache line, the entry's fields and
// one string compare.
func (c *resultCache[T]) lookup(h, version uint64, subject string) *cacheEntry[T] {
	b := c.bucket(h)
	for i := range b.slots {
		if e := b.slots[i].Load(); e != nil && e.hash == h && e.version == version && e.subject == subject {
			return e
		}
	}
	return nil
}

// admit reports whether a miss on the subject hashed h may fill: on its
// second miss while its bucket remembers it. A workload rotating over many
// more subjects than the buckets remember overwrites each mark before the
// subject comes round again, so it never fills.
func (c *resultCache[T]) admit(h uint64) bool {
	if c.admitAll {
		return true
	}
	// The tag is the hash's high half (the bucket index comes from the low
	// bits), | 1 so that an empty half never matches.
	tag := h>>32 | 1
	b := c.bucket(h)
	m := b.marks.Load()
	if m&0xffffffff == tag || m>>32 == tag {
		return true
	}
	b.marks.Store(m<<32 | tag)
	return false
}

// fill stores values as the result for subject in version. The caller has
// checked that the version word was version, quiescent, both before and
// after the walk that produced values.
func (c *resultCache[T]) fill(h, version uint64, subject string, values []T) {
	e := &cacheEntry[T]{version: version, hash: h, subject: strings.Clone(subject), values: slices.Clone(values)}
	b := c.bucket(h)
	// Take a slot that holds nothing current, or this subject's stale
	// entry; otherwise the newer entry goes first and the older one moves
	// to the second slot, evicting what was there (first in, first out
	// within the bucket). The two stores are not atomic together: a reader
	// may miss an entry for an instant, which costs a miss, never a wrong
	// result.
	slot := -1
	for i := range b.slots {
		if old := b.slots[i].Load(); old == nil || old.version != version || old.hash == h {
			slot = i
			break
		}
	}
	if slot < 0 {
		b.slots[1].Store(b.slots[0].Load())
		slot = 0
	}
	b.slots[slot].Store(e)
	c.count(counterFills)
	if c.version.Load() != version {
		// The word moved while we stored. Normally that only makes the
		// entry unreachable; but if the count of writes begun wrapped
		// and the slots were cleared before our store, the tag could
		// come round again, so take the entry back out.
		b.slots[slot].CompareAndSwap(e, nil)
	}
}
