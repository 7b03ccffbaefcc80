package sidecar

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/meshconfig"
)

// recordingHost is a killSwitchHost that records what it was asked to
// apply, and says a pending count for every policy.
type recordingHost struct {
	mu      sync.Mutex
	applied []string
	pending int64
}

func (h *recordingHost) applyKill(policy string, killed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	verb := "release "
	if killed {
		verb = "kill "
	}
	h.applied = append(h.applied, verb+policy)
}

func (h *recordingHost) pendingByPolicy() map[string]int64 {
	return map[string]int64{"x": h.pending}
}

// TestATickDoesNotJudgeARemovedSubscription: a breakers' tick that began
// before a configuration removed Subscription x (it loaded the switches,
// then swept the request table) judges the switches in force when it takes
// the board's lock, not x: tripped then, x's SUBs would stay killed, with
// no switch left to release them.
func TestATickDoesNotJudgeARemovedSubscription(t *testing.T) {
	host := &recordingHost{pending: 100} // over x's bound: a judged x trips
	requests := newAnswerable()
	k := newKillSwitches(host, requests, time.Hour, logr.Discard())
	x := meshconfig.SubscriptionPolicy{Name: "x", Subject: "x.>",
		Limits: meshconfig.Limits{MaxPendingMessages: 10_000, MaxPendingBytes: 32 << 20, Overflow: "DropNewest"}}
	x.KillSwitch.Auto = &meshconfig.AutoKillSwitch{MaxPendingMessages: 10, MaxLatencyMillis: 1000, WindowMillis: 1000, CooldownMillis: 1000}
	k.Sync([]meshconfig.SubscriptionPolicy{x})
	ks := (*k.byPolicy.Load())["x"]
	// A request waits for x's reply, so the tick's sweep asks x's bound,
	// under x's lock: holding it stops the tick there, after it loaded the
	// switches and before it takes the board's lock.
	requests.delivered("_INBOX.a.b", "x", nanotime())
	ks.mu.Lock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.evaluate(time.Now())
	}()
	natstest.WaitFor(t, "the tick to hold the request table", func() bool {
		if requests.mu.TryLock() {
			requests.mu.Unlock()
			return false
		}
		return true
	})
	// x leaves the configuration: on a goroutine of its own, since Sync
	// takes the board's lock, which ranks before x's (lockorder.go).
	synced := make(chan struct{})
	go func() {
		defer close(synced)
		k.Sync(nil)
	}()
	<-synced
	ks.mu.Unlock()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the tick did not end")
	}
	host.mu.Lock()
	defer host.mu.Unlock()
	if slices.Contains(host.applied, "kill x") {
		t.Fatalf("the tick killed Subscription x after the configuration removed it (applied: %v)", host.applied)
	}
}

// TestBreakerTransitionsOutliveAutoTurnedOffAndOn: the transition counts,
// exported as Prometheus counters, go on from where they were when a
// Subscription's automatic switch is turned off and on again (they started
// over, and a counter went backwards).
func TestBreakerTransitionsOutliveAutoTurnedOffAndOn(t *testing.T) {
	host := &recordingHost{pending: 100}
	k := newKillSwitches(host, newAnswerable(), time.Hour, logr.Discard())
	manual := meshconfig.SubscriptionPolicy{Name: "x", Subject: "x.>",
		Limits: meshconfig.Limits{MaxPendingMessages: 10_000, MaxPendingBytes: 32 << 20, Overflow: "DropNewest"}}
	auto := manual
	auto.KillSwitch.Auto = &meshconfig.AutoKillSwitch{MaxPendingMessages: 10, CooldownMillis: 1000}
	k.Sync([]meshconfig.SubscriptionPolicy{auto})
	k.evaluate(time.Now()) // 100 pending, over 10: it trips
	if n := k.Status()["x"].Transitions["closed->open"]; n != 1 {
		t.Fatalf("closed->open %d times, want 1", n)
	}
	k.Sync([]meshconfig.SubscriptionPolicy{manual})
	k.Sync([]meshconfig.SubscriptionPolicy{auto})
	if n := k.Status()["x"].Transitions["closed->open"]; n != 1 {
		t.Fatalf("after auto was turned off and on, closed->open %d times, want still 1", n)
	}
	k.evaluate(time.Now()) // and trips again
	if n := k.Status()["x"].Transitions["closed->open"]; n != 2 {
		t.Fatalf("closed->open %d times, want 2", n)
	}
}
