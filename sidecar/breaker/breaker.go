// Package breaker is the automatic kill switch of a non-essential
// subscription: a circuit breaker with named states.
//
//	closed    delivering; trips to open when the consumer is overloaded
//	open      killed; after the cooldown it goes half-open
//	half-open on trial for one window; back to closed only if the trial
//	          stays healthy, otherwise open again
//
// Overloaded means one of:
//   - MaxPending messages or more wait in the sidecar for the subscription
//     (the application stopped reading its socket). "Reaches", not
//     "exceeds": the API allows the threshold to equal the queue's own
//     bound, which a queue can reach but never exceed;
//   - the application's reply latency p99 over the window exceeds
//     MaxLatency. A request that gets no reply within MaxLatency counts as a
//     reply of its age, so the documented share of unanswered requests that
//     trips the breaker is the same 1% as the p99.
//
// On trial, pending must stay under half of MaxPending, and latency under
// the same MaxLatency. The p99 is judged once the window holds MinSamples
// replies, so that one slow reply among three does not trip it.
//
// A Breaker is not safe for concurrent use; its owner serializes calls.
package breaker

import (
	"fmt"
	"time"

	"github.com/weighstation/weighstation/meshconfig"
)

// State is a breaker's state.
type State uint8

const (
	Closed State = iota
	Open
	HalfOpen
	numStates
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// MinSamples is how many replies a window needs before its p99 is judged.
const MinSamples = 10

// Config is when a breaker trips and how it recovers.
type Config struct {
	// MaxPending trips it when that many messages wait; 0 leaves pending
	// unjudged.
	MaxPending int64
	// MaxLatency trips it when the reply p99 exceeds it; 0 leaves latency
	// unjudged.
	MaxLatency time.Duration
	// Window is the period latency is judged over, and the trial's length.
	Window time.Duration
	// Cooldown is how long it stays open before the trial.
	Cooldown time.Duration
}

// ConfigFor is the breaker configuration of a Subscription, and whether it
// has one: only non-essential Subscriptions with an automatic kill switch
// do (essential ones never trip automatically, whatever their
// configuration says).
func ConfigFor(sp meshconfig.SubscriptionPolicy) (Config, bool) {
	if sp.KillSwitch.Auto == nil || sp.Essential {
		return Config{}, false
	}
	return configOf(*sp.KillSwitch.Auto), true
}

// configOf converts an automatic kill switch (durations arrive in
// milliseconds).
func configOf(auto meshconfig.AutoKillSwitch) Config {
	return Config{
		MaxPending: int64(auto.MaxPendingMessages),
		MaxLatency: time.Duration(auto.MaxLatencyMillis) * time.Millisecond,
		Window:     time.Duration(auto.WindowMillis) * time.Millisecond,
		Cooldown:   time.Duration(auto.CooldownMillis) * time.Millisecond,
	}
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case c.MaxPending < 0 || c.MaxLatency < 0:
		return fmt.Errorf("kill switch auto: thresholds must not be negative (maxPendingMessages %d, maxLatency %s)", c.MaxPending, c.MaxLatency)
	case c.MaxPending == 0 && c.MaxLatency == 0:
		return fmt.Errorf("kill switch auto: needs maxPendingMessages, maxLatency or both to trip on")
	case c.Window <= 0 || c.Cooldown <= 0:
		return fmt.Errorf("kill switch auto: window (%s) and cooldown (%s) must be positive", c.Window, c.Cooldown)
	}
	return nil
}

// Observation is what the owner measured at one evaluation.
type Observation struct {
	// Pending is the messages waiting in the sidecar for the subscription.
	Pending int64
	// P99 and Replies describe the reply latency over the window (for a
	// trial: since it began).
	P99     time.Duration
	Replies int64
}

// Transition is a change of state, with the reason in words.
type Transition struct {
	From, To State
	Reason   string
	At       time.Time
}

// Breaker is one subscription's circuit breaker.
type Breaker struct {
	cfg       Config
	state     State
	since     time.Time
	reason    string
	trialEnds time.Time
	counts    [numStates][numStates]uint64
}

// New returns a closed breaker.
func New(cfg Config, now time.Time) *Breaker {
	return &Breaker{cfg: cfg, state: Closed, since: now, reason: "started"}
}

// SetConfig changes the thresholds; the state is kept.
func (b *Breaker) SetConfig(cfg Config) { b.cfg = cfg }

// Config returns the thresholds.
func (b *Breaker) Config() Config { return b.cfg }

// State returns the current state, why and since when.
func (b *Breaker) State() (State, string, time.Time) { return b.state, b.reason, b.since }

// Transitions returns how often each transition happened, by from and to.
func (b *Breaker) Transitions() map[[2]State]uint64 {
	out := map[[2]State]uint64{}
	for from := range numStates {
		for to := range numStates {
			if n := b.counts[from][to]; n > 0 {
				out[[2]State{from, to}] = n
			}
		}
	}
	return out
}

// Evaluate judges an observation at now and returns the transition it
// caused, if any. When it returns a transition to HalfOpen, the owner starts
// a fresh latency measurement for the trial.
func (b *Breaker) Evaluate(now time.Time, o Observation) (Transition, bool) {
	switch b.state {
	case Closed:
		if why := b.overloaded(o, false); why != "" {
			return b.move(Open, why, now), true
		}
	case Open:
		if now.Sub(b.since) >= b.cfg.Cooldown {
			b.trialEnds = now.Add(b.cfg.Window)
			return b.move(HalfOpen, fmt.Sprintf("cooldown of %s over: on trial for %s", b.cfg.Cooldown, b.cfg.Window), now), true
		}
	case HalfOpen:
		// On trial, pending must stay under half the threshold.
		if why := b.overloaded(o, true); why != "" {
			return b.move(Open, "on trial: "+why, now), true
		}
		if !now.Before(b.trialEnds) {
			return b.move(Closed, fmt.Sprintf("healthy through a trial of %s", b.cfg.Window), now), true
		}
	}
	return Transition{}, false
}

// overloaded says why o is over the thresholds, or "" when it is not. On
// trial, pending must stay under half of MaxPending.
func (b *Breaker) overloaded(o Observation, onTrial bool) string {
	if b.cfg.MaxPending > 0 {
		if !onTrial && o.Pending >= b.cfg.MaxPending {
			return fmt.Sprintf("%d messages pending, at or over maxPendingMessages %d", o.Pending, b.cfg.MaxPending)
		}
		if onTrial && 2*o.Pending >= b.cfg.MaxPending {
			return fmt.Sprintf("%d messages pending, not under half of maxPendingMessages %d", o.Pending, b.cfg.MaxPending)
		}
	}
	if b.cfg.MaxLatency > 0 && o.Replies >= MinSamples && o.P99 > b.cfg.MaxLatency {
		return fmt.Sprintf("reply latency p99 %s over %d replies, over %s", o.P99, o.Replies, b.cfg.MaxLatency)
	}
	return ""
}

func (b *Breaker) move(to State, reason string, now time.Time) Transition {
	t := Transition{From: b.state, To: to, Reason: reason, At: now}
	b.counts[b.state][to]++
	b.state, b.reason, b.since = to, reason, now
	return t
}
