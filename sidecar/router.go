package sidecar

import (
	"sync/atomic"

	"github.com/weighstation/weighstation/sidecar/upstream"
)

// router hands the broker's messages to local subscriptions: every local
// SUB behind an upstream subscription gets a message, or one member of a
// local queue group, and a connection that asked for echo:false does not
// get its own messages back. It pushes under its read lock, so once remove
// returns no delivery can still reach the removed subscription (its
// accounting is then final); barrier gives the kill switches the same.
type router struct {
	mu     rwMutex[routerRank]
	routes map[upstream.Key]*route

	// unrouted counts upstream messages that arrived for interest no local
	// subscription holds any more (in the instant between an UNSUB and the
	// broker learning of it).
	unrouted atomic.Uint64
	// echoSuppressed counts messages not delivered to the connection that
	// published them, because it asked for echo:false.
	echoSuppressed atomic.Uint64

	// toFlush are the connections route queued messages for since the
	// upstream reader last read (the upstream reader's alone): flush
	// writes them inline before it reads again.
	toFlush []*conn
}

// route is the local subscriptions behind one upstream subscription.
type route struct {
	subs []*localSub
	next atomic.Uint64 // round robin among a queue group's local members
}

func newRouter() *router { return &router{routes: map[upstream.Key]*route{}} }

// add routes ls's upstream subscription to it.
func (rt *router) add(ls *localSub) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	r := rt.routes[ls.key]
	if r == nil {
		r = &route{}
		rt.routes[ls.key] = r
	}
	r.subs = append(append([]*localSub(nil), r.subs...), ls) // copy: route reads it under RLock
}

// remove stops routing to ls.
func (rt *router) remove(ls *localSub) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	r := rt.routes[ls.key]
	if r == nil {
		return
	}
	subs := make([]*localSub, 0, len(r.subs))
	for _, x := range r.subs {
		if x != ls {
			subs = append(subs, x)
		}
	}
	if len(subs) == 0 {
		delete(rt.routes, ls.key)
		return
	}
	r.subs = subs
}

// barrier returns once every route that began before it has ended: a
// subscription marked killed before barrier gets nothing pushed after it.
func (rt *router) barrier() {
	rt.mu.Lock()
	//nolint:staticcheck // an empty critical section is the point: a barrier.
	rt.mu.Unlock()
}

// pickQueueMember picks one local member of a queue group, round robin from
// turn, preferring a member that is not killed and not the publisher of an
// echo:false message (nats-server never picks that one); when there is none,
// the round-robin choice, which then counts the message.
func pickQueueMember(members []*localSub, turn uint64, origin uint64) []*localSub {
	first := turn % uint64(len(members))
	for k := range uint64(len(members)) {
		i := (first + k) % uint64(len(members))
		if ls := members[i]; !ls.killed.Load() && (origin == 0 || ls.conn.id != origin) {
			return members[i : i+1]
		}
	}
	return members[first : first+1]
}
