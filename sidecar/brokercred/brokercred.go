// Package brokercred holds the sidecar's broker credential, which it asks
// the operator for over its xDS connection (the operator's BrokerCredentials
// service, behind the same authentication as the xDS stream), and presents
// it to the broker.
//
// The credential stays in this process's memory: it is never written to a
// file, so the pod's other containers, which share its volumes but not its
// memory, cannot read it.
package brokercred

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nkeys"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
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
}

// Holder holds the credential. Its zero value holds none.
type Holder struct {
	cred atomic.Pointer[credential]
}

// New returns a Holder with no credential.
func New() *Holder { return &Holder{} }

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
	h.cred.Store(&credential{jwt: resp.GetUserJwt(), key: key})
	return nil
}

// Fetch asks the operator on conn for the credential of the pod with
// podUID, presenting the token in tokenFile (read at each attempt: the
// kubelet refreshes it), and retries with backoff until it gets one or
// ctx ends.
func (h *Holder) Fetch(ctx context.Context, conn grpc.ClientConnInterface, tokenFile, podUID string, log logr.Logger) error {
	client := xdsv1.NewBrokerCredentialsClient(conn)
	wait := FirstBackoff
	for {
		err := h.fetchOnce(ctx, client, tokenFile, podUID)
		if err == nil {
			log.Info("received the broker credential from the operator")
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

func (h *Holder) fetchOnce(ctx context.Context, client xdsv1.BrokerCredentialsClient, tokenFile, podUID string) error {
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		return fmt.Errorf("reading the identity token: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := client.Issue(ctx, &xdsv1.IssueBrokerCredentialRequest{PodUid: podUID})
	if err != nil {
		return err
	}
	return h.set(resp)
}
