// Package demoapi is what the demo's driver (demo) and its sample
// applications (demo/apps) say to each other over each application's
// local control port: the paths and the JSON they exchange. The
// applications talk NATS to their pod's sidecar; this port is only the
// demo's remote control and its window into what they saw.
package demoapi

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Paths served on every application's control port.
const (
	// PathReady answers 200 once the application is connected to its
	// sidecar and subscribed.
	PathReady = "/readyz"
)

// billing's paths.
const (
	// PathPhase (POST, ?name=) ends billing's current latency phase and
	// starts the named one.
	PathPhase = "/phase"
	// PathPhases (GET) returns every phase so far, the current one last
	// ([]Phase).
	PathPhases = "/phases"
)

// spam-filter's paths.
const (
	// PathSlow (POST, ?delay=) makes every message and request take delay
	// to handle (0: as fast as it can).
	PathSlow = "/slow"
	// PathStats (GET) returns the application's counters (Stats), on
	// every application.
	PathStats = "/stats"
)

// orders-api's paths.
const (
	// PathRequests (GET) returns the outcomes of its requests (Requests).
	PathRequests = "/requests"
	// PathPublish (POST, ?subject=&bytes=&count=) publishes count messages
	// of bytes each at once and returns the sidecar's refusal, if one came
	// (Publish).
	PathPublish = "/publish"
)

// Phase is billing's latency over one phase of the demo: from each
// order's intended send time (the load generator's schedule) to its
// arrival in billing, in microseconds.
type Phase struct {
	Name      string                 `json:"name"`
	Start     time.Time              `json:"start"`
	End       time.Time              `json:"end"`
	Received  int64                  `json:"received"`
	Histogram *hdrhistogram.Snapshot `json:"histogram"`
}

// Stats are an application's counters.
type Stats struct {
	// Received counts the orders delivered to it, Answered the requests
	// it answered.
	Received int64 `json:"received"`
	Answered int64 `json:"answered"`
	// Delay is how long it takes for each (spam-filter).
	Delay time.Duration `json:"delay"`
}

// Outcome is how one request ended.
type Outcome string

const (
	Answered     Outcome = "answered"
	NoResponders Outcome = "no responders"
	TimedOut     Outcome = "timed out"
	Failed       Outcome = "failed"
)

// Change is a request outcome that differs from the one before it: when
// requests started or stopped failing, and how fast.
type Change struct {
	At      time.Time     `json:"at"`
	Outcome Outcome       `json:"outcome"`
	Took    time.Duration `json:"took"`
}

// Requests are orders-api's requests to the spam filter so far.
type Requests struct {
	Counts map[Outcome]int64 `json:"counts"`
	// Last is when the latest request of each outcome was sent.
	Last map[Outcome]time.Time `json:"last"`
	// Changes are the changes of outcome, oldest first (the last 100).
	Changes []Change `json:"changes"`
}

// Publish is the outcome of a publish burst.
type Publish struct {
	Published int `json:"published"`
	// Refusal is the sidecar's -ERR for the subject, as nats.go reported
	// it; empty when none came within the wait.
	Refusal string `json:"refusal"`
}
