package sidecar

import "github.com/weighstation/weighstation/internal/lockrank"

// The sidecar's lock order, its one statement: a goroutine takes these
// locks in increasing rank, and never two of one rank at once (two
// connections' mu, say). Every one is a lockrank mutex of its rank, which
// under -race (make test) checks this and panics on an inversion.
//
//	rank  lock                 guards                                  taken by; what it takes inside
//	 1    conn.writeMu         a connection's batch and socket write   the connection's writer, and the upstream reader by
//	                                                                   TryLock, each holding nothing else; conn.mu,
//	                                                                   answerable.mu, conn.requests.mu, retiredMu (retire);
//	                                                                   the writer's removeSub: interestMu
//	 2    Server.configMu      configuration changes                   SetConfig, brokerConnected; killSwitches.mu,
//	                                                                   interestMu, connsMu and conn.mu (a new INFO)
//	 3    killSwitches.mu      the switches' state                     Sync, the breakers' tick, Status; killSwitch.mu,
//	                                                                   and interestMu as a switch is applied
//	 4    Server.interestMu    upstream interest (SUB, UNSUB, kill)    subscribe, unsubscribe, applyKill, rebinding, Stats,
//	                                                                   setInboxKey; retiredMu, router.mu, connsMu, conn.mu,
//	                                                                   inboxMu
//	 5    Server.retiredMu     a SUB's moves: live, settling, retired  startSettling, retire, rebind, PolicyTotals; connsMu,
//	                                                                   conn.mu, latencyMu
//	 6    router.mu (RW)       the routes                              route (read, the upstream reader); add, remove and
//	                                                                   barrier under interestMu
//	 7    answerable.mu        requests delivered, not yet answered    fill and settle, a reply's publish, the breakers'
//	                                                                   tick; killSwitch.mu (sweep)
//	 8    killSwitch.mu        a switch's breaker and latency window   the breakers' tick, a reply's publish; connsMu and
//	                                                                   conn.mu (pendingByPolicy)
//	 9    Server.connsMu       the connections                         accept, connections, forget
//	10    conn.mu              control replies, PONGs, the SUB list    the connection's reader, fill (only while control
//	                                                                   replies or held PONGs are owed), removeSub, close
//	11    conn.requests.mu     the application's requests being timed  publish, settle (only while requests are timed),
//	                                                                   close
//	12    telemetry.latencyMu  the latency recorders by policy         latenciesFor (under retiredMu in rebind), Latency
//	13    Server.inboxMu       latching the pod's inbox space          podInbox (under interestMu in setInboxKey),
//	                                                                   deferInboxSub
//	14    auditLog.mu          audit mode's logged subjects            denied
//	15    readBuffers.mu       the pooled frame buffers                a connection's reader
//
// Other packages' locks are not ranked, so not checked. upstream.Client's
// dispatch is held by the upstream reader around deliver and flush: it
// comes before all of these. The subpackages' own (pending.Queue and
// Budget, upstream.Interest, upstream.Client's subsMu and mu) come after
// whichever of these their callers hold, and take none of them; a queue's
// lock is held while fill copies a batch out of it (TakeEach), with
// nothing taken inside. latency.Recorder has no lock.
//
// On a message's path (delivery.go walks it) the upstream reader takes
// router.mu's read lock to route it (a queue's lock inside), then, once it
// has routed what it read, each connection's writeMu by TryLock, with
// conn.mu (only while control replies are owed), each queue's lock once
// for its whole batch (fill) and once to settle it, answerable.mu and
// conn.requests.mu (only for requests), and retiredMu (a removed SUB's
// retirement) inside it one at a time (fill, settle). The latency
// recorders take no lock. It
// never waits for writeMu and never takes interestMu: removing a SUB that
// reached its UNSUB count is the writer goroutine's. writeMu is the one
// lock held across a socket write, and only its connection's writer waits
// for it.
const (
	rankWrite lockrank.Rank = iota + 1
	rankConfig
	rankKillSwitches
	rankInterest
	rankRetired
	rankRouter
	rankAnswerable
	rankKillSwitch
	rankConns
	rankConn
	rankRequests
	rankLatency
	rankInbox
	rankAudit
	rankReadBuffers
)

func init() {
	lockrank.SetNames(map[lockrank.Rank]string{
		rankConfig:       "Server.configMu",
		rankKillSwitches: "killSwitches.mu",
		rankWrite:        "conn.writeMu",
		rankInterest:     "Server.interestMu",
		rankRetired:      "Server.retiredMu",
		rankRouter:       "router.mu",
		rankAnswerable:   "answerable.mu",
		rankKillSwitch:   "killSwitch.mu",
		rankConns:        "Server.connsMu",
		rankConn:         "conn.mu",
		rankRequests:     "conn.requests.mu",
		rankLatency:      "telemetry.latencyMu",
		rankInbox:        "Server.inboxMu",
		rankAudit:        "auditLog.mu",
		rankReadBuffers:  "readBuffers.mu",
	})
}

// The ranks as types, for lockrank.Mutex's type parameter: a field's
// declaration names its rank, and it costs nothing without -race.
type (
	configRank       struct{}
	killSwitchesRank struct{}
	writeRank        struct{}
	interestRank     struct{}
	retiredRank      struct{}
	routerRank       struct{}
	answerableRank   struct{}
	killSwitchRank   struct{}
	connsRank        struct{}
	connRank         struct{}
	requestsRank     struct{}
	latencyRank      struct{}
	inboxRank        struct{}
	auditRank        struct{}
	readBuffersRank  struct{}
)

func (configRank) Rank() lockrank.Rank       { return rankConfig }
func (killSwitchesRank) Rank() lockrank.Rank { return rankKillSwitches }
func (writeRank) Rank() lockrank.Rank        { return rankWrite }
func (interestRank) Rank() lockrank.Rank     { return rankInterest }
func (retiredRank) Rank() lockrank.Rank      { return rankRetired }
func (routerRank) Rank() lockrank.Rank       { return rankRouter }
func (answerableRank) Rank() lockrank.Rank   { return rankAnswerable }
func (killSwitchRank) Rank() lockrank.Rank   { return rankKillSwitch }
func (connsRank) Rank() lockrank.Rank        { return rankConns }
func (connRank) Rank() lockrank.Rank         { return rankConn }
func (requestsRank) Rank() lockrank.Rank     { return rankRequests }
func (latencyRank) Rank() lockrank.Rank      { return rankLatency }
func (inboxRank) Rank() lockrank.Rank        { return rankInbox }
func (auditRank) Rank() lockrank.Rank        { return rankAudit }
func (readBuffersRank) Rank() lockrank.Rank  { return rankReadBuffers }
