// Package opproto is what the operator bench (test/bench/operator) and its
// simulated sidecars (test/bench/operator/swarm) tell each other over one
// TCP connection, JSON lines both ways: the bench sends Commands (add
// sidecars, probe a Topic, read the byte counters, stop), the swarm sends
// Events (an applied or refused configuration, counters, stats). It
// imports nothing from Kubernetes, like the sidecar.
package opproto

import (
	"hash/fnv"
	"slices"
)

// Setup is the swarm's input file: where the operator's xDS server is and
// how to trust it.
type Setup struct {
	// XDSAddress is the operator's xDS address, host:port.
	XDSAddress string `json:"xdsAddress"`
	// ServerName is the name the operator's serving certificate carries.
	ServerName string `json:"serverName"`
	// CAFile is the operator's CA bundle (PEM).
	CAFile string `json:"caFile"`
	// Namespace is the pods' namespace, unless a Pod names its own.
	Namespace string `json:"namespace"`
	// StreamsPerConn is how many sidecars share one gRPC connection (0
	// or 1: each dials its own), each on its own ADS stream with its own
	// token: sidecar i uses connection i / StreamsPerConn, dialed from
	// that connection's own loopback address.
	StreamsPerConn int `json:"streamsPerConn,omitempty"`
}

// Pod is one simulated sidecar's identity.
type Pod struct {
	Index int `json:"index"`
	// Namespace is the pod's namespace (empty: Setup.Namespace).
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	TokenFile string `json:"tokenFile"`
}

// Command operations.
const (
	// OpAdd starts a simulated sidecar for each of Pods.
	OpAdd = "add"
	// OpProbe makes every later applied event carry the maxMessageBytes
	// of the Topic named Topic (-1 when the configuration lacks it).
	OpProbe = "probe"
	// OpCounters asks for the byte counters (an Event of KindCounters
	// with the same ID).
	OpCounters = "counters"
)

// Command is one line the bench sends.
type Command struct {
	Op    string `json:"op"`
	ID    int64  `json:"id,omitempty"`
	Pods  []Pod  `json:"pods,omitempty"`
	Topic string `json:"topic,omitempty"`
}

// Event kinds.
const (
	KindApplied  = "applied"
	KindRefused  = "refused"
	KindCounters = "counters"
	KindStats    = "stats"
)

// Event is one line the swarm sends.
type Event struct {
	Kind string `json:"kind"`
	// Pod is the pod's Index (KindApplied, KindRefused).
	Pod int `json:"pod,omitempty"`
	// At is when Apply was called, time.Now().UnixNano().
	At      int64  `json:"at,omitempty"`
	Version string `json:"version,omitempty"`
	Error   string `json:"error,omitempty"`
	// Topics is the number of Topics in the configuration; Subs the
	// Subscriptions' names' hash (SubsHash) and NSubs their number;
	// Engaged the names of the Subscriptions whose kill switch is engaged.
	Topics  int      `json:"topics,omitempty"`
	Subs    uint64   `json:"subs,omitempty"`
	NSubs   int      `json:"nsubs,omitempty"`
	Engaged []string `json:"engaged,omitempty"`
	// Probe is the probed Topic's maxMessageBytes (OpProbe).
	Probe int64 `json:"probe,omitempty"`
	// ID answers a Command's ID (KindCounters).
	ID       int64     `json:"id,omitempty"`
	Counters *Counters `json:"counters,omitempty"`
	// Goroutines and HeapInuse are the swarm's runtime (KindStats,
	// KindCounters).
	Goroutines int    `json:"goroutines,omitempty"`
	HeapInuse  uint64 `json:"heapInuse,omitempty"`
	Connects   uint64 `json:"connects,omitempty"`
	Applied    uint64 `json:"applied,omitempty"`
	Refused    uint64 `json:"refused,omitempty"`
}

// Counters are what every simulated sidecar together received from the
// operator so far, as gRPC decoded it: DeltaDiscoveryResponses, their
// encoded sizes (the gRPC message, without HTTP/2 and TLS framing), and
// the resources they carried, by kind (topic, subscription, pod), with the
// marshaled size of each resource (the xdsv1.Resource inside the Any).
type Counters struct {
	Responses      int64            `json:"responses"`
	ResponseBytes  int64            `json:"responseBytes"`
	Resources      map[string]int64 `json:"resources"`
	ResourceBytes  map[string]int64 `json:"resourceBytes"`
	Removed        int64            `json:"removed"`
	AppliedConfigs int64            `json:"appliedConfigs"`
}

// SubsHash is the hash of a set of Subscription names, in any order.
func SubsHash(names []string) uint64 {
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	h := fnv.New64a()
	for _, n := range sorted {
		h.Write([]byte(n))
		h.Write([]byte{0})
	}
	return h.Sum64()
}
