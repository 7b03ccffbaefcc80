package brokercreds

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// claimsUpdateSubject is where nats-server takes an account's new JWT
// from its system account (nats-server's accUpdateEventSubjNew). Every
// broker of a cluster subscribes to it, so one publish reaches them all.
const claimsUpdateSubject = "$SYS.REQ.ACCOUNT.%s.CLAIMS.UPDATE"

// accountLookupSubject is where a broker asks for an account it does not
// hold (nats-server's accLookupReqSubj): at a sidecar's first connection
// to a broker that has not been pushed its namespace's account, a broker
// that restarted, for example. The operator answers as nats-server's
// account servers do.
const accountLookupSubject = "$SYS.REQ.ACCOUNT.*.CLAIMS.LOOKUP"

// pushTimeout is how long a push waits for a broker's answer.
const pushTimeout = 5 * time.Second

// AccountSource is what the Pusher serves: the account JWTs it pushes
// again after a reconnection, and the answers to the brokers' lookups.
type AccountSource interface {
	// Lookup returns the JWT of the account with publicKey, if known.
	Lookup(publicKey string) (string, bool)
	// pushAll pushes every known account.
	pushAll(ctx context.Context)
}

// Pusher is the operator's connection to the brokers, as a user of the
// system account, over which it pushes the namespaces' account JWTs and
// answers the brokers' lookups of them.
type Pusher struct {
	nc  *nats.Conn
	log logr.Logger
}

// DialPusher connects to the brokers at url as the system user of keys,
// serving source. It returns at once and keeps connecting in the
// background while the brokers are unreachable.
func DialPusher(url string, keys Keys, source AccountSource, log logr.Logger) (*Pusher, error) {
	user, err := keys.SystemUser("weighstation-operator")
	if err != nil {
		return nil, err
	}
	seed, err := nkeys.FromSeed(user.Seed)
	if err != nil {
		return nil, fmt.Errorf("the system user's seed: %w", err)
	}
	p := &Pusher{log: log}
	repush := func(*nats.Conn) {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), pushTimeout)
			defer cancel()
			source.pushAll(ctx)
		}()
	}
	nc, err := nats.Connect(url,
		nats.Name("weighstation-operator"),
		nats.UserJWT(func() (string, error) { return user.JWT, nil }, seed.Sign),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		// A broker that restarted lost what it was pushed (unless its
		// peers gave it back): push again whenever the connection comes
		// back.
		nats.ConnectHandler(repush),
		nats.ReconnectHandler(repush),
		nats.IgnoreAuthErrorAbort(),
	)
	if err != nil {
		return nil, fmt.Errorf("connecting to the brokers at %s: %w", url, err)
	}
	// The lookup's subject names the account: $SYS.REQ.ACCOUNT.<key>.CLAIMS.LOOKUP.
	if _, err := nc.Subscribe(accountLookupSubject, func(m *nats.Msg) {
		tokens := strings.Split(m.Subject, ".")
		if len(tokens) != 6 || m.Reply == "" {
			return
		}
		token, ok := source.Lookup(tokens[3])
		if !ok {
			// No answer: a broker waits for its peers', and an empty
			// one would end that wait.
			return
		}
		if err := m.Respond([]byte(token)); err != nil {
			log.Error(err, "answering a broker's account lookup", "account", tokens[3])
		}
	}); err != nil {
		nc.Close()
		return nil, fmt.Errorf("answering the brokers' account lookups: %w", err)
	}
	p.nc = nc
	return p, nil
}

// Close closes the connection.
func (p *Pusher) Close() { p.nc.Close() }

// claimsUpdateResponse is nats-server's answer to an account update.
type claimsUpdateResponse struct {
	Data struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"data"`
	Error *struct {
		Code        int    `json:"code"`
		Description string `json:"description"`
	} `json:"error"`
}

// Push sends an account's JWT to the brokers and waits for one to apply
// it (each broker of a cluster stores it; the others learn it from that
// one's peers or a lookup).
func (p *Pusher) Push(ctx context.Context, account, accountJWT string) error {
	ctx, cancel := context.WithTimeout(ctx, pushTimeout)
	defer cancel()
	msg, err := p.nc.RequestWithContext(ctx, fmt.Sprintf(claimsUpdateSubject, account), []byte(accountJWT))
	if err != nil {
		return fmt.Errorf("pushing the account JWT to the brokers: %w", err)
	}
	var resp claimsUpdateResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("the brokers' answer to the account JWT %q: %w", msg.Data, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("the brokers refused the account JWT: %s (code %d)", resp.Error.Description, resp.Error.Code)
	}
	p.log.V(1).Info("pushed an account JWT", "account", account, "answer", resp.Data.Message)
	return nil
}
