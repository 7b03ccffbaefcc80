package brokercreds

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// claimsUpdateSubject is where nats-server takes an account's new JWT
// from its system account (nats-server's accUpdateEventSubjNew). Every
// broker of a cluster subscribes to it, so one publish reaches them all.
const claimsUpdateSubject = "$SYS.REQ.ACCOUNT.%s.CLAIMS.UPDATE"

// pushTimeout is how long a push waits for a broker's answer.
const pushTimeout = 5 * time.Second

// Pusher is the operator's connection to the brokers, as a user of the
// system account, over which it pushes the account's JWT.
type Pusher struct {
	nc      *nats.Conn
	account string
	log     logr.Logger

	mu   sync.Mutex
	last string // the JWT last pushed, pushed again after a reconnect
}

// DialPusher connects to the brokers at url as the system user of keys.
// It returns at once and keeps connecting in the background while the
// brokers are unreachable.
func DialPusher(url string, keys Keys, log logr.Logger) (*Pusher, error) {
	user, err := keys.SystemUser("weighstation-operator")
	if err != nil {
		return nil, err
	}
	seed, err := nkeys.FromSeed(user.Seed)
	if err != nil {
		return nil, fmt.Errorf("the system user's seed: %w", err)
	}
	p := &Pusher{account: publicKey(keys.Account), log: log}
	nc, err := nats.Connect(url,
		nats.Name("weighstation-operator"),
		nats.UserJWT(func() (string, error) { return user.JWT, nil }, seed.Sign),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		// A broker that restarted read the trust ConfigMap, which may lag
		// behind the last push (the kubelet refreshes mounted ConfigMaps
		// within a minute or so): push again whenever the connection
		// comes back.
		nats.ConnectHandler(func(*nats.Conn) { go p.repush() }),
		nats.ReconnectHandler(func(*nats.Conn) { go p.repush() }),
		nats.IgnoreAuthErrorAbort(),
	)
	if err != nil {
		return nil, fmt.Errorf("connecting to the brokers at %s: %w", url, err)
	}
	p.nc = nc
	return p, nil
}

// Close closes the connection.
func (p *Pusher) Close() { p.nc.Close() }

// Push sends accountJWT to the brokers and waits for one to apply it.
func (p *Pusher) Push(ctx context.Context, accountJWT string) error {
	p.mu.Lock()
	p.last = accountJWT
	p.mu.Unlock()
	return p.push(ctx, accountJWT)
}

func (p *Pusher) repush() {
	p.mu.Lock()
	last := p.last
	p.mu.Unlock()
	if last == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), pushTimeout)
	defer cancel()
	if err := p.push(ctx, last); err != nil {
		p.log.Error(err, "pushing the account JWT again after reconnecting to the brokers")
	}
}

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

func (p *Pusher) push(ctx context.Context, accountJWT string) error {
	ctx, cancel := context.WithTimeout(ctx, pushTimeout)
	defer cancel()
	msg, err := p.nc.RequestWithContext(ctx, fmt.Sprintf(claimsUpdateSubject, p.account), []byte(accountJWT))
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
	if resp.Data.Message == "jwt update skipped" {
		// The broker did not have the account loaded: it would admit
		// with the JWT it read at start (broker.Trust.LoadAccount
		// prevents it).
		return fmt.Errorf("a broker skipped the account JWT update (account %s not loaded)", p.account)
	}
	p.log.V(1).Info("pushed the account JWT", "answer", resp.Data.Message)
	return nil
}
