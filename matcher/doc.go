// Package matcher is weighstation's subscription index: a lock-free,
// linearizable concurrent trie mapping NATS subject patterns to values, with
// O(1) snapshots. The sidecar matches every message against it on both
// paths (a published subject to its Topic policy, a received subject to the
// local subscriptions), so Match is on the hot path and allocates nothing.
//
// It must never block a reader behind a writer, never take a mutex on the
// read path, and never return a result that no single instant of the trie
// could have produced.
//
// # Semantics
//
// Subjects are NATS subjects: tokens separated by '.'. In a pattern, a token
// that is exactly '*' matches one token and a last token that is exactly '>'
// matches one or more. Validation agrees with nats-server's
// server.IsValidSubject within the explicit limits MaxSubjectLength and
// MaxTokens; every refusal is a *SubjectError naming the rule. A value
// subscribed through two matching patterns is returned twice: the caller
// decides about duplicates, as nats-server does. Covers tests pattern
// containment, which subject ACLs use.
//
// # Algorithm
//
// The trie is the Ctrie of Prokopec et al. ("Concurrent Tries with
// Efficient Non-Blocking Snapshots", PPoPP 2012), generalized to subject
// tokens as in Workiva's matchbox (see the reading
// 02-lock-free-subscription-trie):
//
//   - An I-node (indirection node) holds an atomic pointer to a main node. A
//     main node is a C-node: an immutable table of branches, one per next
//     token, with '*' and '>' kept apart. A branch holds the values
//     subscribed through the pattern ending at its token, and the I-node of
//     the next level if patterns go deeper.
//   - A write copies the one C-node it changes and swaps the copy into the
//     I-node above it with a CAS. I-nodes are never replaced by writes
//     below them, so two writes at different depths cannot lose each other
//     (the I-node invariant), and a failed CAS means another write
//     committed: re-read and retry. Readers never wait.
//   - Values sit in a persistent set (valueSet): a small slice, or past
//     eight values a 32-way CHAMP hash trie plus a tail of up to 64 values
//     in an append-only chunk. Adding a subscriber to a subject with 30,000
//     appends to the tail (the chunk's next slot is claimed by CAS, so only
//     one version of the set ever extends a given prefix, and a slot is
//     written before any version holding it is published). A full tail
//     goes into the hash trie in one batch, which copies each node on its
//     values' paths once; past 1,024 values it goes instead into a mid
//     chunk: a larger append-only chunk claimed the same way, with a hash
//     index of its positions, beside a Bloom filter of the whole set
//     outside the tail (kept from one chunk to the next until it is
//     full), whose entries and bits are only ever added (by CAS and
//     atomic OR), so that they hold a superset of what any version sharing
//     them holds and a version ignores positions past its own length. A
//     full mid chunk goes into the hash trie in one batch about as large
//     as the trie, so each value costs a constant number of node copies,
//     and a new value is told absent by the filter without a walk down the
//     hash trie. Nothing a published set holds ever changes, so sets can be
//     shared by snapshots.
//   - Literal branches are found by a 64-bit key (the token's length and
//     first 7 bytes): up to 8 keys sit together in one cache line next to
//     the C-node and are scanned, past that a probing table indexes them;
//     an equal key proves equality for tokens of up to 7 bytes, so only
//     longer tokens are compared as strings.
//   - Removal: when a C-node other than the root loses its last branch, the
//     I-node gets a tomb (T-node) instead. A tomb is the last main node an
//     I-node ever holds (the T-node invariant), so no insert can land in a
//     node being cut out; whoever meets a tomb helps cut it out of its
//     parent (clean / cleanParent) and retries, and the cutting climbs as
//     far as emptiness goes. Every non-root I-node therefore points to a
//     C-node with a branch, or to a tomb on its way out.
//   - Generations and GCAS: every I-node carries the generation it was made
//     in. Snapshot swaps in a new root I-node with a new generation using
//     RDCSS (double-compare single-swap on the root: only if the old root's
//     main node is still the one read). The old root becomes the read-only
//     snapshot; the live trie copies ("renews") an older-generation I-node
//     before it first writes below it, so nodes a snapshot shares are never
//     written again. GCAS makes a write commit only if the root's generation
//     still equals the I-node's: the write is proposed by CAS on the
//     I-node's main pointer, and the proposal is then committed, or rolled
//     back, by CAS on its prev field, by the writer or any reader who meets
//     it. A write racing a snapshot thus either lands before it (and is in
//     it) or fails and is retried after it.
//
// # Why each CAS is safe
//
//   - CAS on I-node.main (gcas): main nodes are fresh allocations and the GC
//     never reuses an address that a goroutine still holds, so there is no
//     ABA: success means nothing committed since the read.
//   - CAS on mainNode.prev (gcasCommit): decides a pending write exactly
//     once, nil for committed or a failure marker for rolled back; every
//     helper reads the same root generation rule, and the first CAS wins.
//   - CAS back to the replaced node (roll-back): only done for a proposal
//     that was decided failed, so no committed write is undone.
//   - CAS on the root (RDCSS): the descriptor's outcome is decided by one
//     CAS before the root changes; a write pending on the root aborts the
//     snapshot attempt instead of being lost.
//
// # Linearizable wildcard matches
//
// Reading several I-nodes one after another is not atomic, and a wildcard
// match reads several: on its own it could see a later subscribe and miss
// an earlier one. Match records each (I-node, main node) it read, checks
// them all again at the end and retries if any changed; the match is then
// linearized at its last read. After a few failed attempts it matches an
// O(1) snapshot instead, which cannot change, so a reader under endless
// churn still finishes. The linearizability check in this package
// (porcupine, over concurrent histories of subscribe, unsubscribe, match and
// snapshot) covers this.
//
// # The result cache
//
// A Trie caches the results of matches (on by default, DefaultCacheSize
// entries; WithCacheSize and WithoutCache change that). The cache is a
// bounded, lossy table of immutable entries published by atomic stores,
// each tagged with the version of the trie it was computed in. The version
// is one word that every Subscribe and Unsubscribe moves before it can
// commit anything and again when it is done; a value of the word with no
// write in progress names exactly one state of the trie, because a write
// that began would have changed it for good. A hit is a read of the word,
// then an entry tagged with that value: the entry was computed from the
// state the word names, which is the state at the read, so the hit is
// linearized there. A write therefore makes every entry unreachable at
// once, with no sweep and no lock; stale entries are overwritten later. A
// reader that sees a write in progress, or a word that moved during its
// walk, does not store what it found. Admission on a subject's second miss
// (the bucket remembers the last two subjects that missed there) keeps a
// workload that rotates over more subjects than the cache holds from
// paying for fills it would never use. cache.go has the argument in full.
//
// # Costs
//
// Match: a cache hit is a hash of the subject, two loads in one cache line
// and a copy of the result into dst. A miss walks the trie; while the
// version word holds it walks without the read log (nothing committed, so
// nothing needs validating). Zero allocations either way while a walk
// visits at most inlineReads (24) I-nodes (a 5-token subject visits at most
// 31, and about a dozen against the benchmarks' hot workload); past that
// its read log spills to the heap; and a miss that fills allocates the
// entry. Subscribe and Unsubscribe: copy the one C-node whose branch changes
// (O(width of that level), one allocation holding the node, its keys and
// its branches); a set of more than eight values adds by appending to its
// tail (no allocation; a copy of at most 64 values when another version
// took the slot), and every 64th add moves the tail into the hash trie
// (the nodes on the batch's paths, one allocation each), or past 1,024
// values into the mid chunk (two small allocations, the batch and the
// set's header, plus the chunk, its index and at times the filter when a
// new chunk starts; a copy of the mid chunk when another version took its
// positions), whose values go into the hash trie when it is full
// (amortized O(1) node copies per value); a removal
// copies O(log32 n) nodes, or the tail, or moves the mid chunk's values
// into the hash trie (O(mid values), which at least as many adds put
// there); a new path of k tokens is one allocation.
// Snapshot: O(1), and the next writes through each shared node copy it
// once. Len counts a snapshot in O(n).
//
// docs/matcher.md records the benchmarks: `make bench-matcher` against
// nats-server's gsl, and `make bench-matcher-nats` against its cached
// Sublist, inside nats-server's server package.
package matcher
