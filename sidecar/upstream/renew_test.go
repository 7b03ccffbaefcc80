package upstream_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/sidecar/upstream"
)

// counted records how often each sequence number arrived.
type counted struct {
	mu       sync.Mutex
	times    map[int64]int
	sentinel chan struct{}
}

func newCounted() *counted {
	return &counted{times: map[int64]int{}, sentinel: make(chan struct{})}
}

func (c *counted) take(data []byte) {
	if len(data) == 0 {
		close(c.sentinel)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.times[int64(binary.BigEndian.Uint64(data))]++
}

func (c *counted) arrived() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, k := range c.times {
		n += k
	}
	return n
}

// check returns the sequence numbers below n that never arrived, and how
// many arrived more than once (each extra arrival counted).
func (c *counted) check(n int64) (missing []int64, extra int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for seq := range n {
		switch k := c.times[seq]; {
		case k == 0:
			missing = append(missing, seq)
		case k > 1:
			extra += k - 1
		}
	}
	return missing, extra
}

// TestRenewLosesNothing: under a steady stream from another client to a
// subject the Client subscribes to, and a steady stream of the Client's
// own publishes, Renew moves the Client to a new connection five times:
// no message is lost either way; what arrived twice is within what was
// counted as possible duplicates (a queue group sees none, the broker
// picks one connection); the Client's publishes arrive in order, none
// twice; subscriptions made during a renewal hold on the new connection;
// nothing was taken for a reconnection or counted in doubt. (A renewal
// was a reconnection: the messages routed between the two connections
// were lost.)
func TestRenewLosesNothing(t *testing.T) {
	for _, tt := range []struct {
		name, queue string
	}{
		{"subscription", ""},
		{"queue group", "workers"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			broker := natstest.StartBroker(t, nil)
			var renewedLogs atomic.Int64
			up := natstest.DialUpstream(t, broker.ClientURL(), func(o *upstream.Options) {
				o.Log = funcr.New(func(_, args string) {
					if strings.Contains(args, "renewed the connection to the broker") && strings.Contains(args, `"duplicates"=`) {
						renewedLogs.Add(1)
					}
				}, funcr.Options{})
			})
			in := newCounted()
			up.Subscribe("ticks", tt.queue, func(m *upstream.Msg) { in.take(m.Payload) })
			if err := up.Flush(5 * time.Second); err != nil {
				t.Fatal(err)
			}
			out := newSequenced(-2) // its end is known once the publisher stops
			outSentinel := make(chan struct{})
			subscribeUnbounded(t, broker, "out", func(m *nats.Msg) {
				if len(m.Data) == 0 {
					close(outSentinel)
					return
				}
				out.take(m.Data)
			})

			// Another client's steady stream to the Client, and the
			// Client's own, until the renewals are done.
			pub := natstest.Connect(t, broker.ClientURL())
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var sentIn, sentOut int64
			errs := make(chan error, 2)
			wg.Add(2)
			go func() {
				defer wg.Done()
				for ; ; sentIn++ {
					select {
					case <-stop:
						return
					default:
					}
					if err := pub.Publish("ticks", message(sentIn, 16)); err != nil {
						errs <- err
						return
					}
					if sentIn%50 == 49 { // paced by the broker's round trip
						if err := pub.FlushTimeout(5 * time.Second); err != nil {
							errs <- err
							return
						}
					}
				}
			}()
			go func() {
				defer wg.Done()
				for ; ; sentOut++ {
					select {
					case <-stop:
						return
					default:
					}
					if err := up.Publish([]byte("out"), nil, nil, nil, message(sentOut, 16)); err != nil {
						errs <- fmt.Errorf("publish %d: %w", sentOut, err)
						return
					}
					up.WriteQueued()
					if sentOut%50 == 49 {
						if err := up.Flush(5 * time.Second); err != nil {
							errs <- fmt.Errorf("flush after %d: %w", sentOut, err)
							return
						}
					}
				}
			}()

			const renewals = 5
			for i := range renewals {
				// Some traffic before each renewal, so that every one
				// overlaps the streams.
				arrived := in.arrived()
				natstest.WaitFor(t, "messages to the Client", func() bool { return in.arrived() >= arrived+200 })
				late := fmt.Sprintf("late.%d", i)
				lateGot := make(chan struct{}, 1)
				subscribed := make(chan struct{})
				go func() { // a subscription made while the renewal runs
					defer close(subscribed)
					up.Subscribe(late, tt.queue, func(*upstream.Msg) {
						select {
						case lateGot <- struct{}{}:
						default:
						}
					})
				}()
				if err := up.Renew(errors.New("a test renewal")); err != nil {
					t.Fatalf("renewal %d: %v", i, err)
				}
				<-subscribed
				if err := up.Flush(5 * time.Second); err != nil {
					t.Fatalf("flush after renewal %d: %v", i, err)
				}
				if err := pub.Publish(late, nil); err != nil {
					t.Fatal(err)
				}
				select {
				case <-lateGot:
				case <-time.After(10 * time.Second):
					t.Fatalf("renewal %d: a subscription made during it received nothing within 10s", i)
				}
			}
			close(stop)
			wg.Wait()
			select {
			case err := <-errs:
				t.Fatal(err)
			default:
			}

			// The sentinels follow every message of each stream.
			if err := pub.Publish("ticks", nil); err != nil {
				t.Fatal(err)
			}
			if err := up.Publish([]byte("out"), nil, nil, nil, nil); err != nil {
				t.Fatal(err)
			}
			up.WriteQueued()
			for _, s := range []struct {
				what string
				ch   chan struct{}
			}{{"to the Client", in.sentinel}, {"from the Client", outSentinel}} {
				select {
				case <-s.ch:
				case <-time.After(30 * time.Second):
					t.Fatalf("the sentinel %s did not arrive within 30s", s.what)
				}
			}
			missing, extra := in.check(sentIn)
			dups := up.Duplicates()
			out.mu.Lock()
			outReceived, outBad := out.received, out.bad
			out.mu.Unlock()
			t.Logf("%d renewals: to the Client %d sent, %d lost, %d arrived twice, %d counted as possible duplicates; from the Client %d sent, %d arrived",
				renewals, sentIn, len(missing), extra, dups, sentOut, outReceived)
			if len(missing) > 0 {
				t.Errorf("%d of %d messages to the Client lost across the renewals, the first %d", len(missing), sentIn, missing[0])
			}
			if uint64(extra) > dups {
				t.Errorf("%d messages arrived twice, but only %d were counted as possible duplicates", extra, dups)
			}
			if tt.queue != "" && extra > 0 {
				t.Errorf("a queue group's messages arrived twice (%d)", extra)
			}
			if outBad != nil {
				t.Errorf("the Client's publishes: %v", outBad)
			}
			if int64(outReceived) != sentOut {
				t.Errorf("%d of the Client's %d publishes arrived", outReceived, sentOut)
			}
			if up.Reconnects() != 0 || up.InDoubt() != 0 || up.Unsent() != 0 {
				t.Errorf("reconnects %d, in doubt %d, unsent %d: want none", up.Reconnects(), up.InDoubt(), up.Unsent())
			}
			if n := renewedLogs.Load(); n != renewals {
				t.Errorf("%d renewals logged with their duplicates, want %d", n, renewals)
			}
		})
	}
}

// TestARefusedRenewalKeepsTheConnection: when the new connection fails
// (the broker refuses the renewed credential, or any further connection),
// Renew says why and the old connection serves on: messages still go both
// ways through it, and nothing counts as a reconnection.
func TestARefusedRenewalKeepsTheConnection(t *testing.T) {
	user, _ := nkeys.CreateUser()
	public, _ := user.PublicKey()
	other, _ := nkeys.CreateUser()
	for _, tt := range []struct {
		name   string
		broker *server.Options
		// wrong makes the credential wrong from the renewal on.
		wrong bool
		want  string
	}{
		{"the broker refuses the renewed credential", &server.Options{Nkeys: []*server.NkeyUser{{Nkey: public}}}, true, "authorization violation"},
		{"the broker takes no further connection", &server.Options{Nkeys: []*server.NkeyUser{{Nkey: public}}, MaxConn: 1}, false, "maximum connections exceeded"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			broker := natstest.StartBroker(t, tt.broker)
			var wrong atomic.Bool
			up := natstest.DialUpstream(t, broker.ClientURL(), func(o *upstream.Options) {
				o.Credentials = upstream.Credentials{NkeyPublic: public, Sign: func(nonce []byte) ([]byte, error) {
					if wrong.Load() {
						return other.Sign(nonce) // not the key the broker knows
					}
					return user.Sign(nonce)
				}}
			})
			if !up.Connected() {
				t.Fatal("not connected")
			}
			got := make(chan string, 10)
			up.Subscribe("echo", "", func(m *upstream.Msg) { got <- string(m.Payload) })
			roundTrip := func(what string) {
				t.Helper()
				if err := up.Publish([]byte("echo"), nil, nil, nil, []byte(what)); err != nil {
					t.Fatal(err)
				}
				up.WriteQueued()
				select {
				case m := <-got:
					if m != what {
						t.Fatalf("got %q, want %q", m, what)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("%q did not come back within 10s", what)
				}
			}
			roundTrip("before")
			wrong.Store(tt.wrong)
			err := up.Renew(errors.New("a test renewal"))
			if err == nil || !strings.Contains(strings.ToLower(err.Error()), tt.want) {
				t.Fatalf("Renew returned %v, want an error naming %q", err, tt.want)
			}
			roundTrip("after")
			if !up.Connected() || up.Reconnects() != 0 || up.Duplicates() != 0 {
				t.Fatalf("connected %v, reconnects %d, duplicates %d: want the old connection, untouched", up.Connected(), up.Reconnects(), up.Duplicates())
			}
		})
	}
}

// TestRenewWithoutAConnection: a closed client refuses; one that is not
// connected has nothing to move (its next connection uses the current
// credential).
func TestRenewWithoutAConnection(t *testing.T) {
	up := natstest.DialUpstream(t, natstest.FreeAddr(t))
	if err := up.Renew(nil); err != nil {
		t.Fatalf("renewing while the broker is away: %v, want nil", err)
	}
	up.Close()
	if err := up.Renew(nil); !errors.Is(err, upstream.ErrClosed) {
		t.Fatalf("renewing a closed client: %v, want ErrClosed", err)
	}
}
