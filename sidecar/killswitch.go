package sidecar

import (
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar/breaker"
	"github.com/weighstation/weighstation/sidecar/pending"
	"github.com/weighstation/weighstation/sidecar/upstream"
)

// Kill switches. A Subscription's kill switch is engaged by hand (its
// configuration says so) or, for non-essential Subscriptions with auto, by
// its circuit breaker (package breaker). While it is engaged, the sidecar
// withdraws the upstream interest of every local SUB under that
// Subscription, queue-group membership included, so the rest of a group
// takes the whole load and the broker answers requests addressed only to it
// with "no responders". What waited is dropped at once, and what arrives
// before the broker learns of the withdrawal is dropped too, both with
// reason killed. A request among them that was sent to a queue group gets
// a "no responders" answer from the sidecar: the broker picked this member
// alone, so nobody else in the group will answer it.

// killSwitch is one Subscription policy's switch in this sidecar.
type killSwitch struct {
	name string

	// The fields below change under Server.interestMu.
	manual       bool
	manualReason string
	killed       bool // applied: the policy's SUBs hold no upstream interest
	since        time.Time
	reason       string

	// mu guards the breaker and its latency window, which the evaluation
	// loop and the publish path (reply latencies) share.
	mu      sync.Mutex
	breaker *breaker.Breaker // nil unless auto and non-essential
	window  *breaker.Window  // reply latencies, when the breaker judges them
}

// KillSwitchStatus is one Subscription's kill switch in this sidecar, for
// the status the operator writes.
type KillSwitchStatus struct {
	// Killed says whether delivery is stopped now.
	Killed bool
	// Engaged is the manual switch.
	Engaged bool
	// Auto is set when the Subscription has an automatic kill switch; State
	// is then its breaker's state.
	Auto  bool
	State breaker.State
	// Reason and Since describe the last change.
	Reason string
	Since  time.Time
	// Transitions counts the breaker's transitions by "from->to".
	Transitions map[string]uint64
}

// syncKillSwitches installs the kill switches of a new configuration and
// applies what changed. The breakers of Subscriptions that stay keep their
// state.
func (s *Server) syncKillSwitches(subs []meshconfig.SubscriptionPolicy) {
	now := time.Now()
	s.interestMu.Lock()
	defer s.interestMu.Unlock()
	old := *s.kills.Load()
	next := make(map[string]*killSwitch, len(subs))
	for _, sp := range subs {
		ks := old[sp.Name]
		if ks == nil {
			ks = &killSwitch{name: sp.Name, since: now, reason: "configured"}
		}
		ks.manual, ks.manualReason = sp.KillSwitch.Engaged, sp.KillSwitch.Reason
		ks.mu.Lock()
		if cfg, ok := breaker.ConfigFor(sp); ok {
			var was breaker.Config
			if ks.breaker == nil {
				ks.breaker = breaker.New(cfg, now)
			} else {
				was = ks.breaker.Config()
				ks.breaker.SetConfig(cfg)
			}
			switch {
			case cfg.MaxLatency == 0:
				ks.window = nil
			case ks.window == nil || was.Window != cfg.Window:
				ks.window = breaker.NewWindow(cfg.Window, now) // judged over the new length from now on
			}
		} else {
			ks.breaker, ks.window = nil, nil
		}
		ks.mu.Unlock()
		next[sp.Name] = ks
	}
	s.kills.Store(&next)
	for name, ks := range old {
		if next[name] == nil && ks.killed {
			s.setKilled(ks, false, "the Subscription is no longer in the configuration", now) // its SUBs are no longer under it
		}
	}
	for _, ks := range next {
		s.reconcileKill(ks, now)
	}
}

// reconcileKill applies what the manual switch and the breaker want.
// Callers hold interestMu.
func (s *Server) reconcileKill(ks *killSwitch, now time.Time) {
	var tripped bool
	var breakerReason string
	ks.mu.Lock()
	if ks.breaker != nil {
		var state breaker.State
		state, breakerReason, _ = ks.breaker.State()
		tripped = state == breaker.Open
	}
	ks.mu.Unlock()
	want := ks.manual || tripped
	if want == ks.killed {
		return
	}
	reason := "kill switch disengaged"
	switch {
	case ks.manual:
		reason = "kill switch engaged by hand"
		if ks.manualReason != "" {
			reason += ": " + ks.manualReason
		}
	case tripped:
		reason = "tripped: " + breakerReason
	}
	s.setKilled(ks, want, reason, now)
}

// setKilled withdraws or restores the upstream interest of every local SUB
// under ks. Callers hold interestMu.
func (s *Server) setKilled(ks *killSwitch, killed bool, reason string, now time.Time) {
	ks.killed, ks.reason, ks.since = killed, reason, now
	s.opts.Log.Info("kill switch", "subscription", ks.name, "killed", killed, "reason", reason)
	subs := s.subsOfPolicy(ks.name)
	for _, ls := range subs {
		ls.killed.Store(killed)
		switch {
		case killed && ls.hasInterest:
			ls.hasInterest = false
			_, _ = s.interest.Remove(ls.key) // an error means the upstream connection is gone, and its interest with it
		case !killed && !ls.hasInterest && !ls.removed.Load():
			if _, err := s.interest.Add(ls.key); err != nil {
				if !errors.Is(err, upstream.ErrDraining) { // shutting down, the interest stays withdrawn
					s.opts.Log.Error(err, "restoring upstream interest", "subscription", ks.name, "subject", ls.key.String())
				}
				continue
			}
			ls.hasInterest = true
		}
	}
	if !killed {
		return
	}
	// Every deliver pushes under the routing read lock after checking
	// killed: once this lock was held, none can still push to these queues.
	s.router.barrier()
	var requests []string
	for _, ls := range subs {
		ls.queue.DropAll(pending.ReasonKilled, func(m *pending.Message) {
			if ls.key.Queue != "" && m.Reply != "" {
				requests = append(requests, strings.Clone(m.Reply)) // a view of the body DropAll releases
			}
		})
		ls.conn.wakeWriter() // a removal-by-count or retirement may be due
	}
	for _, reply := range requests {
		s.answerNoResponders(reply)
	}
}

// subsOfPolicy lists the live local SUBs under a Subscription policy.
func (s *Server) subsOfPolicy(name string) []*localSub {
	var out []*localSub
	for _, ls := range s.liveSubs() {
		if ls.policy == name {
			out = append(out, ls)
		}
	}
	return out
}

// isKilled reports whether SUBs under the policy are killed now. Callers
// hold interestMu.
func (s *Server) isKilled(policy string) bool {
	ks := (*s.kills.Load())[policy]
	return ks != nil && ks.killed
}

// answerNoResponders answers a request the sidecar dropped because its
// subscription is killed, as the broker answers one nobody is subscribed
// to: an empty message with the status line "NATS/1.0 503". It runs on the
// upstream reader, which must never wait for the socket: when the broker
// is away or the connection backed up, the answer is counted as unsent and
// the requester times out.
func (s *Server) answerNoResponders(reply string) {
	if err := s.up.PublishNoWait([]byte(reply), nil, noRespondersStatus, nil, nil); err != nil {
		s.noRespondersUnsent.Add(1)
		return
	}
	s.noRespondersSent.Add(1)
}

// evaluateKillSwitches is one tick of the breakers: it times out
// unanswered requests, judges every breaker and applies the transitions.
func (s *Server) evaluateKillSwitches(now time.Time) {
	defer s.evaluations.Add(1)
	kills := *s.kills.Load()
	s.answerable.sweep(monotonic(now), func(policy string) time.Duration {
		if ks := kills[policy]; ks != nil {
			ks.mu.Lock()
			defer ks.mu.Unlock()
			if ks.window != nil {
				return ks.breaker.Config().MaxLatency
			}
		}
		return 0
	}, func(policy string, age time.Duration) {
		s.recordReplyLatency(kills[policy], age, now)
	})

	var pendingByPolicy map[string]int64
	s.interestMu.Lock()
	defer s.interestMu.Unlock()
	for _, ks := range kills {
		ks.mu.Lock()
		if ks.breaker == nil {
			ks.mu.Unlock()
			continue
		}
		if pendingByPolicy == nil {
			pendingByPolicy = s.pendingByPolicy()
		}
		o := breaker.Observation{Pending: pendingByPolicy[ks.name]}
		if ks.window != nil {
			o.P99, o.Replies = ks.window.P99(now)
		}
		tr, changed := ks.breaker.Evaluate(now, o)
		if changed {
			s.opts.Log.Info("kill switch breaker", "subscription", ks.name, "from", tr.From.String(), "to", tr.To.String(), "reason", tr.Reason)
			if tr.To == breaker.HalfOpen && ks.window != nil {
				ks.window.Reset(now) // the trial is judged on its own replies
			}
		}
		ks.mu.Unlock()
		if changed {
			s.reconcileKill(ks, now)
		}
	}
}

// recordReplyLatency adds one of the application's reply latencies (or the
// age of an unanswered request) to its policy's window.
func (s *Server) recordReplyLatency(ks *killSwitch, d time.Duration, now time.Time) {
	if ks == nil {
		return
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.window != nil {
		ks.window.Record(d, now)
	}
}

// pendingByPolicy sums the messages waiting per Subscription policy.
func (s *Server) pendingByPolicy() map[string]int64 {
	out := map[string]int64{}
	for _, ls := range s.liveSubs() {
		out[ls.policy] += int64(ls.queue.Counts().Pending)
	}
	return out
}

// killSwitchLoop evaluates the breakers every KillSwitchInterval until
// Close.
func (s *Server) killSwitchLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.KillSwitchInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.evaluateKillSwitches(now)
		}
	}
}

// KillSwitches reports every Subscription's kill switch in this sidecar.
func (s *Server) KillSwitches() map[string]KillSwitchStatus {
	s.interestMu.Lock()
	defer s.interestMu.Unlock()
	kills := *s.kills.Load()
	out := make(map[string]KillSwitchStatus, len(kills))
	for name, ks := range kills {
		st := KillSwitchStatus{Killed: ks.killed, Engaged: ks.manual, Reason: ks.reason, Since: ks.since}
		ks.mu.Lock()
		if ks.breaker != nil {
			st.Auto = true
			st.State, _, _ = ks.breaker.State()
			st.Transitions = map[string]uint64{}
			for k, v := range ks.breaker.Transitions() {
				st.Transitions[k[0].String()+"->"+k[1].String()] = v
			}
		}
		ks.mu.Unlock()
		out[name] = st
	}
	return out
}

// KillSwitchEvaluations counts the breakers' evaluation ticks.
func (s *Server) KillSwitchEvaluations() uint64 { return s.evaluations.Load() }

// NoRespondersSent counts the sidecar's own "no responders" answers to
// queue-group requests it dropped because their subscription was killed.
func (s *Server) NoRespondersSent() uint64 { return s.noRespondersSent.Load() }

// NoRespondersReceived counts the "no responders" answers the pod's
// requests got.
func (s *Server) NoRespondersReceived() uint64 { return s.noRespondersReceived.Load() }
