package xds_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/controllers/xds"
)

const testAudience = "weighstation.io/xds"

// fakeAPI is an apiserver's TokenReview (a table of the tokens it
// accepts, each review counted) and the operator's pod cache (a table of
// pods' UIDs). The real apiserver's is in reviewtest.
type fakeAPI struct {
	mu      sync.Mutex
	valid   map[string]bool
	pods    map[k8stypes.NamespacedName]string
	reviews atomic.Int64
	// block, when set, holds every review until it is closed.
	block chan struct{}
}

func newFakeAPI() *fakeAPI {
	return &fakeAPI{valid: map[string]bool{}, pods: map[k8stypes.NamespacedName]string{}}
}

func (f *fakeAPI) setPod(ns, name, uid string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := k8stypes.NamespacedName{Namespace: ns, Name: name}
	if uid == "" {
		delete(f.pods, key)
		return
	}
	f.pods[key] = uid
}

// Get implements client.Reader for pods' metadata.
func (f *fakeAPI) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	f.mu.Lock()
	uid, ok := f.pods[key]
	f.mu.Unlock()
	if !ok {
		return apierrors.NewNotFound(corev1.Resource("pods"), key.Name)
	}
	obj.SetName(key.Name)
	obj.SetNamespace(key.Namespace)
	obj.SetUID(k8stypes.UID(uid))
	return nil
}

func (f *fakeAPI) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("not implemented")
}

// reviewer is a TokenReviewer whose TokenReviews this fakeAPI answers:
// a token it was told is valid is of the pod its claims name.
func (f *fakeAPI) reviewer() xds.TokenReviewer {
	return xds.TokenReviewer{Client: reviewClient{f: f}, Pods: f, Audience: testAudience}
}

// reviewClient answers TokenReviews alone (any other call panics on the
// nil Client).
type reviewClient struct {
	client.Client
	f *fakeAPI
}

func (c reviewClient) Create(_ context.Context, obj client.Object, _ ...client.CreateOption) error {
	f := c.f
	tr, ok := obj.(*authenticationv1.TokenReview)
	if !ok {
		return fmt.Errorf("unexpected create of %T", obj)
	}
	f.reviews.Add(1)
	if f.block != nil {
		<-f.block
	}
	f.mu.Lock()
	valid := f.valid[tr.Spec.Token]
	f.mu.Unlock()
	if !valid {
		tr.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token, square/go-jose: error in cryptographic primitive"}
		return nil
	}
	cl := claimsOf(tr.Spec.Token)
	tr.Status = authenticationv1.TokenReviewStatus{
		Authenticated: true, Audiences: cl.Aud,
		User: authenticationv1.UserInfo{Username: "system:serviceaccount:" + cl.K8s.Namespace + ":default", Extra: map[string]authenticationv1.ExtraValue{
			"authentication.kubernetes.io/pod-name": {cl.K8s.Pod.Name}, "authentication.kubernetes.io/pod-uid": {cl.K8s.Pod.UID},
		}},
	}
	return nil
}

// claims are the claims of the tokens the tests make.
type claims struct {
	Aud any         `json:"aud,omitempty"`
	Exp int64       `json:"exp,omitempty"`
	Nbf int64       `json:"nbf,omitempty"`
	Jti string      `json:"jti,omitempty"`
	K8s *podBinding `json:"kubernetes.io,omitempty"`
}

// podBinding is the kubernetes.io claim of a pod-bound token.
type podBinding struct {
	Namespace string `json:"namespace,omitempty"`
	Pod       *struct {
		Name string `json:"name,omitempty"`
		UID  string `json:"uid,omitempty"`
	} `json:"pod,omitempty"`
}

func claimsOf(token string) (c struct {
	Aud []string `json:"aud"`
	K8s struct {
		Namespace string `json:"namespace"`
		Pod       struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"pod"`
	} `json:"kubernetes.io"`
}) {
	b, _ := base64.RawURLEncoding.DecodeString(strings.Split(token, ".")[1])
	_ = json.Unmarshal(b, &c)
	return c
}

// podClaims are the claims of a projected token of pod ns/name (uid),
// expiring at exp; jti makes each token distinct.
func podClaims(ns, name, uid string, exp time.Time, jti string) claims {
	c := claims{Aud: []string{testAudience}, Exp: exp.Unix(), Nbf: exp.Add(-time.Hour).Unix(), Jti: jti}
	c.K8s = &podBinding{Namespace: ns}
	c.K8s.Pod = &struct {
		Name string `json:"name,omitempty"`
		UID  string `json:"uid,omitempty"`
	}{Name: name, UID: uid}
	return c
}

// signed encodes c as a JWT with header h and a made-up signature: the
// fake apiserver decides validity by its table, not the signature.
func signed(h string, c any) string {
	enc := base64.RawURLEncoding.EncodeToString
	b, err := json.Marshal(c)
	if err != nil {
		panic(err)
	}
	return enc([]byte(h)) + "." + enc(b) + "." + enc([]byte("not a signature"))
}

func podToken(ns, name, uid string, exp time.Time, jti string) string {
	return signed(`{"alg":"RS256","kid":"k1"}`, podClaims(ns, name, uid, exp, jti))
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fromPeer is a call's context from ip.
func fromPeer(ip string) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}})
}

type gateRig struct {
	api  *fakeAPI
	gate *xds.TokenGate
	clk  *fakeClock
	reg  *prometheus.Registry
}

// newGate returns a gate on a fake API that serves pod shop/billing-0
// (uid-1), at a fake clock.
func newGate(t *testing.T, limits xds.ReviewLimits) *gateRig {
	t.Helper()
	r := &gateRig{api: newFakeAPI(), clk: &fakeClock{now: time.Unix(1_800_000_000, 0)}, reg: prometheus.NewRegistry()}
	r.api.setPod("shop", "billing-0", "uid-1")
	var err error
	r.gate, err = xds.NewTokenGate(r.api.reviewer(), limits, r.clk.Now, r.reg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *gateRig) validToken(jti string) string {
	tok := podToken("shop", "billing-0", "uid-1", r.clk.Now().Add(time.Hour), jti)
	r.api.mu.Lock()
	r.api.valid[tok] = true
	r.api.mu.Unlock()
	return tok
}

func (r *gateRig) reviews(result string) float64 {
	return metricValue(r.reg, "weighstation_operator_xds_tokenreviews_total", result)
}

// metricValue reads the series of a registry's counter or gauge that has
// label value label (0 when there is none).
func metricValue(reg *prometheus.Registry, name, label string) float64 {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

// wantRefusal checks err's gRPC code and that its message names want.
func wantRefusal(t *testing.T, err error, code codes.Code, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("admitted, want %s naming %q", code, want)
	}
	if got := status.Code(err); got != code {
		t.Fatalf("refused %s (%v), want %s", got, err, code)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("refusal %q does not name %q", err, want)
	}
}

// Every token that is not a pod-bound token for the audience, valid now,
// of a pod the operator serves, is refused without a TokenReview, with a
// message naming the check.
func TestTokensAreCheckedBeforeAnyReview(t *testing.T) {
	r := newGate(t, xds.DefaultReviewLimits)
	now := r.clk.Now()
	exp := now.Add(time.Hour)
	enc := base64.RawURLEncoding.EncodeToString
	good := podClaims("shop", "billing-0", "uid-1", exp, "x")
	with := func(f func(*claims)) claims { c := good; f(&c); return c }
	unbound := with(func(c *claims) { c.K8s = nil })
	noUID := podClaims("shop", "billing-0", "", exp, "x")
	tests := []struct {
		name, token, want string
		admitted          bool
	}{
		{name: "not a JWT", token: "opaque-token", want: "token_shape"},
		{name: "two parts", token: "a.b", want: "not a JWT: 2"},
		{name: "four parts", token: "a.b.c.d", want: "not a JWT: 4"},
		{name: "an empty signature", token: enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(`{}`)) + ".", want: "signature is empty"},
		{name: "a header that is not base64url", token: "@@@." + enc([]byte(`{}`)) + ".c2ln", want: "header is not base64url"},
		{name: "a header that is not JSON", token: enc([]byte(`alg`)) + "." + enc([]byte(`{}`)) + ".c2ln", want: "header is not JSON"},
		{name: "alg none", token: signed(`{"alg":"none"}`, good), want: "no signing algorithm"},
		{name: "claims that are not JSON", token: enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(`{`)) + ".c2ln", want: "claims are not JSON"},
		{name: "a signature that is not base64url", token: enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(`{}`)) + ".!!", want: "signature is not base64url"},
		{name: "another audience", token: signed(`{"alg":"RS256"}`, with(func(c *claims) { c.Aud = []string{"https://kubernetes.default.svc"} })), want: "token_audience"},
		{name: "no audience", token: signed(`{"alg":"RS256"}`, with(func(c *claims) { c.Aud = nil })), want: "token_audience"},
		{name: "no expiry", token: signed(`{"alg":"RS256"}`, with(func(c *claims) { c.Exp = 0 })), want: "no expiry"},
		{name: "expired now, at the second", token: signed(`{"alg":"RS256"}`, with(func(c *claims) { c.Exp = now.Unix() })), want: "token_expired"},
		{name: "not valid for more than the skew", token: signed(`{"alg":"RS256"}`, with(func(c *claims) { c.Nbf = now.Add(xds.TokenClockSkew + time.Second).Unix() })), want: "token_not_yet_valid"},
		{name: "not bound to a pod", token: signed(`{"alg":"RS256"}`, unbound), want: "token_not_pod_bound"},
		{name: "bound to a pod without its UID", token: signed(`{"alg":"RS256"}`, noUID), want: "token_not_pod_bound"},
		{name: "a pod the operator does not serve", token: podToken("shop", "billing-9", "uid-9", exp, "x"), want: "token_pod_unknown"},
		{name: "a pod of another UID", token: podToken("shop", "billing-0", "uid-0", exp, "x"), want: "token_pod_unknown"},
		{name: "longer than MaxTokenBytes", token: podToken("shop", "billing-0", "uid-1", exp, strings.Repeat("j", xds.MaxTokenBytes)), want: "more than the 16384"},
		// The edges that pass the local checks, and go to a review, which
		// refuses them (the fake apiserver was told of none).
		{name: "aud as one string", token: signed(`{"alg":"RS256"}`, with(func(c *claims) { c.Aud = testAudience })), want: "not accepted"},
		{name: "expiring a second from now", token: signed(`{"alg":"RS256"}`, with(func(c *claims) { c.Exp = now.Unix() + 1 })), want: "not accepted"},
		{name: "valid from the skew on", token: signed(`{"alg":"RS256"}`, with(func(c *claims) { c.Nbf = now.Add(xds.TokenClockSkew).Unix() })), want: "not accepted"},
	}
	reviewed := int64(0)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := r.api.reviews.Load()
			_, err := r.gate.Authenticate(fromPeer(fmt.Sprintf("10.0.0.%d", reviewed%200+1)), tc.token)
			wantRefusal(t, err, codes.Unauthenticated, tc.want)
			reviews := r.api.reviews.Load() - before
			if local := !strings.Contains(tc.want, "not accepted"); local && reviews != 0 {
				t.Fatalf("%d TokenReviews for a token refused locally", reviews)
			} else if !local && reviews != 1 {
				t.Fatalf("%d TokenReviews, want 1", reviews)
			}
			reviewed += reviews
		})
	}
	if got := r.reviews("unauthenticated"); got != float64(reviewed) {
		t.Errorf("tokenreviews_total{result=unauthenticated} = %g, want %d", got, reviewed)
	}
}

// A valid token is reviewed once, however often and however concurrently
// it is presented, until its expiry or the cache's TTL.
func TestAValidTokenIsReviewedOnce(t *testing.T) {
	limits := xds.DefaultReviewLimits
	limits.CacheTTL = 10 * time.Minute
	r := newGate(t, limits)
	r.api.block = make(chan struct{})
	tok := r.validToken("a")
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := r.gate.Authenticate(fromPeer(fmt.Sprintf("10.0.1.%d", i+1)), tok)
			if err == nil && id.NodeID() != "shop/billing-0" {
				err = fmt.Errorf("identity %s", id.NodeID())
			}
			errs <- err
		}()
	}
	// Every caller is waiting on the one review: one started it, the other
	// 49 joined it (counted before they wait).
	eventually(t, "every caller waits on the one review", func() error {
		if got := metricValue(r.reg, "weighstation_operator_xds_token_cache_lookups_total", "joined"); r.api.reviews.Load() != 1 || got != 49 {
			return fmt.Errorf("%d reviews, %g callers joined", r.api.reviews.Load(), got)
		}
		return nil
	})
	close(r.api.block)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for range 1000 {
		if _, err := r.gate.Authenticate(fromPeer("10.0.2.1"), tok); err != nil {
			t.Fatal(err)
		}
	}
	if n := r.api.reviews.Load(); n != 1 {
		t.Fatalf("%d TokenReviews for one valid token presented 1,050 times, want 1", n)
	}
	// Until the TTL, capped below the token's own expiry.
	r.clk.Advance(limits.CacheTTL - time.Second)
	if _, err := r.gate.Authenticate(fromPeer("10.0.2.1"), tok); err != nil || r.api.reviews.Load() != 1 {
		t.Fatalf("a second before the TTL: %v, %d reviews, want admitted from the cache", err, r.api.reviews.Load())
	}
	r.clk.Advance(time.Second)
	if _, err := r.gate.Authenticate(fromPeer("10.0.2.1"), tok); err != nil || r.api.reviews.Load() != 2 {
		t.Fatalf("at the TTL: %v, %d reviews, want reviewed again", err, r.api.reviews.Load())
	}
}

// A cached token of a pod that was deleted, or re-created under its name,
// is refused at once, without a review.
func TestADeletedPodsCachedTokenIsRefused(t *testing.T) {
	r := newGate(t, xds.DefaultReviewLimits)
	tok := r.validToken("a")
	if _, err := r.gate.Authenticate(fromPeer("10.0.0.1"), tok); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct{ name, uid string }{{"deleted", ""}, {"re-created", "uid-2"}} {
		r.api.setPod("shop", "billing-0", step.uid)
		_, err := r.gate.Authenticate(fromPeer("10.0.0.1"), tok)
		if step.name == "deleted" {
			wantRefusal(t, err, codes.Unauthenticated, "token_pod_gone")
		} else {
			// The cache entry went with the deletion: the claimed pod is
			// refused before any review.
			wantRefusal(t, err, codes.Unauthenticated, "token_pod_unknown")
		}
	}
	if n := r.api.reviews.Load(); n != 1 {
		t.Fatalf("%d TokenReviews, want the first alone", n)
	}
}

// A token the apiserver refused is refused again without a review for a
// minute, then asked about again.
func TestARefusedTokenIsRememberedForAMinute(t *testing.T) {
	r := newGate(t, xds.DefaultReviewLimits)
	bad := podToken("shop", "billing-0", "uid-1", r.clk.Now().Add(time.Hour), "forged")
	_, err := r.gate.Authenticate(fromPeer("10.0.0.1"), bad)
	wantRefusal(t, err, codes.Unauthenticated, "not accepted")
	r.clk.Advance(time.Minute - time.Second)
	_, err = r.gate.Authenticate(fromPeer("10.0.0.1"), bad)
	wantRefusal(t, err, codes.Unauthenticated, "unauthenticated_cached")
	if n := r.api.reviews.Load(); n != 1 {
		t.Fatalf("%d reviews, want 1", n)
	}
	r.clk.Advance(time.Second)
	_, err = r.gate.Authenticate(fromPeer("10.0.0.1"), bad)
	wantRefusal(t, err, codes.Unauthenticated, "not accepted")
	if n := r.api.reviews.Load(); n != 2 {
		t.Fatalf("%d reviews, want 2", n)
	}
}

// The per-peer and global buckets, each at its edge: a burst's worth of
// reviews passes, the next is refused naming the flag, and a refill's
// worth of time lets one more through.
func TestReviewRateLimitsAtTheirEdges(t *testing.T) {
	tests := []struct {
		name   string
		limits xds.ReviewLimits
		peers  int // callers, round robin
		burst  int
		refill time.Duration
		code   codes.Code
		flag   string
	}{
		{"per peer", xds.ReviewLimits{Rate: 1000, Burst: 1000, PeerRate: 2, PeerBurst: 5, CacheSize: 100, CacheTTL: time.Minute},
			1, 5, 500 * time.Millisecond, codes.ResourceExhausted, "-xds-tokenreview-peer-rate"},
		{"global", xds.ReviewLimits{Rate: 4, Burst: 7, PeerRate: 1000, PeerBurst: 1000, CacheSize: 100, CacheTTL: time.Minute},
			50, 7, 250 * time.Millisecond, codes.Unavailable, "-xds-tokenreview-rate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newGate(t, tc.limits)
			exp := r.clk.Now().Add(time.Hour)
			attempt := func(i int) error {
				_, err := r.gate.Authenticate(fromPeer(fmt.Sprintf("10.1.0.%d", i%tc.peers+1)), podToken("shop", "billing-0", "uid-1", exp, fmt.Sprint(i)))
				return err
			}
			for i := range tc.burst {
				wantRefusal(t, attempt(i), codes.Unauthenticated, "not accepted")
			}
			wantRefusal(t, attempt(tc.burst), tc.code, tc.flag)
			r.clk.Advance(tc.refill - time.Millisecond)
			wantRefusal(t, attempt(tc.burst+1), tc.code, tc.flag)
			r.clk.Advance(time.Millisecond)
			wantRefusal(t, attempt(tc.burst+2), codes.Unauthenticated, "not accepted")
			if n := r.api.reviews.Load(); n != int64(tc.burst+1) {
				t.Fatalf("%d reviews, want %d", n, tc.burst+1)
			}
		})
	}
}

// A flood of well-formed tokens of a real pod with bad signatures, from
// many peers, and one valid token replayed: the apiserver sees at most the
// burst plus the rate over the flood's time, and the valid token once.
func TestAFloodCostsAtMostTheRate(t *testing.T) {
	limits := xds.ReviewLimits{Rate: 20, Burst: 40, PeerRate: 1, PeerBurst: 5, CacheSize: 1000, CacheTTL: 10 * time.Minute}
	r := newGate(t, limits)
	valid := r.validToken("valid")
	if _, err := r.gate.Authenticate(fromPeer("10.2.0.1"), valid); err != nil {
		t.Fatal(err)
	}
	const seconds, perSecond = 10, 1000
	exp := r.clk.Now().Add(time.Hour)
	refused := map[codes.Code]int{}
	for s := range seconds {
		for i := range perSecond {
			tok := valid
			if i%10 != 0 {
				tok = podToken("shop", "billing-0", "uid-1", exp, fmt.Sprintf("%d-%d", s, i))
			}
			_, err := r.gate.Authenticate(fromPeer(fmt.Sprintf("10.3.%d.%d", i/250, i%250+1)), tok)
			if tok == valid && err != nil {
				t.Fatalf("the valid token, replayed: %v", err)
			}
			refused[status.Code(err)]++
			r.clk.Advance(time.Second / perSecond)
		}
	}
	maxReviews := int64(1 + float64(limits.Burst) + limits.Rate*seconds)
	if n := r.api.reviews.Load(); n > maxReviews || n < maxReviews-2 {
		t.Fatalf("%d TokenReviews for %d junk tokens over %ds, want at most 1 + burst %d + %g/s × %ds = %d (and about that many)",
			n, seconds*perSecond*9/10, seconds, limits.Burst, limits.Rate, seconds, maxReviews)
	}
	if refused[codes.Unavailable] == 0 || refused[codes.ResourceExhausted] != 0 {
		t.Fatalf("refusals by code %v: want the global limit's UNAVAILABLE (one token per peer per second stays within the peer burst)", refused)
	}
	if got := metricValue(r.reg, "weighstation_operator_xds_token_cache_lookups_total", "hit"); got != seconds*perSecond/10 {
		t.Errorf("cache hits %g, want %d (every replay)", got, seconds*perSecond/10)
	}
}

// The cache holds at most CacheSize reviews: past it the least recently
// used is evicted (and reviewed again when it comes back).
func TestTheTokenCacheIsBounded(t *testing.T) {
	limits := xds.DefaultReviewLimits
	limits.CacheSize = 2
	r := newGate(t, limits)
	a, b, c := r.validToken("a"), r.validToken("b"), r.validToken("c")
	for i, tok := range []string{a, b, a, c, a, b} {
		if _, err := r.gate.Authenticate(fromPeer("10.0.0.1"), tok); err != nil {
			t.Fatalf("token %d: %v", i, err)
		}
	}
	// a, b: reviewed; a: hit; c: reviewed, evicts b; a: hit; b: reviewed
	// again, evicts c.
	if n := r.api.reviews.Load(); n != 4 {
		t.Fatalf("%d reviews, want 4", n)
	}
	if got := metricValue(r.reg, "weighstation_operator_xds_token_cache_entries", "valid"); got != 2 {
		t.Errorf("cache entries %g, want 2", got)
	}
	if got := metricValue(r.reg, "weighstation_operator_xds_token_cache_evictions_total", "valid"); got != 2 {
		t.Errorf("evictions %g, want 2", got)
	}
}

func TestReviewLimitsAreValidated(t *testing.T) {
	d := xds.DefaultReviewLimits
	with := func(f func(*xds.ReviewLimits)) xds.ReviewLimits { l := d; f(&l); return l }
	tests := []struct {
		name   string
		limits xds.ReviewLimits
		want   string
	}{
		{"defaults", d, ""},
		{"the least of each", xds.ReviewLimits{Rate: 0.001, Burst: 1, PeerRate: 0.001, PeerBurst: 1, CacheSize: 1, CacheTTL: time.Nanosecond}, ""},
		{"no rate", with(func(l *xds.ReviewLimits) { l.Rate = 0 }), "-xds-tokenreview-rate"},
		{"no burst", with(func(l *xds.ReviewLimits) { l.Burst = 0 }), "-xds-tokenreview-burst"},
		{"no peer rate", with(func(l *xds.ReviewLimits) { l.PeerRate = 0 }), "-xds-tokenreview-peer-rate"},
		{"no peer burst", with(func(l *xds.ReviewLimits) { l.PeerBurst = 0 }), "-xds-tokenreview-peer-burst"},
		{"no cache", with(func(l *xds.ReviewLimits) { l.CacheSize = 0 }), "-xds-token-cache-size"},
		{"no TTL", with(func(l *xds.ReviewLimits) { l.CacheTTL = 0 }), "-xds-token-cache-ttl"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.limits.Validate()
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate() = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// The gate's refusals reach the caller with their code and the check or
// flag they name, and are counted by reason.
func TestGateRefusalsReachTheCallerAndAreCounted(t *testing.T) {
	limits := xds.DefaultReviewLimits
	limits.PeerBurst = 1
	g := newGate(t, limits)
	reg := prometheus.NewRegistry()
	conn, _ := startWith(t, syncedPublisher(t, podConfig("shop", "billing-0", false)), xds.Options{Authenticator: g.gate, Registerer: reg})
	exp := g.clk.Now().Add(time.Hour)
	tests := []struct {
		token, reason string
		code          codes.Code
		want          string
	}{
		{"junk", "token_shape", codes.Unauthenticated, "not a JWT"},
		{podToken("shop", "billing-0", "uid-1", exp, "forged-1"), "unauthenticated", codes.Unauthenticated, "not accepted"},
		{podToken("shop", "billing-0", "uid-1", exp, "forged-2"), "review_rate_peer", codes.ResourceExhausted, "-xds-tokenreview-peer-rate"},
	}
	for _, tc := range tests {
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tc.token), 10*time.Second)
		st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
		if err == nil {
			_, err = st.Recv()
		}
		cancel()
		wantEnded(t, err, tc.code, tc.want)
		if got := metricValue(reg, "weighstation_operator_xds_refused_total", tc.reason); got != 1 {
			t.Errorf("refused_total{reason=%q} = %g, want 1", tc.reason, got)
		}
	}
}
