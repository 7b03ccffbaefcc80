package xds_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"google.golang.org/grpc/credentials/insecure"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/weighstation/weighstation/cmd/weighstation-sidecar/sidecarapp"
	"github.com/weighstation/weighstation/controllers/xds"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/meshconfig/xdsresource"
	"github.com/weighstation/weighstation/sidecar/xdsclient"
)

// tokens is an Authenticator over a fixed table. The real one, a
// TokenReview against the apiserver, is exercised by the envtest suites;
// these tests are about the protocol.
type tokens map[string]xds.Identity

func (t tokens) Authenticate(_ context.Context, token string) (xds.Identity, error) {
	id, ok := t[token]
	if !ok {
		return xds.Identity{}, errors.New("unknown token")
	}
	return id, nil
}

func podConfig(ns, pod string, engaged bool) meshconfig.PodConfig {
	cfg := meshconfig.DefaultConfig(meshconfig.DefaultPolicy)
	cfg.Namespace, cfg.Pod = ns, pod
	cfg.Topics = []meshconfig.TopicPolicy{{Name: "orders", Subject: "orders.>", MaxMessageBytes: 1024, MayPublish: true, StampHeader: true}}
	cfg.Subscriptions = []meshconfig.SubscriptionPolicy{{
		Name: "billing", Subject: "orders.*", QueueGroup: "billing",
		KillSwitch: meshconfig.KillSwitch{Engaged: engaged, Reason: "test"},
		Limits:     meshconfig.Limits{MaxPendingMessages: 10, MaxPendingBytes: 1 << 20, Overflow: "DropNewest"},
	}}
	cfg.Version, _ = meshconfig.Hash(cfg)
	return cfg
}

// jwt returns an unsigned token whose only claim is exp: the server reads
// the expiry from the token, since a TokenReview does not report it.
func jwt(exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"none"}`)) + "." + enc([]byte(fmt.Sprintf(`{"exp":%d}`, exp.Unix()))) + ".sig"
}

type rig struct {
	t       *testing.T
	pub     *xds.Publisher
	tracker *xds.Tracker
	addr    string
	cancel  context.CancelFunc
	done    chan error
}

func startServer(t *testing.T, pub *xds.Publisher, tracker *xds.Tracker, auth xds.Authenticator, listen string, now func() time.Time) *rig {
	t.Helper()
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	srv := xds.NewServer(pub, tracker, xds.Options{Listen: listen, Authenticator: auth, Now: now, Log: testr.New(t)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	waitCtx, waitCancel := context.WithTimeout(ctx, 10*time.Second)
	defer waitCancel()
	addr, err := srv.Addr(waitCtx)
	if err != nil {
		t.Fatalf("the server did not listen: %v", err)
	}
	r := &rig{t: t, pub: pub, tracker: tracker, addr: addr.String(), cancel: cancel, done: done}
	t.Cleanup(r.stop)
	return r
}

func (r *rig) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			r.t.Errorf("server: %v", err)
		}
	case <-time.After(10 * time.Second):
		r.t.Error("the server did not stop within 10s")
	}
}

// sidecar is a client with a recording apply function: the operator-facing
// half of a sidecar, assembled as the sidecar command assembles it
// (sidecarapp.NewOperatorLink), in plain text.
type sidecar struct {
	client *xdsclient.Client
	mu     sync.Mutex
	got    []meshconfig.PodConfig
	refuse error
}

func startSidecar(t *testing.T, addr, ns, pod, uid, token string) *sidecar {
	t.Helper()
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &sidecar{}
	link, err := sidecarapp.NewOperatorLink(sidecarapp.LinkOptions{
		XDS: xdsclient.Options{
			Address: addr, Namespace: ns, Pod: pod, PodUID: uid, TokenFile: file,
			Credentials: insecure.NewCredentials(), Apply: s.apply,
			InitialBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Log: logr.Discard(),
		},
		Log: logr.Discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	s.client = link.XDS
	link.Start(context.Background())
	t.Cleanup(func() {
		closed := make(chan struct{})
		go func() { defer close(closed); link.Close() }()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Error("the client did not stop within 10s")
		}
	})
	return s
}

func (s *sidecar) apply(cfg meshconfig.PodConfig) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refuse != nil {
		return s.refuse
	}
	s.got = append(s.got, cfg)
	return nil
}

func (s *sidecar) applied() []meshconfig.PodConfig {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]meshconfig.PodConfig(nil), s.got...)
}

func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s: %v", what, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// configuredSidecar serves shop/billing-0's configuration to one sidecar
// and waits until it applied it.
func configuredSidecar(t *testing.T) (*xds.Publisher, *xds.Tracker, *sidecar) {
	t.Helper()
	pub, tracker := newPublisher(t), xds.NewTracker()
	pub.Set(podConfig("shop", "billing-0", false), "uid-1")
	pub.MarkSynced()
	r := startServer(t, pub, tracker, tokens{"t1": {Namespace: "shop", Pod: "billing-0", PodUID: "uid-1", Expiry: time.Now().Add(time.Hour)}}, "", nil)
	s := startSidecar(t, r.addr, "shop", "billing-0", "uid-1", "t1")
	eventually(t, "the first configuration is applied", func() error {
		if len(s.applied()) != 1 {
			return errors.New("not yet")
		}
		return nil
	})
	return pub, tracker, s
}

func newPublisher(t *testing.T) *xds.Publisher {
	return xds.NewPublisher(testr.New(t), nil)
}

func TestConfigurationReachesTheSidecarAndIsAcknowledged(t *testing.T) {
	tracker := xds.NewTracker()
	pub := xds.NewPublisher(testr.New(t), tracker)
	want := podConfig("shop", "billing-0", false)
	pub.Set(want, "uid-1")
	pub.MarkSynced()
	exp := time.Now().Add(time.Hour)
	r := startServer(t, pub, tracker, tokens{"t1": {Namespace: "shop", Pod: "billing-0", PodUID: "uid-1", Expiry: exp}}, "", nil)
	s := startSidecar(t, r.addr, "shop", "billing-0", "uid-1", "t1")

	eventually(t, "the configuration is applied", func() error {
		if got := s.applied(); len(got) != 1 || got[0].Version != want.Version {
			return fmt.Errorf("applied %d configurations, want version %s", len(got), want.Version)
		}
		return nil
	})
	subName := xdsresource.SubscriptionName("shop", "billing")
	res, _ := pub.Current(subName)
	eventually(t, "the subscription's version is acknowledged", func() error {
		if got := tracker.Acked(xds.PodKey("shop", "billing-0", "uid-1"), subName); got != xds.Version(res) {
			return fmt.Errorf("acked %q, want %q", got, xds.Version(res))
		}
		return nil
	})

	// The kill switch: one shared resource changes, and only it is resent.
	// Propagation's times come from the publisher (served) and the tracker
	// (applied): served before the ACK, applied at it.
	firstApplied := tracker.LastApplied(subName)
	engaged := podConfig("shop", "billing-0", true)
	if !pub.Set(engaged, "uid-1") {
		t.Fatal("engaging the kill switch changed nothing")
	}
	served, ok := pub.ChangedAt(subName)
	if !ok || !served.After(firstApplied) {
		t.Fatalf("served at %v (known %v), want after the first version's ACK at %v", served, ok, firstApplied)
	}
	eventually(t, "the kill switch is applied", func() error {
		got := s.applied()
		if last := got[len(got)-1]; last.Version != engaged.Version || !last.Subscriptions[0].KillSwitch.Engaged {
			return fmt.Errorf("last applied %s, want %s", last.Version, engaged.Version)
		}
		return nil
	})
	eventually(t, "the ACK of the engaged version is timed", func() error {
		if applied := tracker.LastApplied(subName); !applied.After(served) {
			return fmt.Errorf("last applied at %v, want after it was served at %v", applied, served)
		}
		return nil
	})
	// An unchanged configuration pushes nothing.
	if pub.Set(engaged, "uid-1") {
		t.Fatal("setting the same configuration reported a change")
	}
	// A resource that no pod is served any more is forgotten.
	pub.Delete(k8stypes.NamespacedName{Namespace: "shop", Name: "billing-0"})
	if applied := tracker.LastApplied(subName); !applied.IsZero() {
		t.Fatalf("a removed resource was last applied at %v, want forgotten", applied)
	}
}

func TestRefusedConfigurationIsRecordedAndNotResent(t *testing.T) {
	pub, tracker, s := configuredSidecar(t)
	s.mu.Lock()
	s.refuse = errors.New("limits.maxPendingMessages: over this sidecar's budget")
	s.mu.Unlock()
	pub.Set(podConfig("shop", "billing-0", true), "uid-1")
	subName := xdsresource.SubscriptionName("shop", "billing")
	eventually(t, "the NACK is recorded with its reason", func() error {
		n, ok := tracker.NACKs(subName)[xds.PodKey("shop", "billing-0", "uid-1")]
		if !ok || !strings.Contains(n.Reason, "over this sidecar's budget") {
			return fmt.Errorf("NACKs %+v", tracker.NACKs(subName))
		}
		return nil
	})
	if got := s.client.Stats().Refused; got != 1 {
		t.Fatalf("refused %d times, want 1: the operator must not resend a refused version", got)
	}
	if v := s.client.Version(); v != podConfig("shop", "billing-0", false).Version {
		t.Fatalf("the sidecar holds %s, want the last good version", v)
	}
	// A fixed version is applied and clears the NACK.
	s.mu.Lock()
	s.refuse = nil
	s.mu.Unlock()
	fixed := podConfig("shop", "billing-0", true)
	fixed.Subscriptions[0].KillSwitch.Reason = "fixed"
	fixed.Version, _ = meshconfig.Hash(fixed)
	pub.Set(fixed, "uid-1")
	eventually(t, "the fixed version is applied and the NACK cleared", func() error {
		if s.client.Version() != fixed.Version || len(tracker.NACKs(subName)) != 0 {
			return fmt.Errorf("version %s, NACKs %v", s.client.Version(), tracker.NACKs(subName))
		}
		return nil
	})
	// Sentinel: a later change still arrives, so the stream kept working
	// and the refused version was never resent in between.
	if got := s.client.Stats().Refused; got != 1 {
		t.Fatalf("refused %d times, want 1", got)
	}
}

func TestStreamsAreRefusedUntilEveryPodIsComputed(t *testing.T) {
	pub, tracker := newPublisher(t), xds.NewTracker()
	r := startServer(t, pub, tracker, tokens{"t1": {Namespace: "shop", Pod: "billing-0", PodUID: "uid-1", Expiry: time.Now().Add(time.Hour)}}, "", nil)
	s := startSidecar(t, r.addr, "shop", "billing-0", "uid-1", "t1")
	eventually(t, "the refusal is seen", func() error {
		if !strings.Contains(s.client.Stats().LastError, "does not serve configuration now") {
			return fmt.Errorf("last error %q", s.client.Stats().LastError)
		}
		return nil
	})
	want := podConfig("shop", "billing-0", false)
	pub.Set(want, "uid-1")
	pub.MarkSynced()
	eventually(t, "the configuration arrives once the operator is synced", func() error {
		if s.client.Version() != want.Version {
			return fmt.Errorf("version %q", s.client.Version())
		}
		return nil
	})
}

func TestOperatorRestartChangesNoSidecarVersion(t *testing.T) {
	listen := "127.0.0.1:0"
	auth := tokens{"t1": {Namespace: "shop", Pod: "billing-0", PodUID: "uid-1", Expiry: time.Now().Add(time.Hour)}}
	pub := newPublisher(t)
	want := podConfig("shop", "billing-0", false)
	pub.Set(want, "uid-1")
	pub.MarkSynced()
	r := startServer(t, pub, xds.NewTracker(), auth, listen, nil)
	addr := r.addr
	s := startSidecar(t, addr, "shop", "billing-0", "uid-1", "t1")
	eventually(t, "configured", func() error {
		if s.client.Version() != want.Version {
			return errors.New("not yet")
		}
		return nil
	})
	r.stop()
	// The new operator starts empty and is not synced: the sidecar is
	// refused, and keeps what it has.
	pub2, tracker2 := newPublisher(t), xds.NewTracker()
	startServer(t, pub2, tracker2, auth, addr, nil)
	eventually(t, "the sidecar is refused by the unsynced operator", func() error {
		if !strings.Contains(s.client.Stats().LastError, "does not serve configuration now") {
			return fmt.Errorf("last error %q", s.client.Stats().LastError)
		}
		return nil
	})
	pub2.Set(want, "uid-1")
	pub2.MarkSynced()
	subName := xdsresource.SubscriptionName("shop", "billing")
	if got := s.client.Stats().Applied; got != 1 {
		t.Fatalf("applied %d", got)
	}
	// The new operator learns what the sidecar holds from its report at
	// reconnection, without sending anything.
	topicName := xdsresource.TopicName("shop", "orders")
	eventually(t, "the new operator knows what the sidecar holds", func() error {
		for _, name := range []string{subName, topicName, xdsresource.PodResourceName("shop", "billing-0")} {
			res, _ := pub2.Current(name)
			if got := tracker2.Acked(xds.PodKey("shop", "billing-0", "uid-1"), name); got != xds.Version(res) {
				return fmt.Errorf("%s: acked %q, want %q", name, got, xds.Version(res))
			}
		}
		return nil
	})
	// Sentinel: a change made after the reconnection arrives, so every
	// response of the reconnection was processed before it.
	engaged := podConfig("shop", "billing-0", true)
	pub2.Set(engaged, "uid-1")
	eventually(t, "a later change arrives", func() error {
		if s.client.Version() != engaged.Version {
			return fmt.Errorf("version %s", s.client.Version())
		}
		return nil
	})
	got := s.applied()
	if len(got) != 2 || got[0].Version != want.Version || got[1].Version != engaged.Version {
		var versions []string
		for _, c := range got {
			versions = append(versions, c.Version)
		}
		t.Fatalf("applied versions %v: the restart must apply nothing", versions)
	}
	res, _ := pub2.Current(subName)
	if tracker2.Acked(xds.PodKey("shop", "billing-0", "uid-1"), subName) != xds.Version(res) {
		t.Fatal("the new operator does not know what the sidecar holds")
	}
}

func TestTokenExpiryEndsTheStream(t *testing.T) {
	pub := newPublisher(t)
	want := podConfig("shop", "billing-0", false)
	pub.Set(want, "uid-1")
	pub.MarkSynced()
	// Kubernetes issues tokens for at least 10 minutes; the clock is moved
	// instead, so that the token expires 300 ms after the stream opens.
	exp := time.Now().Add(time.Hour)
	// Only the first stream's clock is moved: the sidecar's reconnection
	// is admitted, and it must have learned why the first one ended.
	var calls atomic.Int32
	now := func() time.Time {
		if calls.Add(1) == 1 {
			return exp.Add(-300 * time.Millisecond)
		}
		return time.Now()
	}
	r := startServer(t, pub, xds.NewTracker(), tokens{"t1": {Namespace: "shop", Pod: "billing-0", PodUID: "uid-1", Expiry: exp}}, "", now)
	s := startSidecar(t, r.addr, "shop", "billing-0", "uid-1", "t1")
	eventually(t, "the expired stream ends with its reason and the sidecar reconnects", func() error {
		st := s.client.Stats()
		if st.Connects < 2 || !st.Connected || !strings.Contains(st.LastError, "expired") {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	if len(s.applied()) != 1 {
		t.Fatalf("applied %d configurations, want 1: an expired stream must not change the configuration", len(s.applied()))
	}
}

func TestAPodReadsOnlyItsOwnConfiguration(t *testing.T) {
	pub := newPublisher(t)
	pub.Set(podConfig("shop", "billing-0", false), "uid-1")
	pub.Set(podConfig("shop", "billing-1", false), "uid-2")
	pub.Set(podConfig("other", "billing-0", false), "uid-3")
	pub.MarkSynced()
	auth := tokens{"t1": {Namespace: "shop", Pod: "billing-0", PodUID: "uid-1", Expiry: time.Now().Add(time.Hour)}}
	r := startServer(t, pub, xds.NewTracker(), auth, "", nil)
	tests := []struct {
		name, ns, pod, token, wantErr string
	}{
		{name: "another pod's name", ns: "shop", pod: "billing-1", token: "t1", wantErr: `node ID "shop/billing-1" does not match the token's pod "shop/billing-0"`},
		{name: "the same pod name in another namespace", ns: "other", pod: "billing-0", token: "t1", wantErr: `node ID "other/billing-0" does not match`},
		{name: "another pod's token", ns: "shop", pod: "billing-0", token: "stolen", wantErr: "unknown token"},
		{name: "no token", ns: "shop", pod: "billing-0", token: " ", wantErr: "no bearer token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := startSidecar(t, r.addr, tc.ns, tc.pod, "", tc.token)
			eventually(t, "the stream is refused", func() error {
				if !strings.Contains(s.client.Stats().LastError, tc.wantErr) {
					return fmt.Errorf("last error %q, want %q", s.client.Stats().LastError, tc.wantErr)
				}
				return nil
			})
			if len(s.applied()) != 0 {
				t.Fatal("a refused sidecar received a configuration")
			}
			// A refused stream is not progress: the sidecar backs off
			// (20 ms doubling to 200 ms here), even when the refusal comes
			// after the stream was admitted. Without backoff it would
			// reconnect every few milliseconds.
			start, before := time.Now(), s.client.Stats().Connects
			eventually(t, "a second passes", func() error {
				if time.Since(start) < time.Second {
					return errors.New("not yet")
				}
				return nil
			})
			if n := s.client.Stats().Connects - before; n > 15 {
				t.Fatalf("%d connects in a second: no backoff", n)
			}
		})
	}
}

var _ = k8stypes.UID("")

// TestAnACKAfterARefusalRecordsWhatIsHeld: after a refused update, a later
// response is applied with everything received, the refused resource
// included; the ACK records all of it and clears the refusal.
func TestAnACKAfterARefusalRecordsWhatIsHeld(t *testing.T) {
	pub, tracker, s := configuredSidecar(t)
	s.mu.Lock()
	s.refuse = errors.New("not now")
	s.mu.Unlock()
	refused := podConfig("shop", "billing-0", false)
	refused.Topics[0].MaxMessageBytes = 2048
	refused.Version, _ = meshconfig.Hash(refused)
	pub.Set(refused, "uid-1")
	topicName := xdsresource.TopicName("shop", "orders")
	eventually(t, "the topic's refusal is recorded", func() error {
		if _, ok := tracker.NACKs(topicName)[xds.PodKey("shop", "billing-0", "uid-1")]; !ok {
			return errors.New("no NACK")
		}
		return nil
	})
	s.mu.Lock()
	s.refuse = nil
	s.mu.Unlock()
	// A change to the pod's own resource only.
	later := refused
	later.Access.InboxPrefix = "billing"
	later.Version, _ = meshconfig.Hash(later)
	pub.Set(later, "uid-1")
	eventually(t, "applied with the topic received earlier", func() error {
		if v := s.client.Version(); v != later.Version {
			return fmt.Errorf("version %s, want %s", v, later.Version)
		}
		return nil
	})
	res, _ := pub.Current(topicName)
	eventually(t, "the ACK records the topic and clears its refusal", func() error {
		if got := tracker.Acked(xds.PodKey("shop", "billing-0", "uid-1"), topicName); got != xds.Version(res) || len(tracker.NACKs(topicName)) != 0 {
			return fmt.Errorf("acked %q (want %q), NACKs %v", got, xds.Version(res), tracker.NACKs(topicName))
		}
		return nil
	})
}

// TestARecreatedPodsOldStreamIsRefused: a pod re-created under the same
// name has a new UID; the old incarnation's stream may not acknowledge for
// it.
func TestARecreatedPodsOldStreamIsRefused(t *testing.T) {
	pub, tracker, s := configuredSidecar(t)
	pub.Set(podConfig("shop", "billing-0", true), "uid-2")
	eventually(t, "the old incarnation is refused", func() error {
		if st := s.client.Stats(); !strings.Contains(st.LastError, "was re-created") {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	if got := tracker.Acked(xds.PodKey("shop", "billing-0", "uid-2"), "shop/billing-0"); got != "" {
		t.Fatalf("the new pod is counted with the old one's ACK %q", got)
	}
}
