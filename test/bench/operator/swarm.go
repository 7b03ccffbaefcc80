package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/weighstation/weighstation/test/bench/harness"
	"github.com/weighstation/weighstation/test/bench/operator/opproto"
)

// podState is what one simulated sidecar applied last.
type podState struct {
	at      int64
	version string
	topics  int
	subs    uint64
	nsubs   int
	engaged []string
	probe   int64
	applies int
}

// waiter waits for a set of pods to apply a configuration that satisfies
// pred, and records when each first did.
type waiter struct {
	pods map[int]bool
	pred func(pod int, st *podState) bool
	got  map[int]int64
	done chan struct{}
}

// swarmConn is the bench's side of the swarm: commands out, events in, and
// the state of every simulated sidecar.
type swarmConn struct {
	proc  *benchharness.LoggedProc
	world *world
	conn  net.Conn

	sendMu sync.Mutex
	enc    *json.Encoder

	mu       sync.Mutex
	state    []podState
	holding  []bool
	nHolding int
	// holdSince is when every pod of the world came to hold its
	// configuration (0: not all do).
	holdSince int64
	refused   []string
	waiters   []*waiter
	replies   map[int64]chan opproto.Event
	stats     *opproto.Event
	nextID    int64
	closed    chan struct{}
	changed   chan struct{}
}

func acceptSwarm(ln net.Listener, p *benchharness.LoggedProc, w *world, timeout time.Duration) (*swarmConn, error) {
	conn, err := benchharness.AcceptWithin(ln, timeout, "the swarm", func() string { return p.Tail(20) })
	if err != nil {
		return nil, err
	}
	s := &swarmConn{proc: p, world: w, conn: conn, enc: json.NewEncoder(conn), replies: map[int64]chan opproto.Event{},
		closed: make(chan struct{}), changed: make(chan struct{}, 1)}
	go s.read()
	return s, nil
}

func (s *swarmConn) command(c opproto.Command) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if err := s.enc.Encode(c); err != nil {
		return fmt.Errorf("commanding the swarm: %w", err)
	}
	return nil
}

func (s *swarmConn) add(pods ...opproto.Pod) error {
	s.mu.Lock()
	for _, p := range pods {
		for len(s.state) <= p.Index {
			s.state = append(s.state, podState{})
			s.holding = append(s.holding, false)
		}
	}
	s.mu.Unlock()
	return s.command(opproto.Command{Op: opproto.OpAdd, Pods: pods})
}

func (s *swarmConn) read() {
	defer close(s.closed)
	sc := bufio.NewScanner(s.conn)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var ev opproto.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			fmt.Fprintln(os.Stderr, "bench-operator: a swarm event:", err)
			continue
		}
		s.handle(ev)
	}
}

func (s *swarmConn) handle(ev opproto.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch ev.Kind {
	case opproto.KindApplied:
		if ev.Pod >= len(s.state) {
			return
		}
		st := &s.state[ev.Pod]
		*st = podState{at: ev.At, version: ev.Version, topics: ev.Topics, subs: ev.Subs, nsubs: ev.NSubs, engaged: ev.Engaged, probe: ev.Probe, applies: st.applies + 1}
		if total := s.world.size.totalPods(); ev.Pod < total {
			holds := s.world.holds(ev.Pod, st)
			if holds != s.holding[ev.Pod] {
				s.holding[ev.Pod] = holds
				if holds {
					s.nHolding++
				} else {
					s.nHolding--
				}
			}
			switch {
			case s.nHolding == total && s.holdSince == 0:
				s.holdSince = ev.At
			case s.nHolding < total:
				s.holdSince = 0
			}
		}
		for _, w := range s.waiters {
			if w.pods[ev.Pod] && w.got[ev.Pod] == 0 && w.pred(ev.Pod, st) {
				w.got[ev.Pod] = ev.At
				if len(w.got) == len(w.pods) {
					close(w.done)
				}
			}
		}
		s.waiters = slices.DeleteFunc(s.waiters, func(w *waiter) bool { return len(w.got) == len(w.pods) })
		select {
		case s.changed <- struct{}{}:
		default:
		}
	case opproto.KindRefused:
		s.refused = append(s.refused, fmt.Sprintf("pod %d: %s", ev.Pod, ev.Error))
	case opproto.KindCounters:
		if ch, ok := s.replies[ev.ID]; ok {
			ch <- ev
			delete(s.replies, ev.ID)
		}
	case opproto.KindStats:
		s.stats = &ev
	}
}

// wait registers a waiter for pods; the pods that satisfy pred already
// count from now (at).
func (s *swarmConn) wait(pods []int, pred func(int, *podState) bool) *waiter {
	w := &waiter{pods: map[int]bool{}, pred: pred, got: map[int]int64{}, done: make(chan struct{})}
	for _, p := range pods {
		w.pods[p] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now().UnixNano()
	for p := range w.pods {
		if p < len(s.state) && pred(p, &s.state[p]) {
			w.got[p] = now
		}
	}
	if len(w.got) == len(w.pods) {
		close(w.done)
		return w
	}
	s.waiters = append(s.waiters, w)
	return w
}

// result returns when each pod satisfied the waiter, or an error after
// the deadline.
func (s *swarmConn) result(w *waiter, deadline time.Time) (map[int]int64, error) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-w.done:
	case <-s.closed:
	case <-t.C:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	got := make(map[int]int64, len(w.got))
	for k, v := range w.got {
		got[k] = v
	}
	if len(got) < len(w.pods) {
		s.waiters = slices.DeleteFunc(s.waiters, func(x *waiter) bool { return x == w })
		var missing []int
		for p := range w.pods {
			if _, ok := got[p]; !ok {
				missing = append(missing, p)
			}
		}
		slices.Sort(missing)
		return got, fmt.Errorf("%d of %d sidecars applied it (missing pods %v; refusals %d, last %q)", len(got), len(w.pods), head(missing, 10), len(s.refused), lastOf(s.refused))
	}
	return got, nil
}

// holdingSince is when every pod came to hold its configuration (0: not
// all do), and how many do.
func (s *swarmConn) holdingSince() (int64, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holdSince, s.nHolding
}

// connected is how many sidecars applied some configuration.
func (s *swarmConn) configured() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, st := range s.state {
		if st.version != "" {
			n++
		}
	}
	return n
}

func (s *swarmConn) applies() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, st := range s.state {
		n += st.applies
	}
	return n
}

// counters asks the swarm for its byte counters.
func (s *swarmConn) counters(timeout time.Duration) (*opproto.Event, error) {
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	ch := make(chan opproto.Event, 1)
	s.replies[id] = ch
	s.mu.Unlock()
	if err := s.command(opproto.Command{Op: opproto.OpCounters, ID: id}); err != nil {
		return nil, err
	}
	select {
	case ev := <-ch:
		return &ev, nil
	case <-s.closed:
		return nil, fmt.Errorf("the swarm stopped reporting:\n%s", s.proc.Tail(20))
	case <-time.After(timeout):
		return nil, fmt.Errorf("the swarm did not answer for its counters within %s", timeout)
	}
}

// close ends the command stream: the swarm stops its sidecars, reports
// its stats and exits.
func (s *swarmConn) close(timeout time.Duration) *opproto.Event {
	if c, ok := s.conn.(*net.TCPConn); ok {
		_ = c.CloseWrite()
	}
	select {
	case <-s.closed:
	case <-time.After(timeout):
	}
	s.conn.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

func head[T any](xs []T, n int) []T {
	if len(xs) > n {
		return xs[:n]
	}
	return xs
}

func lastOf(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	return xs[len(xs)-1]
}
