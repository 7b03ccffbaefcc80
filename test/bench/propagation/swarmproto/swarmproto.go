// Package swarmproto is what the propagation bench (test/bench/propagation)
// and its sidecar swarm (test/bench/propagation/swarm) tell each other: the
// bench hands the swarm a Manifest file of pods, and the swarm streams
// Events back, one JSON object a line, over a TCP connection the bench
// listens for. It imports nothing from Kubernetes, like the sidecar.
package swarmproto

// Manifest is the swarm's input: where the operator's xDS server is, how
// to trust it, and the pods whose sidecars to run.
type Manifest struct {
	// XDSAddress is the operator's xDS address, host:port.
	XDSAddress string `json:"xdsAddress"`
	// ServerName is the name the operator's serving certificate must
	// carry (weighstation-xds.<operator namespace>.svc).
	ServerName string `json:"serverName"`
	// CAFile is the operator's CA bundle (PEM), read through tlsreload as
	// a sidecar reads its mounted ConfigMap.
	CAFile string `json:"caFile"`
	// Namespace is the pods' namespace.
	Namespace string `json:"namespace"`
	// Subscription is the Subscription whose kill switch the bench flips.
	Subscription string `json:"subscription"`
	Pods         []Pod  `json:"pods"`
}

// Pod is one sidecar's identity.
type Pod struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
	// TokenFile holds the pod's projected-style ServiceAccount token
	// (a TokenRequest bound to the pod).
	TokenFile string `json:"tokenFile"`
}

// Event kinds.
const (
	// KindStarted: every sidecar was created (its nats.Conn and
	// sidecar.Server) and its xDS client is about to start.
	KindStarted = "started"
	// KindApplied: a sidecar applied a configuration.
	KindApplied = "applied"
	// KindRefused: a sidecar refused a configuration (the xDS client
	// NACKs it).
	KindRefused = "refused"
	// KindStats: the xDS clients' counts, sent once at shutdown.
	KindStats = "stats"
)

// Event is one line the swarm sends.
type Event struct {
	Kind string `json:"kind"`
	// Pod is the index of the pod in the manifest (KindApplied,
	// KindRefused).
	Pod int `json:"pod,omitempty"`
	// Engaged is the Subscription's kill switch in the applied
	// configuration.
	Engaged bool `json:"engaged,omitempty"`
	// At is when SetConfig returned, time.Now().UnixNano().
	At      int64  `json:"at,omitempty"`
	Version string `json:"version,omitempty"`
	Error   string `json:"error,omitempty"`
	// Connects, Applied, Refused and Connected are summed over the xDS
	// clients (KindStats).
	Connects  uint64 `json:"connects,omitempty"`
	Applied   uint64 `json:"applied,omitempty"`
	Refused   uint64 `json:"refused,omitempty"`
	Connected int    `json:"connected,omitempty"`
	// Goroutines, HeapInuse and Sys are the swarm's runtime figures
	// (KindStarted, KindStats).
	Goroutines int    `json:"goroutines,omitempty"`
	HeapInuse  uint64 `json:"heapInuse,omitempty"`
	Sys        uint64 `json:"sys,omitempty"`
}
