package xds

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/weighstation/weighstation/controllers/xds/bounded"
)

// ReviewLimits bound the TokenReviews that callers of the xDS port can
// make the operator send, and what it remembers of them. Every xDS
// stream, Reports stream and credential call presents a token; without
// these, each would be a TokenReview, and a flood of junk tokens would
// take the apiserver's time from the operator's own requests (its Lease
// renewals among them).
type ReviewLimits struct {
	// Rate and Burst are the TokenReviews per second, all callers
	// together (-xds-tokenreview-rate, -xds-tokenreview-burst). A review
	// over it is refused UNAVAILABLE: the caller retries later.
	Rate  float64
	Burst int
	// PeerRate and PeerBurst are the same per remote IP address
	// (-xds-tokenreview-peer-rate, -xds-tokenreview-peer-burst), so that
	// one caller cannot take the whole of Rate. Over it: RESOURCE_EXHAUSTED.
	PeerRate  float64
	PeerBurst int
	// CacheSize is the most tokens whose review is remembered
	// (-xds-token-cache-size), the least recently used evicted past it;
	// a quarter as many refused tokens are remembered besides.
	CacheSize int
	// CacheTTL caps how long a review is trusted (-xds-token-cache-ttl),
	// below the token's own expiry: what the pod cache does not show (a
	// ServiceAccount deleted, which invalidates its tokens at the
	// apiserver) is seen within it.
	CacheTTL time.Duration
}

// Defaults of ReviewLimits.
//
// Rate: a new leader starts with an empty cache and every sidecar
// reconnects, one review each (its streams and calls share one token): at
// 100/s and a burst of 200, 1,000 sidecars are back within about 8 s, on
// top of the failover itself, while a flood costs the apiserver at most
// 100 reviews a second. PeerRate: a sidecar needs one review per token
// (the kubelet renews it at 80% of its hour) and per reconnection; its
// burst covers the xDS stream, the Reports stream and the credential call
// opening together with a token the operator has not seen. CacheSize: two
// tokens per sidecar (its current one and its renewal) for 10,000
// sidecars, about 2 MiB.
var DefaultReviewLimits = ReviewLimits{
	Rate: 100, Burst: 200,
	PeerRate: 1, PeerBurst: 10,
	CacheSize: 20_000,
	CacheTTL:  10 * time.Minute,
}

// Fixed bounds of the TokenGate.
const (
	// MaxTrackedPeers is the most peers with a rate bucket; past it the
	// least recently seen is forgotten (bounded.Limiters).
	MaxTrackedPeers = 16_384
	// refusedTTL caps how long a token the apiserver refused is refused
	// without asking again (it stays refused: a token's signature does not
	// become valid); short, so that a refusal from an apiserver that was
	// wrong for a moment (rotating its keys) does not last.
	refusedTTL = time.Minute
	// reviewTimeout bounds one TokenReview, which every caller of the same
	// token waits for.
	reviewTimeout = 10 * time.Second
)

// RegisterFlags binds l to the operator's flags; l's values are the
// defaults.
func (l *ReviewLimits) RegisterFlags(fs *flag.FlagSet) {
	fs.Float64Var(&l.Rate, "xds-tokenreview-rate", l.Rate, "the most TokenReviews per second the xDS server sends for sidecars' tokens, all callers together (a cached or locally refused token costs none); a call over it is refused UNAVAILABLE")
	fs.IntVar(&l.Burst, "xds-tokenreview-burst", l.Burst, "the burst of -xds-tokenreview-rate: a new leader's sidecars reconnect together")
	fs.Float64Var(&l.PeerRate, "xds-tokenreview-peer-rate", l.PeerRate, "the most TokenReviews per second for calls from one remote IP address; a call over it is refused RESOURCE_EXHAUSTED")
	fs.IntVar(&l.PeerBurst, "xds-tokenreview-peer-burst", l.PeerBurst, "the burst of -xds-tokenreview-peer-rate")
	fs.IntVar(&l.CacheSize, "xds-token-cache-size", l.CacheSize, "the most sidecar tokens whose TokenReview is remembered (by SHA-256), the least recently used evicted past it; each hit still needs the token's pod in the operator's pod cache")
	fs.DurationVar(&l.CacheTTL, "xds-token-cache-ttl", l.CacheTTL, "the longest a remembered TokenReview is trusted, below the token's own expiry")
}

// Validate refuses limits that would refuse every sidecar, naming the
// flags.
func (l ReviewLimits) Validate() error {
	switch {
	case l.Rate <= 0 || l.Burst < 1:
		return fmt.Errorf("-xds-tokenreview-rate (%g) must be positive and -xds-tokenreview-burst (%d) at least 1", l.Rate, l.Burst)
	case l.PeerRate <= 0 || l.PeerBurst < 1:
		return fmt.Errorf("-xds-tokenreview-peer-rate (%g) must be positive and -xds-tokenreview-peer-burst (%d) at least 1", l.PeerRate, l.PeerBurst)
	case l.CacheSize < 1:
		return fmt.Errorf("-xds-token-cache-size must be at least 1, got %d", l.CacheSize)
	case l.CacheTTL <= 0:
		return fmt.Errorf("-xds-token-cache-ttl must be positive, got %s", l.CacheTTL)
	}
	return nil
}

// refusal is an authentication refusal that says its gRPC code and the
// reason it is counted under (weighstation_operator_xds_refused_total).
type refusal struct {
	code   codes.Code
	reason string
	msg    string
}

func (r *refusal) Error() string { return r.msg }

// Refuse is an Authenticator's refusal with its gRPC code and the reason
// that weighstation_operator_xds_refused_total counts it under: for
// authenticators that wrap another with checks of their own.
func Refuse(code codes.Code, reason, msg string) error {
	return &refusal{code: code, reason: reason, msg: msg}
}

// GRPCStatus gives gRPC the refusal's code.
func (r *refusal) GRPCStatus() *status.Status { return status.New(r.code, r.msg) }

// Unwrap makes a refusal of the caller's credentials an
// errUnauthenticated; a refusal for load is not.
func (r *refusal) Unwrap() error {
	if r.code == codes.Unauthenticated {
		return errUnauthenticated
	}
	return nil
}

// Reasons the TokenGate refuses, besides checkToken's.
const (
	reasonPodGone        = "token_pod_gone"
	reasonRefusedCached  = "unauthenticated_cached"
	reasonPeerRateLimit  = "review_rate_peer"
	reasonGlobalRateLimt = "review_rate_global"
)

// TokenGate is the operator's Authenticator: a TokenReviewer behind local
// checks, a cache and rate limits, in this order:
//
//  1. checkToken: the token's shape, audience, expiry and pod binding,
//     read from its unverified claims (which can only refuse);
//  2. the cache of reviews by SHA-256 of the token, until the token's
//     expiry (capped at CacheTTL): a hit needs no review, but still needs
//     the bound pod's UID in the operator's pod cache, so that a deleted
//     pod's token dies with it; a token the apiserver refused is refused
//     again for up to a minute;
//  3. the claimed pod must be in the pod cache with the claimed UID: a
//     token naming any other pod would be refused after its review;
//  4. callers of a token being reviewed wait for that review;
//  5. the per-peer and global token buckets, then the TokenReview.
//
// The apiserver is asked at most Burst + Rate × t times in t, however many
// junk tokens arrive, and once per valid token while it stays cached.
type TokenGate struct {
	reviewer TokenReviewer
	limits   ReviewLimits
	now      func() time.Time
	metrics  *gateMetrics

	global *rate.Limiter
	peers  *bounded.Limiters[string]

	mu       sync.Mutex
	valid    *bounded.LRU[[sha256.Size]byte, cachedReview]
	refused  *bounded.LRU[[sha256.Size]byte, cachedRefusal]
	inFlight map[[sha256.Size]byte]*flight
}

type cachedReview struct {
	id    Identity
	until time.Time
}

type cachedRefusal struct {
	err   error
	until time.Time
}

// flight is one TokenReview in progress, which every caller of the same
// token waits for.
type flight struct {
	done chan struct{}
	id   Identity
	err  error
}

var _ Authenticator = (*TokenGate)(nil)

// NewTokenGate returns a gate in front of reviewer; now is the clock (nil:
// time.Now), reg takes its metrics (nil: none).
func NewTokenGate(reviewer TokenReviewer, limits ReviewLimits, now func() time.Time, reg prometheus.Registerer) (*TokenGate, error) {
	if err := limits.Validate(); err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	m, err := newGateMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("xDS token gate: registering metrics: %w", err)
	}
	g := &TokenGate{
		reviewer: reviewer, limits: limits, now: now, metrics: m,
		global:   rate.NewLimiter(rate.Limit(limits.Rate), limits.Burst),
		peers:    bounded.NewLimiters[string](rate.Limit(limits.PeerRate), limits.PeerBurst, MaxTrackedPeers),
		valid:    bounded.NewLRU[[sha256.Size]byte, cachedReview](limits.CacheSize),
		refused:  bounded.NewLRU[[sha256.Size]byte, cachedRefusal](max(limits.CacheSize/4, 1)),
		inFlight: map[[sha256.Size]byte]*flight{},
	}
	g.valid.OnEvict = func([sha256.Size]byte, cachedReview) { m.evictions.WithLabelValues("valid").Inc() }
	g.refused.OnEvict = func([sha256.Size]byte, cachedRefusal) { m.evictions.WithLabelValues("refused").Inc() }
	return g, nil
}

// Authenticate implements Authenticator.
func (g *TokenGate) Authenticate(ctx context.Context, token string) (Identity, error) {
	now := g.now()
	claimed, err := checkToken(token, g.reviewer.Audience, now)
	if err != nil {
		return Identity{}, err
	}
	key := sha256.Sum256([]byte(token))

	g.mu.Lock()
	if c, ok := g.valid.Get(key); ok {
		if now.Before(c.until) {
			g.mu.Unlock()
			g.metrics.lookups.WithLabelValues("hit").Inc()
			return g.stillThere(ctx, key, c.id)
		}
		g.valid.Remove(key)
	}
	if c, ok := g.refused.Get(key); ok {
		if now.Before(c.until) {
			g.mu.Unlock()
			g.metrics.lookups.WithLabelValues("refused_hit").Inc()
			return Identity{}, &refusal{code: codes.Unauthenticated, reason: reasonRefusedCached, msg: "refused without review (" + reasonRefusedCached + "): " + c.err.Error()}
		}
		g.refused.Remove(key)
	}
	if f, ok := g.inFlight[key]; ok {
		g.mu.Unlock()
		return g.join(ctx, f)
	}
	g.mu.Unlock()
	g.metrics.lookups.WithLabelValues("miss").Inc()

	// A token that names a pod the operator does not serve would be
	// refused after its review: refuse it before.
	if err := g.reviewer.checkPod(ctx, claimed.namespace, claimed.name, claimed.uid); err != nil {
		if errors.Is(err, errUnauthenticated) {
			return Identity{}, refuseToken(reasonTokenPod, "the token names pod %s/%s with UID %s, which the operator does not serve (no such pod with the sidecar label)", claimed.namespace, claimed.name, claimed.uid)
		}
		return Identity{}, coded(err)
	}

	peerKey := peerIP(ctx)
	if !g.peers.Allow(peerKey, now) {
		return Identity{}, &refusal{code: codes.ResourceExhausted, reason: reasonPeerRateLimit,
			msg: fmt.Sprintf("too many token reviews from %s: over -xds-tokenreview-peer-rate (%g/s, burst -xds-tokenreview-peer-burst %d); retry later", peerKey, g.limits.PeerRate, g.limits.PeerBurst)}
	}
	if !g.global.AllowN(now, 1) {
		return Identity{}, &refusal{code: codes.Unavailable, reason: reasonGlobalRateLimt,
			msg: fmt.Sprintf("the operator is reviewing tokens at its limit: -xds-tokenreview-rate (%g/s, burst -xds-tokenreview-burst %d); retry later", g.limits.Rate, g.limits.Burst)}
	}

	g.mu.Lock()
	if f, ok := g.inFlight[key]; ok {
		// Another caller started the review in between: this one joins it
		// too (counted as a miss, then joined).
		g.mu.Unlock()
		return g.join(ctx, f)
	}
	f := &flight{done: make(chan struct{})}
	g.inFlight[key] = f
	g.mu.Unlock()

	// The review is every waiting caller's: one caller going away must
	// not cancel it for the others.
	reviewCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reviewTimeout)
	id, err := g.reviewer.review(reviewCtx, token)
	cancel()
	g.mu.Lock()
	switch {
	case err == nil:
		g.metrics.reviews.WithLabelValues("authenticated").Inc()
		until := earliest(id.Expiry, now.Add(g.limits.CacheTTL), claimed.expiry)
		g.valid.Add(key, cachedReview{id: id, until: until})
	case errors.Is(err, errUnauthenticated):
		g.metrics.reviews.WithLabelValues("unauthenticated").Inc()
		g.refused.Add(key, cachedRefusal{err: err, until: earliest(now.Add(refusedTTL), claimed.expiry)})
	default:
		g.metrics.reviews.WithLabelValues("error").Inc()
	}
	g.metrics.entries.WithLabelValues("valid").Set(float64(g.valid.Len()))
	g.metrics.entries.WithLabelValues("refused").Set(float64(g.refused.Len()))
	delete(g.inFlight, key)
	g.mu.Unlock()
	if err == nil {
		err = g.reviewer.checkPod(ctx, id.Namespace, id.Pod, id.PodUID)
	}
	if err != nil {
		id, err = Identity{}, coded(err)
	}
	f.id, f.err = id, err
	close(f.done)
	return id, err
}

// join waits for a review in flight, or for ctx; every caller that waits
// on another's review is counted as joined.
func (g *TokenGate) join(ctx context.Context, f *flight) (Identity, error) {
	g.metrics.lookups.WithLabelValues("joined").Inc()
	select {
	case <-f.done:
		return f.id, f.err
	case <-ctx.Done():
		return Identity{}, coded(fmt.Errorf("waiting for the token's review: %w", ctx.Err()))
	}
}

// coded gives a TokenReviewer's error its gRPC code and reason: a refusal
// of the token (UNAUTHENTICATED), or a failure to review it (UNAVAILABLE:
// the apiserver's, not the caller's).
func coded(err error) error {
	if errors.Is(err, errUnauthenticated) {
		return &refusal{code: codes.Unauthenticated, reason: "unauthenticated", msg: err.Error()}
	}
	return &refusal{code: codes.Unavailable, reason: "review_failed", msg: "checking the token: " + err.Error()}
}

// stillThere admits a cached review's identity if its pod is still in the
// pod cache with its UID; else it forgets the review.
func (g *TokenGate) stillThere(ctx context.Context, key [sha256.Size]byte, id Identity) (Identity, error) {
	err := g.reviewer.checkPod(ctx, id.Namespace, id.Pod, id.PodUID)
	if err == nil {
		return id, nil
	}
	if !errors.Is(err, errUnauthenticated) {
		return Identity{}, coded(err)
	}
	g.mu.Lock()
	g.valid.Remove(key)
	g.metrics.entries.WithLabelValues("valid").Set(float64(g.valid.Len()))
	g.mu.Unlock()
	return Identity{}, &refusal{code: codes.Unauthenticated, reason: reasonPodGone,
		msg: fmt.Sprintf("the token's pod is gone (%s): %v", reasonPodGone, err)}
}

// peerIP is the caller's IP address, the key of its rate bucket (its port
// changes with every connection).
func peerIP(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	if tcp, ok := p.Addr.(*net.TCPAddr); ok {
		return tcp.IP.String()
	}
	if host, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
		return host
	}
	return p.Addr.String()
}

type gateMetrics struct {
	reviews   *prometheus.CounterVec
	lookups   *prometheus.CounterVec
	entries   *prometheus.GaugeVec
	evictions *prometheus.CounterVec
}

func newGateMetrics(reg prometheus.Registerer) (*gateMetrics, error) {
	m := &gateMetrics{
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weighstation_operator_xds_tokenreviews_total",
			Help: "TokenReviews the xDS server sent to the apiserver, by result (authenticated, unauthenticated, error)."}, []string{"result"}),
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weighstation_operator_xds_token_cache_lookups_total",
			Help: "Tokens that passed the local checks, by what the cache had: hit (a valid review), refused_hit (a refusal), joined (a review in flight), miss."}, []string{"result"}),
		entries: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weighstation_operator_xds_token_cache_entries",
			Help: "Token reviews remembered, by cache (valid, refused)."}, []string{"cache"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weighstation_operator_xds_token_cache_evictions_total",
			Help: "Token reviews forgotten for room (-xds-token-cache-size), by cache."}, []string{"cache"}),
	}
	for _, r := range []string{"authenticated", "unauthenticated", "error"} {
		m.reviews.WithLabelValues(r)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.reviews, m.lookups, m.entries, m.evictions} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func earliest(t time.Time, more ...time.Time) time.Time {
	for _, u := range more {
		if u.Before(t) {
			t = u
		}
	}
	return t
}
