// Package policy turns a pod's configuration (meshconfig.PodConfig) into the
// checks the sidecar runs on every publish: which Topic governs the subject
// (the most specific matching pattern, found with matcher), whether the
// message fits the Topic's size limit, and whether the pod's quota for it
// (token buckets for messages and bytes) allows it. A compiled Publish is
// immutable except for its buckets and counters, so the sidecar swaps whole
// configurations atomically and never blocks the data path.
package policy

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/weighstation/weighstation/matcher"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar/breaker"
)

// Verdict is the outcome of a publish check.
type Verdict uint8

const (
	Allow Verdict = iota
	// RefuseSize: the message exceeds the governing Topic's maxMessageBytes.
	RefuseSize
	// RefuseRate: the pod's quota for the Topic is spent.
	RefuseRate
)

// TopicCounters balance exactly: Attempts == Forwarded + RefusedAccess +
// RefusedSize + RefusedRate + FailedUpstream. The sidecar counts access
// refusals (enforce mode) before Check, and forwarding outcomes after it.
// They outlive configuration changes, keyed by Topic name.
type TopicCounters struct {
	Attempts, Forwarded, RefusedAccess, RefusedSize, RefusedRate, FailedUpstream atomic.Uint64
}

// RefuseAccess counts a publish the ACL refused.
func (t *Topic) RefuseAccess() {
	t.Counters.Attempts.Add(1)
	t.Counters.RefusedAccess.Add(1)
}

// Topic is one compiled publishing policy.
type Topic struct {
	Policy meshconfig.TopicPolicy
	// specificity is the Topic's place in matcher.CompareSpecificity's
	// order among the configuration's Topics (higher is more specific),
	// computed once so that choosing the governing Topic per message is an
	// integer compare rather than a re-tokenization of both patterns.
	specificity int
	// rates are the Topic's quota under this configuration (zero: none),
	// and quota its buckets, which outlive the configuration.
	rates    quotaRates
	quota    *quota
	Counters *TopicCounters
}

// quotaRates are a Topic's quota settings; a zero rate is no quota of
// that kind.
type quotaRates struct {
	messagesPerSecond, bytesPerSecond float64
	messagesBurst, bytesBurst         int
}

// quota is a Topic's token buckets. Like its counters it outlives
// recompilations, by the Topic's name: a configuration change (to any
// Topic, or a kill switch) refills nothing, and a new rate or burst
// applies to the tokens already there.
type quota struct {
	// mu orders the charges of the buckets, and latest is the newest time
	// charged (see take).
	mu       sync.Mutex
	latest   time.Time
	applied  quotaRates
	messages *rate.Limiter // nil until a message quota is first applied
	bytes    *rate.Limiter // nil until a byte quota is first applied
}

// apply makes the buckets follow rates, from now; q.mu is held.
func (q *quota) apply(rates quotaRates, now time.Time) {
	if q.applied == rates {
		return
	}
	q.applied = rates
	set := func(l **rate.Limiter, perSecond float64, burst int) {
		switch {
		case perSecond == 0:
		case *l == nil:
			*l = rate.NewLimiter(rate.Limit(perSecond), burst)
		default:
			(*l).SetLimitAt(now, rate.Limit(perSecond))
			(*l).SetBurstAt(now, burst)
		}
	}
	set(&q.messages, rates.messagesPerSecond, rates.messagesBurst)
	set(&q.bytes, rates.bytesPerSecond, rates.bytesBurst)
}

// Publish is a compiled configuration.
type Publish struct {
	trie       *matcher.Trie[*Topic]
	defaultPol *Topic
	// subscriptions are the pod's Subscriptions, most specific first.
	subscriptions []meshconfig.SubscriptionPolicy
	// MaxMessageBytes is the largest message any policy allows, for INFO's
	// max_payload.
	MaxMessageBytes int64
	// access is how subject permissions apply.
	access access
}

// Counters keeps every Topic's counters and quota buckets across
// recompilations.
type Counters struct {
	mu     sync.Mutex
	topics map[string]*TopicCounters
	quotas map[string]*quota
}

// NewCounters returns an empty set.
func NewCounters() *Counters {
	return &Counters{topics: map[string]*TopicCounters{}, quotas: map[string]*quota{}}
}

func (c *Counters) forTopic(name string) (*TopicCounters, *quota) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tc := c.topics[name]
	if tc == nil {
		tc = &TopicCounters{}
		c.topics[name] = tc
	}
	q := c.quotas[name]
	if q == nil {
		q = &quota{}
		c.quotas[name] = q
	}
	return tc, q
}

// CountsSnapshot is a copy of one Topic's counters.
type CountsSnapshot struct {
	Attempts, Forwarded, RefusedAccess, RefusedSize, RefusedRate, FailedUpstream uint64
}

// Balanced reports whether every attempt is accounted for.
func (c CountsSnapshot) Balanced() bool {
	return c.Attempts == c.Forwarded+c.RefusedAccess+c.RefusedSize+c.RefusedRate+c.FailedUpstream
}

// Snapshot copies the counters, by Topic name ("" is the default policy).
func (c *Counters) Snapshot() map[string]CountsSnapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]CountsSnapshot, len(c.topics))
	for name, tc := range c.topics {
		out[name] = CountsSnapshot{tc.Attempts.Load(), tc.Forwarded.Load(), tc.RefusedAccess.Load(), tc.RefusedSize.Load(), tc.RefusedRate.Load(), tc.FailedUpstream.Load()}
	}
	return out
}

// Compile builds the checks for cfg. It refuses an invalid configuration
// with the reason, so that the last good one stays in force.
func Compile(cfg meshconfig.PodConfig, counters *Counters) (*Publish, error) {
	p := &Publish{trie: matcher.New[*Topic]()}
	compileTopic := func(tp meshconfig.TopicPolicy) (*Topic, error) {
		if tp.MaxMessageBytes < 1 {
			return nil, fmt.Errorf("topic %q: maxMessageBytes must be at least 1, got %d", tp.Name, tp.MaxMessageBytes)
		}
		t := &Topic{Policy: tp}
		t.Counters, t.quota = counters.forTopic(tp.Name)
		if r := tp.PublishRate; r != nil {
			if r.MessagesPerSecond > 0 {
				t.rates.messagesPerSecond, t.rates.messagesBurst = float64(r.MessagesPerSecond), int(r.MessagesBurst)
			}
			if r.BytesPerSecond > 0 {
				if r.BytesBurst < tp.MaxMessageBytes {
					return nil, fmt.Errorf("topic %q: bytesBurst %d is below maxMessageBytes %d, which would refuse the largest messages forever", tp.Name, r.BytesBurst, tp.MaxMessageBytes)
				}
				t.rates.bytesPerSecond, t.rates.bytesBurst = float64(r.BytesPerSecond), int(r.BytesBurst)
			}
		}
		p.MaxMessageBytes = max(p.MaxMessageBytes, tp.MaxMessageBytes)
		return t, nil
	}
	def, err := compileTopic(cfg.Default)
	if err != nil {
		return nil, fmt.Errorf("default policy: %w", err)
	}
	p.defaultPol = def
	if p.access, err = compileAccess(cfg.Access); err != nil {
		return nil, err
	}
	for _, sp := range cfg.Subscriptions {
		if err := matcher.ValidatePattern(sp.Subject); err != nil {
			return nil, fmt.Errorf("subscription %q: %w", sp.Name, err)
		}
		if sp.Limits.MaxPendingMessages < 1 || sp.Limits.MaxPendingBytes < 1 {
			return nil, fmt.Errorf("subscription %q: limits.maxPendingMessages and limits.maxPendingBytes must be at least 1, got %d and %d",
				sp.Name, sp.Limits.MaxPendingMessages, sp.Limits.MaxPendingBytes)
		}
		if cfg, ok := breaker.ConfigFor(sp); ok {
			if err := cfg.Validate(); err != nil {
				return nil, fmt.Errorf("subscription %q: %w", sp.Name, err)
			}
		}
		p.subscriptions = append(p.subscriptions, sp)
	}
	slices.SortStableFunc(p.subscriptions, func(a, b meshconfig.SubscriptionPolicy) int {
		return matcher.CompareSpecificity(b.Subject, a.Subject)
	})
	topics := make([]*Topic, 0, len(cfg.Topics))
	for _, tp := range cfg.Topics {
		t, err := compileTopic(tp)
		if err != nil {
			return nil, err
		}
		if err := p.trie.Subscribe(tp.Subject, t); err != nil {
			return nil, fmt.Errorf("topic %q: %w", tp.Name, err)
		}
		topics = append(topics, t)
	}
	slices.SortFunc(topics, func(a, b *Topic) int { return matcher.CompareSpecificity(a.Policy.Subject, b.Policy.Subject) })
	for i, t := range topics {
		t.specificity = i + 1 // the default policy keeps 0: every Topic beats it
	}
	return p, nil
}

// SubscriptionFor returns the policy of the most specific Subscription whose
// pattern covers a local SUB's pattern, or false when none does (an inbox,
// say): the sidecar's defaults apply then.
func (p *Publish) SubscriptionFor(pattern string) (meshconfig.SubscriptionPolicy, bool) {
	for _, sp := range p.subscriptions {
		if matcher.Covers(sp.Subject, pattern) {
			return sp, true
		}
	}
	return meshconfig.SubscriptionPolicy{}, false
}

// Governing returns the Topic that governs subject: the most specific
// matching pattern, or the default policy. buf is scratch space the caller
// reuses so that the lookup does not allocate.
func (p *Publish) Governing(subject string, buf []*Topic) (*Topic, []*Topic) {
	buf = p.trie.Match(subject, buf[:0])
	best := p.defaultPol
	for _, t := range buf {
		if t.specificity > best.specificity {
			best = t
		}
	}
	return best, buf
}

// Check judges one publish of size bytes (headers and payload) against the
// governing Topic, spending quota only when it allows, and counts it.
func (t *Topic) Check(size int, now time.Time) Verdict {
	t.Counters.Attempts.Add(1)
	if int64(size) > t.Policy.MaxMessageBytes {
		t.Counters.RefusedSize.Add(1)
		return RefuseSize
	}
	if !t.take(size, now) {
		t.Counters.RefusedRate.Add(1)
		return RefuseRate
	}
	return Allow
}

// take spends one message and size bytes from the buckets, or nothing.
// The buckets take this configuration's rates first, if the last charge
// was under another's.
//
// Connections charge a Topic with the times their reads returned, which
// reach it out of order (a reader works through a read's commands while
// another reads). x/time/rate takes a time earlier than its last as the
// new last, and credits the interval between them again on the next
// charge, so two connections a few milliseconds apart taking turns would
// refill the buckets on every turn: a time earlier than the latest charged
// is charged as the latest. quota.mu also makes the two buckets one
// decision for concurrent publishes.
func (t *Topic) take(size int, now time.Time) bool {
	if t.rates == (quotaRates{}) {
		return true
	}
	q := t.quota
	q.mu.Lock()
	defer q.mu.Unlock()
	if now.Before(q.latest) {
		now = q.latest
	} else {
		q.latest = now
	}
	q.apply(t.rates, now)
	messages, bytes := q.messages, q.bytes
	if t.rates.messagesPerSecond == 0 {
		messages = nil
	}
	if t.rates.bytesPerSecond == 0 {
		bytes = nil
	}
	// Holding quota.mu, nobody else spends these buckets: look at both,
	// then spend from both, so a refusal spends nothing.
	if messages != nil && messages.TokensAt(now) < 1 || bytes != nil && bytes.TokensAt(now) < float64(size) {
		return false
	}
	if messages != nil {
		messages.AllowN(now, 1)
	}
	if bytes != nil {
		bytes.AllowN(now, size)
	}
	return true
}

// PublishViolation is the text of every publish refusal: it starts with the
// prefix nats.go keeps the connection open for, and says why.
func PublishViolation(subject, why string) string {
	return fmt.Sprintf("Permissions Violation for Publish to %q: %s", subject, why)
}

// Refusal is the error text a refused publish gets; it names the limit.
func (t *Topic) Refusal(v Verdict, subject string, size int) string {
	name := t.Policy.Name
	if name == "" {
		name = "the operator's default policy"
	} else {
		name = "Topic " + name
	}
	if v == RefuseSize {
		return PublishViolation(subject, fmt.Sprintf("message of %d bytes exceeds maxMessageBytes %d of %s", size, t.Policy.MaxMessageBytes, name))
	}
	r := t.Policy.PublishRate
	return PublishViolation(subject, fmt.Sprintf("publish quota of %s exceeded (%d messages/s, burst %d; %d bytes/s, burst %d)",
		name, r.MessagesPerSecond, r.MessagesBurst, r.BytesPerSecond, r.BytesBurst))
}
