package xdsclient_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar/xdsclient"
)

// Configurations of these tests, by their size limit: the old leader's,
// and the new leader's after a change made during the failover.
const before, after = 1000, 2000

// slack is what a bound allows beyond the options' worst case: a dial and
// a response on loopback, and a busy machine's scheduling under -race.
const slack = time.Second

// measureFor is how long a test that missed its bound goes on waiting, to
// say how late the configuration came (or that it did not).
const measureFor = 90 * time.Second

// runClient runs a client and returns the size limits of the configurations
// it applies, in order.
func runClient(t *testing.T, opts xdsclient.Options) <-chan int64 {
	t.Helper()
	ch := make(chan int64, 16)
	opts.Namespace, opts.Pod = testNamespace, testPod
	opts.TokenFile = tokenFile(t)
	opts.Log = testr.New(t)
	opts.Apply = func(cfg meshconfig.PodConfig) error {
		select {
		case ch <- cfg.Default.MaxMessageBytes:
		default:
		}
		return nil
	}
	c, err := xdsclient.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of its context's end")
		}
	})
	return ch
}

// waitApplied waits for the configuration of size limit want, at most
// within, and then on to measureFor to tell how late it is: it returns how
// long it took, and false for late or never.
func waitApplied(t *testing.T, ch <-chan int64, want int64, within time.Duration) (time.Duration, bool) {
	t.Helper()
	start := time.Now()
	deadline := time.NewTimer(measureFor)
	defer deadline.Stop()
	for {
		select {
		case got := <-ch:
			if got == want {
				took := time.Since(start)
				return took, took <= within
			}
		case <-deadline.C:
			return measureFor, false
		}
	}
}

// failover is the leader's pod deleted behind the operator's Service, as
// a node showed it: the sidecar's stream to the old leader ends, its
// dials are refused while the old leader stops, then get no answer at all
// while the Service still routes to the old pod's IP, and then, just after
// one more such dial began, reach the new leader, which serves a
// configuration changed meanwhile.
type failover struct {
	// refused and blackholed are how many of the sidecar's dials each
	// phase lasts: each failed dial grows its backoff, which is what a
	// long outage did to it on the node.
	refused, blackholed int
	// bound is the longest the sidecar may take to apply the new
	// configuration once the new leader is reachable.
	bound time.Duration
}

func (f failover) run(t *testing.T, sw *switchboard, applied <-chan int64) {
	t.Helper()
	old := startOperator(t, sw.set(serve), before)
	if took, ok := waitApplied(t, applied, before, 10*time.Second); !ok {
		t.Fatalf("the first configuration: not applied within 10s (%s)", took)
	}
	refusedBefore, heldBefore := sw.dials()
	refuseStart := time.Now()
	sw.set(refuse)
	old.gs.Stop() // as the stopping operator's xDS server does
	natstest.WaitFor(t, fmt.Sprintf("%d dials of the sidecar refused", f.refused), func() bool {
		refused, _ := sw.dials()
		return refused-refusedBefore >= f.refused
	})
	refused := time.Since(refuseStart).Round(time.Millisecond)
	holeStart := time.Now()
	sw.set(blackhole)
	natstest.WaitFor(t, fmt.Sprintf("%d dials of the sidecar unanswered", f.blackholed), func() bool {
		_, held := sw.dials()
		return held-heldBefore >= f.blackholed
	})
	// The worst moment for the new leader to arrive: just after the
	// sidecar began a dial that nothing answers.
	if !sw.nextHeld(measureFor) {
		t.Fatalf("no dial of the sidecar reached the dead endpoint within %s after %d of them", measureFor, f.blackholed)
	}
	blackholed := time.Since(holeStart).Round(time.Millisecond)
	startOperator(t, sw.set(serve), after)
	took, ok := waitApplied(t, applied, after, f.bound)
	if !ok {
		t.Fatalf("after %s of refusals and %s of dials that nothing answered, the new leader's configuration came %s after it was reachable; want at most %s",
			refused, blackholed, took.Round(time.Millisecond), f.bound)
	}
	t.Logf("after %s of refusals and %s of dials that nothing answered, the new leader's configuration came %s after it was reachable (bound %s)",
		refused, blackholed, took.Round(time.Millisecond), f.bound)
}

// reconnectBound is the longest a client with these limits takes to be
// served once the operator is reachable again: a dial in flight into the
// dead endpoint runs out (gRPC gives it max(DialTimeout, its backoff)),
// then the connection's backoff (at most RedialMaxBackoff), then one dial and
// one response.
func reconnectBound(dialTimeout, maxBackoff time.Duration) time.Duration {
	return max(dialTimeout, maxBackoff) + maxBackoff + slack
}

// TestFailoverWithTheDefaults is the node's case with the sidecar's own
// setup: the defaults, and one connection from Dial shared by its streams.
// Before the dial timeout and the shorter backoffs, the sidecar came back
// tens of seconds after the new leader served.
func TestFailoverWithTheDefaults(t *testing.T) {
	t.Parallel()
	sw := newSwitchboard(t)
	conn, err := xdsclient.Dial(sw.addr(), insecure.NewCredentials())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	applied := runClient(t, xdsclient.Options{Address: sw.addr(), Conn: conn})
	failover{
		refused: 4, blackholed: 1,
		bound: reconnectBound(xdsclient.DefaultDialTimeout, xdsclient.DefaultRedialMaxBackoff),
	}.run(t, sw, applied)
}

// TestFailoverWithinTheOptions: the limits are the options', on the
// connection the client dials itself.
func TestFailoverWithinTheOptions(t *testing.T) {
	t.Parallel()
	sw := newSwitchboard(t)
	opts := xdsclient.Options{
		Address: sw.addr(), Credentials: insecure.NewCredentials(),
		InitialBackoff: 20 * time.Millisecond, MaxBackoff: 300 * time.Millisecond, DialTimeout: 500 * time.Millisecond,
	}
	applied := runClient(t, opts)
	failover{
		refused: 4, blackholed: 2,
		bound: reconnectBound(opts.DialTimeout, opts.MaxBackoff),
	}.run(t, sw, applied)
}

// TestVanishedOperatorIsGivenUp: an operator that stops answering without
// closing the connection (its node lost) is given up after the keepalive
// ping goes unanswered, and the sidecar reaches the new leader behind the
// same address.
func TestVanishedOperatorIsGivenUp(t *testing.T) {
	t.Parallel()
	sw := newSwitchboard(t)
	opts := xdsclient.Options{
		Address: sw.addr(), Credentials: insecure.NewCredentials(),
		MaxBackoff: 300 * time.Millisecond, DialTimeout: 500 * time.Millisecond,
		KeepaliveTime: xdsclient.MinKeepaliveTime, KeepaliveTimeout: time.Second,
	}
	applied := runClient(t, opts)
	startOperator(t, sw.set(serve), before)
	if took, ok := waitApplied(t, applied, before, 10*time.Second); !ok {
		t.Fatalf("the first configuration: not applied within 10s (%s)", took)
	}
	vanished := time.Now()
	sw.freeze()
	startOperator(t, sw.set(serve), after)
	bound := opts.KeepaliveTime + opts.KeepaliveTimeout + reconnectBound(opts.DialTimeout, opts.MaxBackoff)
	took, ok := waitApplied(t, applied, after, bound)
	if !ok {
		t.Fatalf("the new leader's configuration came %s after the old one vanished; want at most %s", took, bound)
	}
	t.Logf("the new leader's configuration came %s after the old one vanished (bound %s)", time.Since(vanished).Round(time.Millisecond), bound)
}
