package matcher_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/nats-io/nats-server/v2/server/gsl"

	"github.com/weighstation/weighstation/matcher"
	"github.com/weighstation/weighstation/matcher/internal/rwtrie"
)

// The benchmark suite: every workload runs against the lock-free trie
// ("ctrie"), nats-server's gsl.GenericSublist ("gsl") and a sync.RWMutex
// trie of our own ("rwtrie") in the same process. `make bench-matcher`
// (test/bench/matcher) runs it several times and prints medians and ratios.
// The workloads are described in docs/matcher.md; their parameters are pinned
// here.

// hotVocabulary is the reading's 13-word vocabulary.
var hotVocabulary = []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima", "mike"}

const (
	hotSubscriptions = 1000
	hotTokens        = 5
	hotStarOneIn     = 14 // '*' in about one token in fourteen
	hotFullOneIn     = 20 // '>' as the last token in about one subscription in twenty
	subjectPoolSize  = 4096
	skewedDistinct   = 10_000
	skewedDraws      = 1 << 16
	skewedZipfS      = 1.1 // Zipf exponent: the hottest subject takes about 10% of draws
	rotateDistinct   = 37_000
	fanInSubscribers = 30_000
	fanInSubject     = "fan.in.one.subject"
	churnGoroutines  = 4
	churnLivePerG    = 64 // patterns each churn goroutine keeps subscribed, on average

	seedPatterns = 1
	seedSubjects = 2
	seedSkewed   = 3
	seedRotate   = 4
	seedChurn    = 5
)

func hotPattern(rng *rand.Rand) string {
	tokens := make([]string, hotTokens)
	for i := range tokens {
		if rng.IntN(hotStarOneIn) == 0 {
			tokens[i] = "*"
		} else {
			tokens[i] = hotVocabulary[rng.IntN(len(hotVocabulary))]
		}
	}
	if rng.IntN(hotFullOneIn) == 0 {
		tokens[hotTokens-1] = ">"
	}
	return subjectFrom(tokens)
}

func hotSubject(rng *rand.Rand) string {
	tokens := make([]string, hotTokens)
	for i := range tokens {
		tokens[i] = hotVocabulary[rng.IntN(len(hotVocabulary))]
	}
	return subjectFrom(tokens)
}

var (
	hotPatterns = func() []string {
		rng := rand.New(rand.NewPCG(seedPatterns, 0))
		p := make([]string, hotSubscriptions)
		for i := range p {
			p[i] = hotPattern(rng)
		}
		return p
	}()
	hotSubjects           = distinctSubjects(seedSubjects, subjectPoolSize)
	skewedSequence        = zipfSequence()
	rotateSubjects        = distinctSubjects(seedRotate, rotateDistinct)
	benchmarkSubjectsSink int
)

func distinctSubjects(seed uint64, n int) []string {
	rng := rand.New(rand.NewPCG(seed, 0))
	seen := make(map[string]bool, n)
	out := make([]string, 0, n)
	for len(out) < n {
		s := hotSubject(rng)
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func zipfSequence() []string {
	subjects := distinctSubjects(seedSkewed, skewedDistinct)
	zipf := rand.NewZipf(rand.New(rand.NewPCG(seedSkewed, 1)), skewedZipfS, 1, skewedDistinct-1)
	seq := make([]string, skewedDraws)
	for i := range seq {
		seq[i] = subjects[zipf.Uint64()]
	}
	return seq
}

// index is what the benchmarks drive. NewReader returns a match function for
// one goroutine (gsl's callback API needs per-goroutine state to append
// without allocating).
type index interface {
	Subscribe(pattern string, v int)
	Unsubscribe(pattern string, v int)
	NewReader() func(subject string, dst []int) []int
}

type ctrieIndex struct{ t *matcher.Trie[int] }

func (c ctrieIndex) Subscribe(p string, v int) {
	if err := c.t.Subscribe(p, v); err != nil {
		panic(err)
	}
}
func (c ctrieIndex) Unsubscribe(p string, v int)          { _, _ = c.t.Unsubscribe(p, v) }
func (c ctrieIndex) NewReader() func(string, []int) []int { return c.t.Match }

type gslIndex struct{ s *gsl.GenericSublist[int] }

func (g gslIndex) Subscribe(p string, v int) {
	if err := g.s.Insert(p, v); err != nil {
		panic(err)
	}
}
func (g gslIndex) Unsubscribe(p string, v int) { _ = g.s.Remove(p, v) }
func (g gslIndex) NewReader() func(string, []int) []int {
	var buf []int
	collect := func(v int) { buf = append(buf, v) }
	return func(subject string, dst []int) []int {
		buf = dst
		g.s.Match(subject, collect)
		return buf
	}
}

type rwIndex struct{ t *rwtrie.Trie[int] }

func (r rwIndex) Subscribe(p string, v int)            { r.t.Subscribe(p, v) }
func (r rwIndex) Unsubscribe(p string, v int)          { r.t.Unsubscribe(p, v) }
func (r rwIndex) NewReader() func(string, []int) []int { return r.t.Match }

var implementations = []struct {
	name string
	new  func() index
}{
	{"ctrie", func() index { return ctrieIndex{matcher.New[int]()} }},
	{"ctrie-nocache", func() index { return ctrieIndex{matcher.New[int](matcher.WithoutCache())} }},
	{"gsl", func() index { return gslIndex{gsl.NewSublist[int]()} }},
	{"rwtrie", func() index { return rwIndex{rwtrie.New[int]()} }},
}

func loadHot(idx index) index {
	for i, p := range hotPatterns {
		idx.Subscribe(p, i)
	}
	return idx
}

// loadFanIn subscribes fanInSubscribers values to one subject.
func loadFanIn(idx index) index {
	for v := range fanInSubscribers {
		idx.Subscribe(fanInSubject, v)
	}
	return idx
}

func benchMatchSequence(b *testing.B, idx index, subjects []string) {
	match := idx.NewReader()
	buf := make([]int, 0, 256)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		buf = match(subjects[i%len(subjects)], buf[:0])
	}
	benchmarkSubjectsSink += len(buf)
}

// BenchmarkMatcher is the whole suite; the first level is the workload and
// the second the implementation.
func BenchmarkMatcher(b *testing.B) {
	for _, impl := range implementations {
		b.Run("hot/impl="+impl.name, func(b *testing.B) { benchMatchSequence(b, loadHot(impl.new()), hotSubjects) })
	}
	for _, impl := range implementations {
		b.Run("hit/impl="+impl.name, func(b *testing.B) { benchMatchSequence(b, loadHot(impl.new()), hotSubjects[:1]) })
	}
	for _, impl := range implementations {
		b.Run("empty/impl="+impl.name, func(b *testing.B) { benchMatchSequence(b, impl.new(), hotSubjects) })
	}
	for _, impl := range implementations {
		b.Run("skewed/impl="+impl.name, func(b *testing.B) { benchMatchSequence(b, loadHot(impl.new()), skewedSequence) })
	}
	for _, impl := range implementations {
		b.Run("rotate/impl="+impl.name, func(b *testing.B) { benchMatchSequence(b, loadHot(impl.new()), rotateSubjects) })
	}
	for _, impl := range implementations {
		b.Run("parallel/impl="+impl.name, func(b *testing.B) {
			idx := loadHot(impl.new())
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				match := idx.NewReader()
				buf := make([]int, 0, 256)
				i := rand.IntN(len(hotSubjects))
				for pb.Next() {
					buf = match(hotSubjects[i%len(hotSubjects)], buf[:0])
					i++
				}
			})
		})
	}
	for _, readPercent := range []int{90, 50} {
		for _, impl := range implementations {
			b.Run(fmt.Sprintf("churn%d/impl=%s", readPercent, impl.name), func(b *testing.B) {
				benchChurn(b, loadHot(impl.new()), readPercent)
			})
		}
	}
	for _, impl := range implementations {
		b.Run("fanin/impl="+impl.name, func(b *testing.B) {
			idx := loadFanIn(impl.new())
			b.ReportAllocs()
			b.ResetTimer()
			// One op is a subscribe of a new value and its unsubscribe, so
			// the node stays at 30,000 subscribers; an insert alone costs
			// at most the pair.
			for i := 0; i < b.N; i++ {
				v := fanInSubscribers + i
				idx.Subscribe(fanInSubject, v)
				idx.Unsubscribe(fanInSubject, v)
			}
		})
	}
	for _, impl := range implementations {
		b.Run("faninsert/impl="+impl.name, func(b *testing.B) {
			idx := loadFanIn(impl.new())
			b.ReportAllocs()
			b.ResetTimer()
			// Inserts alone: the set grows from 30,000 by b.N, which only
			// makes a persistent set's later inserts slightly dearer.
			for i := 0; i < b.N; i++ {
				idx.Subscribe(fanInSubject, fanInSubscribers+i)
			}
		})
	}
	for _, impl := range implementations {
		b.Run("fanchurn/impl="+impl.name, func(b *testing.B) {
			idx := loadFanIn(impl.new())
			members := make([]int, fanInSubscribers)
			for v := range members {
				members[v] = v
			}
			r := rand.New(rand.NewPCG(1, 2))
			b.ReportAllocs()
			b.ResetTimer()
			// One op is an unsubscribe of a member picked at random and a
			// subscribe of a new value: subscribers of a fan-in subject
			// that come and go (pods restarting), the node staying at
			// 30,000. Unlike fanin, the removed value is usually not the
			// one just added.
			for i := 0; i < b.N; i++ {
				j := r.IntN(len(members))
				idx.Unsubscribe(fanInSubject, members[j])
				members[j] = fanInSubscribers + i
				idx.Subscribe(fanInSubject, members[j])
			}
		})
	}
	for _, impl := range implementations {
		b.Run("memory/impl="+impl.name, func(b *testing.B) {
			var perSub float64
			for i := 0; i < b.N; i++ {
				perSub = retainedBytesPerSubscription(impl.new)
			}
			b.ReportMetric(perSub, "B/sub")
		})
	}
	// The cache's own memory, which memory leaves out but for the bucket
	// table a trie allocates up front: what a full cache of hot's results
	// retains, per entry and in all.
	b.Run("cachememory/impl=ctrie", func(b *testing.B) {
		var perEntry, total float64
		for i := 0; i < b.N; i++ {
			perEntry, total = retainedCacheBytes()
		}
		b.ReportMetric(perEntry, "B/entry")
		b.ReportMetric(total/1024, "KiB/cache")
	})
}

// benchChurn runs churnGoroutines goroutines that split b.N operations;
// readPercent of them are matches and the rest writes. A write subscribes a
// new (pattern, value) pair or unsubscribes one the goroutine holds, never
// an idempotent re-subscribe.
func benchChurn(b *testing.B, idx index, readPercent int) {
	var wg sync.WaitGroup
	per := b.N/churnGoroutines + 1
	b.ReportAllocs()
	b.ResetTimer()
	for g := range churnGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seedChurn, uint64(g)))
			match := idx.NewReader()
			buf := make([]int, 0, 256)
			type held struct {
				pattern string
				value   int
			}
			live := make([]held, 0, 2*churnLivePerG)
			next := (g + 1) * 1_000_000_000
			for i := range per {
				if rng.IntN(100) < readPercent {
					buf = match(hotSubjects[(i*7+g)%len(hotSubjects)], buf[:0])
					continue
				}
				if len(live) == 0 || (len(live) < 2*churnLivePerG && rng.IntN(2) == 0) {
					h := held{hotPattern(rng), next}
					next++
					idx.Subscribe(h.pattern, h.value)
					live = append(live, h)
				} else {
					k := rng.IntN(len(live))
					idx.Unsubscribe(live[k].pattern, live[k].value)
					live[k] = live[len(live)-1]
					live = live[:len(live)-1]
				}
			}
		}()
	}
	wg.Wait()
}

// retainedBytesPerSubscription loads hot into a fresh index and returns the
// live heap it holds, divided by the number of subscriptions.
func retainedBytesPerSubscription(newIndex func() index) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	idx := loadHot(newIndex())
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(idx)
	return float64(after.HeapAlloc-before.HeapAlloc) / hotSubscriptions
}

// retainedCacheBytes fills a trie's cache with hot's results (admission
// forced, every subject matched once) and returns the heap the entries
// retain plus the bucket table allocated at New, per entry and in all.
func retainedCacheBytes() (perEntry, total float64) {
	tr := matcher.New[int](matcher.WithCacheAdmitAll())
	loadHot(ctrieIndex{tr})
	buf := make([]int, 0, 256)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, s := range hotSubjects {
		buf = tr.Match(s, buf[:0])
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(tr)
	total = float64(after.HeapAlloc-before.HeapAlloc) + float64(matcher.CacheTableBytes(tr))
	return total / float64(matcher.CacheEntries(tr)), total
}

// natsCorpus rebuilds nats-server's Sublist benchmark corpus (sublist_test.go:
// subsInit over 8 words, 1 to 5 tokens, 37,448 subjects, and addWildcards'
// three patterns), so that the rotation `make bench-matcher-nats` judges can
// be profiled here without a copy of nats-server's module.
var natsCorpus = func() []string {
	words := []string{"synadia", "nats", "jetstream", "nkeys", "jwt", "deny", "auth", "drain"}
	var out []string
	var grow func(prefix string, depth int)
	grow = func(prefix string, depth int) {
		for _, w := range words {
			s := w
			if prefix != "" {
				s = prefix + "." + w
			}
			out = append(out, s)
			if depth < 5 {
				grow(s, depth+1)
			}
		}
	}
	grow("", 1)
	return out
}()

// BenchmarkNATSCorpus matches every subject of the corpus in turn (not part
// of the bench-matcher table: bench-matcher-nats runs this inside nats-server).
func BenchmarkNATSCorpus(b *testing.B) {
	for _, impl := range implementations {
		b.Run("rotate/impl="+impl.name, func(b *testing.B) {
			idx := impl.new()
			for i, s := range natsCorpus {
				idx.Subscribe(s, i)
			}
			for i, p := range []string{"cloud.>", "cloud.nats.component.>", "cloud.*.*.nkeys.*"} {
				idx.Subscribe(p, -1-i)
			}
			benchMatchSequence(b, idx, natsCorpus)
		})
	}
}
