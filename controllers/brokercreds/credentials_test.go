package brokercreds

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/weighstation/weighstation/broker"
	"github.com/weighstation/weighstation/internal/natstest"
)

// startTrustingBroker starts a broker that trusts keys, as the chart runs
// it: the trust directory written from Trust's ConfigMap data.
func startTrustingBroker(t *testing.T, keys Keys, revoked map[string]time.Time) *server.Server {
	t.Helper()
	trust, err := keys.Trust(revoked)
	if err != nil {
		t.Fatal(err)
	}
	return natstest.StartTrustingBroker(t, trust.ConfigMapData(), "127.0.0.1:0")
}

func connectWith(url string, c Credential, opts ...nats.Option) (*nats.Conn, error) {
	kp, err := nkeys.FromSeed(c.Seed)
	if err != nil {
		return nil, err
	}
	return nats.Connect(url, append(opts, nats.UserJWT(func() (string, error) { return c.JWT, nil }, kp.Sign))...)
}

func mustKeys(t *testing.T) Keys {
	t.Helper()
	k, err := GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func isAuthorizationViolation(err error) bool {
	return err != nil && strings.Contains(strings.ToLower(err.Error()), "authorization violation")
}

// The broker admits a pod's credential, refuses a client without one, one
// signed by other keys and one whose seed does not match its JWT; after a
// pushed revocation it closes the revoked pod's connection and refuses its
// credential, while another pod's connection carries on.
func TestIssuedCredentialsAndRevocation(t *testing.T) {
	keys := mustKeys(t)
	s := startTrustingBroker(t, keys, nil)
	url := s.ClientURL()

	kept, err := keys.Issue("shop", "orders-0", "uid-kept")
	if err != nil {
		t.Fatal(err)
	}
	doomed, err := keys.Issue("shop", "orders-1", "uid-doomed")
	if err != nil {
		t.Fatal(err)
	}
	keptConn, err := connectWith(url, kept)
	if err != nil {
		t.Fatalf("a sidecar with its issued credential: %v", err)
	}
	defer keptConn.Close()
	// nats.go reports the broker's reason as an asynchronous error, then
	// sees the connection close.
	reason := make(chan error, 1)
	closed := make(chan struct{})
	doomedConn, err := connectWith(url, doomed, nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case reason <- err:
			default:
			}
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		t.Fatalf("a second sidecar with its issued credential: %v", err)
	}
	defer doomedConn.Close()

	if _, err := nats.Connect(url); !isAuthorizationViolation(err) {
		t.Fatalf("a client without a credential: %v, want an authorization violation", err)
	}
	other, err := mustKeys(t).Issue("shop", "orders-0", "uid-kept")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := connectWith(url, other); !isAuthorizationViolation(err) {
		t.Fatalf("a credential from another operator's keys: %v, want an authorization violation", err)
	}
	stolenJWT := doomed
	stolenJWT.Seed = kept.Seed // a JWT without its own seed cannot sign the nonce
	if _, err := connectWith(url, stolenJWT); !isAuthorizationViolation(err) {
		t.Fatalf("a JWT presented with another key's seed: %v, want an authorization violation", err)
	}

	pusher, err := DialPusher(url, keys, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pusher.Close()
	revoked, _, err := DefaultLimits.revoke(nil, []string{doomed.PublicKey}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	trust, err := keys.Trust(revoked)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := pusher.Push(ctx, trust.Account); err != nil {
		t.Fatal(err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked pod's connection was not closed within 10s")
	}
	select {
	case err := <-reason:
		if !strings.Contains(strings.ToLower(err.Error()), "revoked") {
			t.Errorf("the broker closed the revoked pod's connection for %v, want a revocation", err)
		}
	default:
		t.Error("the broker gave no reason for closing the revoked pod's connection")
	}
	if _, err := connectWith(url, doomed); !isAuthorizationViolation(err) {
		t.Fatalf("the revoked credential: %v, want an authorization violation", err)
	}
	// The other pod's connection still carries messages.
	sub, err := keptConn.SubscribeSync("still.here")
	if err != nil {
		t.Fatal(err)
	}
	if err := keptConn.Publish("still.here", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("the pod that was not revoked: %v", err)
	}
	// A credential issued for the pod after the revocation (a request
	// that read the pod just before its deletion) is refused too: the key
	// is the pod's, and the revocation reaches RevocationMargin past the
	// deletion, while nats-server alone refuses only JWTs issued at or
	// before the revocation's second.
	again, err := keys.Issue("shop", "orders-1", "uid-doomed")
	if err != nil {
		t.Fatal(err)
	}
	if again.PublicKey != doomed.PublicKey {
		t.Fatalf("a reissued credential has key %s, want the pod's %s", again.PublicKey, doomed.PublicKey)
	}
	if _, err := connectWith(url, again); !isAuthorizationViolation(err) {
		t.Fatalf("a credential reissued to a revoked pod: %v, want an authorization violation", err)
	}
}

// A broker that starts from a trust directory with the revocation list
// refuses the revoked credential without any push.
func TestABrokerStartsWithTheRevocationsOfItsTrustDirectory(t *testing.T) {
	keys := mustKeys(t)
	gone, err := keys.Issue("shop", "gone", "uid-gone")
	if err != nil {
		t.Fatal(err)
	}
	live, err := keys.Issue("shop", "live", "uid-live")
	if err != nil {
		t.Fatal(err)
	}
	s := startTrustingBroker(t, keys, map[string]time.Time{gone.PublicKey: time.Now()})
	if _, err := connectWith(s.ClientURL(), gone); !isAuthorizationViolation(err) {
		t.Fatalf("a credential revoked in the trust directory: %v, want an authorization violation", err)
	}
	nc, err := connectWith(s.ClientURL(), live)
	if err != nil {
		t.Fatalf("a credential that was not revoked: %v", err)
	}
	nc.Close()
}

func TestUserKeysAreStablePerPodAndDistinctAcrossPodsAndOperators(t *testing.T) {
	keys := mustKeys(t)
	a1, _ := keys.UserKey("uid-a")
	a2, _ := keys.UserKey("uid-a")
	b, _ := keys.UserKey("uid-b")
	other, _ := mustKeys(t).UserKey("uid-a")
	if publicKey(a1) != publicKey(a2) {
		t.Error("one pod's user key differs between two derivations")
	}
	if publicKey(a1) == publicKey(b) || publicKey(a1) == publicKey(other) {
		t.Error("two pods, or two operators, derived the same user key")
	}
	if _, err := keys.UserKey(""); err == nil {
		t.Error("a user key was derived for an empty UID")
	}
}

func TestKeysRoundTripThroughTheSecret(t *testing.T) {
	keys := mustKeys(t)
	data, err := keys.SecretData()
	if err != nil {
		t.Fatal(err)
	}
	parsed, ok, err := ParseKeys(data)
	if err != nil || !ok {
		t.Fatalf("ParseKeys: %v, %v", ok, err)
	}
	want, _ := keys.Issue("ns", "p", "uid")
	got, _ := parsed.Issue("ns", "p", "uid")
	if want.PublicKey != got.PublicKey || publicKey(parsed.Account) != publicKey(keys.Account) {
		t.Error("the keys read back from the Secret differ from those written")
	}

	tests := []struct {
		name   string
		mutate func(map[string][]byte)
		want   string // "" for no keys and no error
	}{
		{"empty", func(d map[string][]byte) { clear(d) }, ""},
		{"one missing", func(d map[string][]byte) { delete(d, SecretAccountKey) }, "but not all"},
		{"account seed where the operator's goes", func(d map[string][]byte) { d[SecretOperatorKey] = d[SecretAccountKey] }, "not a seed of kind"},
		{"garbage seed", func(d map[string][]byte) { d[SecretSystemAccountKey] = []byte("SAnotaseed") }, SecretSystemAccountKey},
		{"short user key secret", func(d map[string][]byte) { d[SecretUserKeySecret] = []byte("short") }, "must be 32 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, _ := keys.SecretData()
			tt.mutate(d)
			_, ok, err := ParseKeys(d)
			if tt.want == "" {
				if err != nil || ok {
					t.Fatalf("got %v, %v; want no keys and no error", ok, err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalidSecret) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want ErrInvalidSecret mentioning %q", err, tt.want)
			}
		})
	}
}

func TestTrustMatchesOnlyItsKeysAndRevocations(t *testing.T) {
	keys := mustKeys(t)
	revoked := map[string]time.Time{"UABC": time.Unix(1000, 0)}
	trust, err := keys.Trust(revoked)
	if err != nil {
		t.Fatal(err)
	}
	if !keys.Matches(trust, revoked) {
		t.Error("a trust does not match the keys and revocations it was signed for")
	}
	if keys.Matches(trust, nil) {
		t.Error("a trust matches a different revocation list")
	}
	if mustKeys(t).Matches(trust, revoked) {
		t.Error("a trust matches another operator's keys")
	}
	got, err := keys.RevokedIn(trust.Account)
	if err != nil || len(got) != 1 || !got["UABC"].Equal(time.Unix(1000, 0)) {
		t.Errorf("RevokedIn = %v, %v; want the list signed", got, err)
	}
	if _, err := mustKeys(t).RevokedIn(trust.Account); err == nil {
		t.Error("another operator's keys read this account's revocation list")
	}
}

func TestRevocationListIsBoundedByRetentionAndCount(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	l := Limits{Retention: time.Hour, MaxEntries: 3}
	list := map[string]time.Time{
		"expired": now.Add(-time.Hour - time.Second),
		"edge":    now.Add(-time.Hour), // exactly at retention: kept
		"older":   now.Add(-30 * time.Minute),
		"newer":   now.Add(-time.Minute),
	}
	got, early, err := l.revoke(list, []string{"fresh"}, now)
	if err != nil {
		t.Fatal(err)
	}
	// expired goes by retention; then four remain for three places, and
	// the oldest (edge) goes early.
	want := []string{"fresh", "newer", "older"}
	if len(got) != len(want) || early != 1 {
		t.Fatalf("got %v (early %d), want %v with 1 dropped early", got, early, want)
	}
	for _, k := range want {
		if _, ok := got[k]; !ok {
			t.Errorf("%s was dropped", k)
		}
	}
	if at := got["fresh"]; !at.Equal(now.Add(RevocationMargin)) {
		t.Errorf("fresh revoked at %s, want RevocationMargin past now (%s)", at, now.Add(RevocationMargin))
	}
	if len(list) != 4 {
		t.Error("revoke changed the list it was given")
	}
	if _, _, err := l.revoke(list, nil, now); !errors.Is(err, errNothingToRevoke) {
		t.Errorf("an empty batch: %v", err)
	}
	for _, bad := range []Limits{{Retention: 0, MaxEntries: 1}, {Retention: time.Hour, MaxEntries: 0}, {Retention: time.Hour, MaxEntries: MaxEntriesLimit + 1}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v was accepted", bad)
		}
	}
	if err := DefaultLimits.Validate(); err != nil {
		t.Error(err)
	}
}

// The largest list the limits allow still fits in a ConfigMap and under
// the broker's default max_payload.
func TestTheLargestRevocationListFits(t *testing.T) {
	keys := mustKeys(t)
	revoked := map[string]time.Time{}
	now := time.Now()
	for i := range MaxEntriesLimit {
		kp, err := keys.UserKey("uid-" + string(rune('a'+i%26)) + time.Duration(i).String())
		if err != nil {
			t.Fatal(err)
		}
		revoked[publicKey(kp)] = now
	}
	trust, err := keys.Trust(revoked)
	if err != nil {
		t.Fatal(err)
	}
	size := 0
	for _, v := range trust.ConfigMapData() {
		size += len(v)
	}
	if size >= 1<<20 || len(trust.Account) >= int(broker.DefaultOptions.MaxPayload) {
		t.Fatalf("%d revocations: ConfigMap data %d bytes, account JWT %d bytes; both must stay under 1 MiB", MaxEntriesLimit, size, len(trust.Account))
	}
	t.Logf("%d revocations: account JWT %d bytes", MaxEntriesLimit, len(trust.Account))
}
