// Package brokercred holds the sidecar's broker credential, which it asks
// the operator for over its xDS connection (the operator's BrokerCredentials
// service, behind the same authentication as the xDS stream), and presents
// it to the broker.
//
// The credential stays in this process's memory: it is never written to a
// file, so the pod's other containers, which share its volumes but not its
// memory, cannot read it.
//
// It expires, and allows only what the pod's policy allows, as the
// operator judged it when it issued it: Maintain renews it at two thirds
// of its lifetime, when the broker refuses it (revoked, expired), and when
// a configuration needs more than it allows (WaitCovers), and has the
// broker connection move to each new one (nats-server reads permissions
// and expiry at CONNECT only).
package brokercred

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar/upstream"
)

// ErrNotYet is what the broker connection sees until the credential
// arrives: the connection then retries, as it does while the broker is down, and
// the sidecar's outage buffer holds the application's publishes.
var ErrNotYet = errors.New("the broker credential has not arrived from the operator yet")

// Backoff bounds the waits between two requests that failed (the operator
// restarting, not the leader yet): from the first to the last, doubling.
const (
	FirstBackoff = 100 * time.Millisecond
	MaxBackoff   = 5 * time.Second
)

type credential struct {
	jwt string
	key nkeys.KeyPair
	// inboxPrefix is the inbox space the broker lets it subscribe under.
	inboxPrefix string
	// issued and expires bound its validity (expires zero: never).
	issued, expires time.Time
	// bound is what its permissions allow, as the JWT says.
	bound meshconfig.BrokerBound
}

// Holder holds the credential. Its zero value holds none.
type Holder struct {
	cred atomic.Pointer[credential]
	// renewNow asks Maintain for a new credential before its time: the
	// broker refused the current one, or the configuration needs a wider
	// bound.
	renewNow chan string
	renewals atomic.Uint64

	mu sync.Mutex
	// renewed is closed and replaced after each renewal's switch.
	renewed chan struct{}
}

// New returns a Holder with no credential.
func New() *Holder { return &Holder{renewNow: make(chan string, 1), renewed: make(chan struct{})} }

// InboxPrefix is the inbox space of the credential ("" before it
// arrives).
func (h *Holder) InboxPrefix() string {
	if c := h.cred.Load(); c != nil {
		return c.inboxPrefix
	}
	return ""
}

// Renewals is how many credentials the sidecar received after its first.
func (h *Holder) Renewals() uint64 { return h.renewals.Load() }

// Renew asks for a new credential now, for reason (logged); asks made
// before a renewal completes are answered by it.
func (h *Holder) Renew(reason string) {
	select {
	case h.renewNow <- reason:
	default:
	}
}

// Covers reports whether the credential allows what cfg needs, so that a
// configuration that widens the pod's subject set waits for a credential
// that allows it (Renew). Without a credential yet it reports true: the
// first one is issued for the current configuration.
func (h *Holder) Covers(cfg meshconfig.PodConfig) bool {
	c := h.cred.Load()
	if c == nil {
		return true
	}
	if cfg.Access.Mode == meshconfig.AccessAudit {
		// An audit-mode pod's bound is its namespace's, which the sidecar
		// does not know: the broker refuses what it does not allow, and
		// the sidecar counts it.
		return true
	}
	return c.bound.Covers(meshconfig.BrokerBoundOf(cfg, c.inboxPrefix, nil))
}

// Credentials present the credential on each connection attempt. The
// sidecar connects before its credential arrives, as it does before the
// broker is reachable: until then an attempt fails with ErrNotYet and is
// retried, and the outage buffer holds the application's publishes.
func (h *Holder) Credentials() upstream.Credentials {
	return upstream.Credentials{UserJWT: h.UserJWT, Sign: h.Sign}
}

// UserJWT is the credential's user JWT, or ErrNotYet.
func (h *Holder) UserJWT() (string, error) {
	c := h.cred.Load()
	if c == nil {
		return "", ErrNotYet
	}
	return c.jwt, nil
}

// Sign signs a broker's nonce with the credential's key, or fails with
// ErrNotYet.
func (h *Holder) Sign(nonce []byte) ([]byte, error) {
	c := h.cred.Load()
	if c == nil {
		return nil, ErrNotYet
	}
	return c.key.Sign(nonce)
}

// set checks and stores a credential from the operator.
func (h *Holder) set(resp *xdsv1.BrokerCredential) error {
	if resp.GetUserJwt() == "" {
		return errors.New("the operator sent an empty user JWT")
	}
	key, err := nkeys.FromSeed(resp.GetUserSeed())
	if err != nil {
		return fmt.Errorf("the operator sent a user seed that is not one: %w", err)
	}
	claims, err := jwt.DecodeUserClaims(resp.GetUserJwt())
	if err != nil {
		return fmt.Errorf("the operator sent a user JWT that does not decode: %w", err)
	}
	c := &credential{jwt: resp.GetUserJwt(), key: key, inboxPrefix: resp.GetInboxPrefix(), issued: time.Unix(claims.IssuedAt, 0),
		bound: meshconfig.BrokerBound{PublishAllow: claims.Pub.Allow, PublishDeny: claims.Pub.Deny, SubscribeAllow: claims.Sub.Allow, MaxPayload: claims.Limits.Payload}}
	if claims.Expires > 0 {
		c.expires = time.Unix(claims.Expires, 0)
	}
	h.cred.Store(c)
	return nil
}

// renewAt is when the credential is renewed: two thirds into its
// lifetime, as the kubelet renews projected tokens at 80%, leaving a
// third for an operator that is away for a while. Zero: never.
func (c *credential) renewAt() time.Time {
	if c.expires.IsZero() {
		return time.Time{}
	}
	return c.issued.Add(c.expires.Sub(c.issued) * 2 / 3)
}

// Maintain fetches the credential (Fetch), then renews it before it
// expires, when the broker refuses it, and when Renew asks, until ctx
// ends. After each renewal it calls switched, which moves the broker
// connection to the new credential. A renewal that fails is retried
// with backoff; the current credential serves until it expires.
func (h *Holder) Maintain(ctx context.Context, conn grpc.ClientConnInterface, tokenFile, podUID string, switched func(), log logr.Logger) error {
	if err := h.fetch(ctx, conn, tokenFile, podUID, false, log); err != nil {
		return err
	}
	var lastRenewal time.Time
	for {
		c := h.cred.Load()
		var timer <-chan time.Time
		if at := c.renewAt(); !at.IsZero() {
			timer = time.After(time.Until(at))
		}
		reason := "it expires at " + c.expires.UTC().Format(time.RFC3339)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer:
		case reason = <-h.renewNow:
		}
		// A broker that keeps refusing would ask at every reconnection
		// attempt: at most one renewal per MinRenewInterval.
		if wait := MinRenewInterval - time.Since(lastRenewal); wait > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
		}
		log.Info("renewing the broker credential", "reason", reason)
		if err := h.fetch(ctx, conn, tokenFile, podUID, true, log); err != nil {
			return err
		}
		lastRenewal = time.Now()
		// Counted before the switch, so that whoever sees the switch
		// sees the count.
		h.renewals.Add(1)
		// Asks that arrived while this renewal waited or ran (the old
		// connection's refusals, say) are answered by it.
		select {
		case <-h.renewNow:
		default:
		}
		if switched != nil {
			switched()
		}
		h.notifyRenewed()
	}
}

// MinRenewInterval is the least time between two renewals.
const MinRenewInterval = time.Second

func (h *Holder) notifyRenewed() {
	h.mu.Lock()
	close(h.renewed)
	h.renewed = make(chan struct{})
	h.mu.Unlock()
}

// WaitCovers returns once the credential allows what cfg needs, asking for
// a renewal when it does not, or after timeout; it reports whether it
// does. A configuration that widens the pod's subject set then reaches
// the sidecar once its broker connection has moved to the wider
// credential (the switch runs before the renewal is announced).
func (h *Holder) WaitCovers(ctx context.Context, cfg meshconfig.PodConfig, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for {
		h.mu.Lock()
		renewed := h.renewed
		h.mu.Unlock()
		if h.Covers(cfg) {
			return true
		}
		h.Renew("the configuration needs subjects the current credential does not allow")
		select {
		case <-renewed:
		case <-deadline:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// Fetch asks the operator on conn for the credential of the pod with
// podUID, presenting the token in tokenFile (read at each attempt: the
// kubelet refreshes it), and retries with backoff until it gets one or
// ctx ends.
func (h *Holder) Fetch(ctx context.Context, conn grpc.ClientConnInterface, tokenFile, podUID string, log logr.Logger) error {
	return h.fetch(ctx, conn, tokenFile, podUID, false, log)
}

func (h *Holder) fetch(ctx context.Context, conn grpc.ClientConnInterface, tokenFile, podUID string, renewal bool, log logr.Logger) error {
	client := xdsv1.NewBrokerCredentialsClient(conn)
	wait := FirstBackoff
	for {
		err := h.fetchOnce(ctx, client, tokenFile, podUID, renewal)
		if err == nil {
			c := h.cred.Load()
			log.Info("received the broker credential from the operator", "renewal", renewal, "expires", c.expires, "inboxPrefix", c.inboxPrefix)
			return nil
		}
		log.Info("asking the operator for the broker credential", "code", status.Code(err).String(), "reason", err.Error(), "retryIn", wait.String())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, MaxBackoff)
	}
}

func (h *Holder) fetchOnce(ctx context.Context, client xdsv1.BrokerCredentialsClient, tokenFile, podUID string, renewal bool) error {
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		return fmt.Errorf("reading the identity token: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := client.Issue(ctx, &xdsv1.IssueBrokerCredentialRequest{PodUid: podUID, Renewal: renewal})
	if err != nil {
		return err
	}
	return h.set(resp)
}
