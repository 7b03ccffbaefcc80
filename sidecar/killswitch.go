package sidecar

import (
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

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

// killSwitchBoard is what the Server asks of its kill switches, so that it
// holds no switch state itself. Killed and RecordReplyLatency are on the
// data path (a SUB, a reply's publish): they find the switch through an
// atomic pointer, with no lock and no allocation (RecordReplyLatency then
// takes that one switch's own lock). The rest is the control plane.
type killSwitchBoard interface {
	// Killed reports whether SUBs under the policy are killed now.
	Killed(policy string) bool
	// RecordReplyLatency adds one of the application's reply latencies to
	// its policy's window.
	RecordReplyLatency(policy string, d time.Duration, now time.Time)
	// Sync installs the kill switches of a new configuration.
	Sync(subs []meshconfig.SubscriptionPolicy)
	// Run evaluates the breakers every interval until stop is closed.
	Run(stop <-chan struct{})
	// Status reports every Subscription's kill switch.
	Status() map[string]KillSwitchStatus
	// Evaluations counts the breakers' evaluation ticks.
	Evaluations() uint64
}

// killSwitchHost is what the kill switches need of the Server, so that they
// never reach into it: applying a switch to the local SUBs under a policy,
// and how many messages wait per policy (the breakers' pending measure).
type killSwitchHost interface {
	// applyKill withdraws (killed) or restores the upstream interest of
	// every local SUB under the policy; a withdrawal drops what waited and
	// answers its queue-group requests with "no responders".
	applyKill(policy string, killed bool)
	// pendingByPolicy sums the messages waiting per Subscription policy.
	pendingByPolicy() map[string]int64
}

// killSwitches are the sidecar's kill switches and the loop that judges
// their breakers.
type killSwitches struct {
	host     killSwitchHost
	log      logr.Logger
	interval time.Duration
	// requests are the requests delivered to the application and not yet
	// answered, which each tick times out (the Server's table, shared with
	// the publish ACL).
	requests *answerable

	// mu serializes changes of the switches: configuration, ticks and
	// status. It is held while the host applies a switch, so that two
	// changes of one switch reach the SUBs in order.
	mu mutex[killSwitchesRank]
	// byPolicy are the switches by Subscription policy name, replaced whole
	// by each configuration (under mu) and loaded without a lock on the
	// data path.
	byPolicy atomic.Pointer[map[string]*killSwitch]

	// evaluations counts the loop's ticks.
	evaluations atomic.Uint64
}

var _ killSwitchBoard = (*killSwitches)(nil)

func newKillSwitches(host killSwitchHost, requests *answerable, interval time.Duration, log logr.Logger) *killSwitches {
	k := &killSwitches{host: host, log: log, interval: interval, requests: requests}
	k.byPolicy.Store(&map[string]*killSwitch{})
	return k
}

// killSwitch is one Subscription policy's switch in this sidecar.
type killSwitch struct {
	name string

	// killed is the applied state: the policy's SUBs hold no upstream
	// interest. It changes under killSwitches.mu, before the host applies
	// it, and is read without a lock by SUBs (Killed), which hold
	// Server.interestMu: a SUB that reads it before a change is then
	// withdrawn or restored with the others, one that reads it after
	// agrees with it.
	killed atomic.Bool

	// The fields below change under killSwitches.mu.
	manual       bool
	manualReason string
	since        time.Time
	reason       string

	// mu guards the breaker and its latency window, which the evaluation
	// loop and the publish path (reply latencies) share.
	mu      mutex[killSwitchRank]
	breaker *breaker.Breaker // nil unless auto and non-essential
	window  *breaker.Window  // reply latencies, when the breaker judges them
	// pastTransitions are the transitions of breakers this switch had
	// before (auto turned off, then on): the counts go on from them.
	pastTransitions map[[2]breaker.State]uint64
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

// Sync installs the kill switches of a new configuration and applies what
// changed. The breakers of Subscriptions that stay keep their state.
func (k *killSwitches) Sync(subs []meshconfig.SubscriptionPolicy) {
	now := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	old := *k.byPolicy.Load()
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
			if ks.breaker != nil {
				if ks.pastTransitions == nil {
					ks.pastTransitions = map[[2]breaker.State]uint64{}
				}
				for pair, n := range ks.breaker.Transitions() {
					ks.pastTransitions[pair] += n
				}
			}
			ks.breaker, ks.window = nil, nil
		}
		ks.mu.Unlock()
		next[sp.Name] = ks
	}
	k.byPolicy.Store(&next)
	for name, ks := range old {
		if next[name] == nil && ks.killed.Load() {
			k.setKilled(ks, false, "the Subscription is no longer in the configuration", now) // its SUBs are no longer under it
		}
	}
	for _, ks := range next {
		k.reconcile(ks, now)
	}
}

// reconcile applies what the manual switch and the breaker want. Callers
// hold k.mu.
func (k *killSwitches) reconcile(ks *killSwitch, now time.Time) {
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
	if want == ks.killed.Load() {
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
	k.setKilled(ks, want, reason, now)
}

// setKilled records a switch's new state and has the host apply it to the
// SUBs under it. Callers hold k.mu.
func (k *killSwitches) setKilled(ks *killSwitch, killed bool, reason string, now time.Time) {
	ks.killed.Store(killed)
	ks.reason, ks.since = reason, now
	k.log.Info("kill switch", "subscription", ks.name, "killed", killed, "reason", reason)
	k.host.applyKill(ks.name, killed)
}

// Killed reports whether SUBs under the policy are killed now.
func (k *killSwitches) Killed(policy string) bool {
	ks := (*k.byPolicy.Load())[policy]
	return ks != nil && ks.killed.Load()
}

// evaluate is one tick of the breakers: it times out unanswered requests,
// judges every breaker and applies the transitions.
func (k *killSwitches) evaluate(now time.Time) {
	defer k.evaluations.Add(1)
	kills := *k.byPolicy.Load()
	k.requests.sweep(monotonic(now), func(policy string) time.Duration {
		if ks := kills[policy]; ks != nil {
			ks.mu.Lock()
			defer ks.mu.Unlock()
			if ks.window != nil {
				return ks.breaker.Config().MaxLatency
			}
		}
		return 0
	}, func(policy string, age time.Duration) {
		kills[policy].recordReplyLatency(age, now)
	})

	var pendingByPolicy map[string]int64
	k.mu.Lock()
	defer k.mu.Unlock()
	// The switches as of now: a Sync between the sweep and k.mu may have
	// removed one, which must not be judged, or tripped with nothing left
	// to release it.
	for _, ks := range *k.byPolicy.Load() {
		ks.mu.Lock()
		if ks.breaker == nil {
			ks.mu.Unlock()
			continue
		}
		if pendingByPolicy == nil {
			pendingByPolicy = k.host.pendingByPolicy()
		}
		o := breaker.Observation{Pending: pendingByPolicy[ks.name]}
		if ks.window != nil {
			o.P99, o.Replies = ks.window.P99(now)
		}
		tr, changed := ks.breaker.Evaluate(now, o)
		if changed {
			k.log.Info("kill switch breaker", "subscription", ks.name, "from", tr.From.String(), "to", tr.To.String(), "reason", tr.Reason)
			if tr.To == breaker.HalfOpen && ks.window != nil {
				ks.window.Reset(now) // the trial is judged on its own replies
			}
		}
		ks.mu.Unlock()
		if changed {
			k.reconcile(ks, now)
		}
	}
}

// RecordReplyLatency adds one of the application's reply latencies to its
// policy's window.
func (k *killSwitches) RecordReplyLatency(policy string, d time.Duration, now time.Time) {
	(*k.byPolicy.Load())[policy].recordReplyLatency(d, now)
}

// recordReplyLatency adds a reply latency (or the age of an unanswered
// request) to the switch's window, if it has one; ks may be nil.
func (ks *killSwitch) recordReplyLatency(d time.Duration, now time.Time) {
	if ks == nil {
		return
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.window != nil {
		ks.window.Record(d, now)
	}
}

// Run evaluates the breakers every interval until stop is closed.
func (k *killSwitches) Run(stop <-chan struct{}) {
	t := time.NewTicker(k.interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			k.evaluate(now)
		}
	}
}

// Status reports every Subscription's kill switch.
func (k *killSwitches) Status() map[string]KillSwitchStatus {
	k.mu.Lock()
	defer k.mu.Unlock()
	kills := *k.byPolicy.Load()
	out := make(map[string]KillSwitchStatus, len(kills))
	for name, ks := range kills {
		st := KillSwitchStatus{Killed: ks.killed.Load(), Engaged: ks.manual, Reason: ks.reason, Since: ks.since}
		ks.mu.Lock()
		if ks.breaker != nil {
			st.Auto = true
			st.State, _, _ = ks.breaker.State()
			st.Transitions = map[string]uint64{}
			for pair, v := range ks.breaker.Transitions() {
				st.Transitions[pair[0].String()+"->"+pair[1].String()] = v
			}
			for pair, v := range ks.pastTransitions {
				st.Transitions[pair[0].String()+"->"+pair[1].String()] += v
			}
		}
		ks.mu.Unlock()
		out[name] = st
	}
	return out
}

// Evaluations counts the breakers' evaluation ticks.
func (k *killSwitches) Evaluations() uint64 { return k.evaluations.Load() }

// The Server's side of the kill switches: what killSwitchHost asks of it,
// and the "no responders" answers.

// applyKill withdraws or restores the upstream interest of every local SUB
// under the policy (killSwitchHost). It takes interestMu, so a change and a
// SUB under the policy do not interleave.
func (s *Server) applyKill(policy string, killed bool) {
	s.interestMu.Lock()
	defer s.interestMu.Unlock()
	s.killSubs(s.subsOfPolicy(policy), killed)
}

// killSubs withdraws or restores the upstream interest of subs, and drops
// what waits in a killed one's queue, answering its queue group's requests
// with no responders. interestMu is held. A SUB its subscribe has not
// routed yet is left to it (it applies its policy's switch).
func (s *Server) killSubs(subs []*localSub, killed bool) {
	subs = slices.DeleteFunc(slices.Clone(subs), func(ls *localSub) bool { return !ls.registered })
	for _, ls := range subs {
		ls.killed.Store(killed)
		switch {
		case killed && ls.hasInterest:
			ls.hasInterest = false
			_, _ = s.interest.Remove(ls.key) // an error means the upstream connection is gone, and its interest with it
		case !killed && !ls.hasInterest && !ls.removed.Load():
			if _, err := s.interest.Add(ls.key); err != nil {
				if !errors.Is(err, upstream.ErrDraining) { // shutting down, the interest stays withdrawn
					s.opts.Log.Error(err, "restoring upstream interest", "subscription", ls.policy(), "subject", ls.key.String())
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
		if ls.policy() == name {
			out = append(out, ls)
		}
	}
	return out
}

// pendingByPolicy sums the messages waiting per Subscription policy
// (killSwitchHost).
func (s *Server) pendingByPolicy() map[string]int64 {
	out := map[string]int64{}
	for _, ls := range s.liveSubs() {
		out[ls.policy()] += int64(ls.queue.Counts().Pending)
	}
	return out
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

// KillSwitches reports every Subscription's kill switch in this sidecar.
func (s *Server) KillSwitches() map[string]KillSwitchStatus { return s.kills.Status() }

// KillSwitchEvaluations counts the breakers' evaluation ticks.
func (s *Server) KillSwitchEvaluations() uint64 { return s.kills.Evaluations() }

// NoRespondersSent counts the sidecar's own "no responders" answers to
// queue-group requests it dropped because their subscription was killed.
func (s *Server) NoRespondersSent() uint64 { return s.noRespondersSent.Load() }

// NoRespondersReceived counts the "no responders" answers the pod's
// requests got.
func (s *Server) NoRespondersReceived() uint64 { return s.noRespondersReceived.Load() }
