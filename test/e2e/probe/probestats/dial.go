package probestats

import (
	"encoding/json"
	"fmt"
	"strings"
)

// RoleDial connects to nothing through a sidecar: it opens plain TCP
// connections to the addresses it is given, again and again, and reports
// whether each got through and whether a NATS server greeted it (its INFO
// line). The NetworkPolicy story runs it in a pod the broker's policy does
// not admit, and in one it does.
const RoleDial = "dial"

// DialLinePrefix starts the dial role's report lines.
const DialLinePrefix = "DIAL "

// Outcomes of one dial.
const (
	// DialInfo: connected, and the first line was a NATS INFO.
	DialInfo = "info"
	// DialConnected: connected, but no INFO line came within the timeout.
	DialConnected = "connected"
	// DialRefused: the connection was refused (a TCP reset or an ICMP
	// unreachable: what a REJECT rule sends).
	DialRefused = "refused"
	// DialTimeout: nothing answered within the timeout (what a DROP rule
	// gives).
	DialTimeout = "timeout"
	// DialError: anything else (the name did not resolve, no route).
	DialError = "error"
)

// DialStats is one report of the dial role: every target since it started.
type DialStats struct {
	Role            string `json:"role"`
	ID              string `json:"id"`
	StartedUnixNano int64  `json:"startedUnixNano"`
	AtUnixNano      int64  `json:"atUnixNano"`
	Final           bool   `json:"final,omitempty"`
	// Rounds is how many times every target was dialed.
	Rounds  int64        `json:"rounds"`
	Targets []DialTarget `json:"targets"`
}

// DialTarget is what the dials to one address gave.
type DialTarget struct {
	Addr string `json:"addr"`
	// Attempts is the number of dials; each ended in exactly one outcome.
	Attempts int64 `json:"attempts"`
	// Outcomes counts the dials by outcome (DialInfo, DialRefused...).
	Outcomes map[string]int64 `json:"outcomes"`
	// Last is the last dial's outcome, LastError its error (empty on
	// success) and LastMillis how long it took.
	Last       string  `json:"last,omitempty"`
	LastError  string  `json:"lastError,omitempty"`
	LastMillis float64 `json:"lastMillis"`
	// ServerName is the name in the last INFO line (a broker's pod name).
	ServerName string `json:"serverName,omitempty"`
	// FirstThroughUnixNano is when a dial first got through (connected or
	// info); 0 if none has.
	FirstThroughUnixNano int64 `json:"firstThroughUnixNano,omitempty"`
}

// Through is the number of dials that got a TCP connection.
func (t DialTarget) Through() int64 { return t.Outcomes[DialInfo] + t.Outcomes[DialConnected] }

// Blocked is the number of dials that were refused or timed out.
func (t DialTarget) Blocked() int64 { return t.Outcomes[DialRefused] + t.Outcomes[DialTimeout] }

// String is one line for a story's output: the address, the counts by
// outcome, and the last dial.
func (t DialTarget) String() string {
	var parts []string
	for _, o := range []string{DialInfo, DialConnected, DialRefused, DialTimeout, DialError} {
		if n := t.Outcomes[o]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", o, n))
		}
	}
	s := fmt.Sprintf("%s: %d dial(s): %s; last %s in %.1f ms", t.Addr, t.Attempts, strings.Join(parts, ", "), t.Last, t.LastMillis)
	if t.LastError != "" {
		s += " (" + t.LastError + ")"
	}
	if t.ServerName != "" {
		s += ", server " + t.ServerName
	}
	return s
}

// Target returns the target of that address.
func (s DialStats) Target(addr string) (DialTarget, bool) {
	for _, t := range s.Targets {
		if t.Addr == addr {
			return t, true
		}
	}
	return DialTarget{}, false
}

// Line is the report as the dial role prints it.
func (s DialStats) Line() (string, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	return DialLinePrefix + string(b), nil
}

// ParseDialStats reads a report: the JSON of /stats, or a printed line.
func ParseDialStats(b []byte) (DialStats, error) {
	var s DialStats
	text := strings.TrimSpace(string(b))
	text = strings.TrimPrefix(text, DialLinePrefix)
	if err := json.Unmarshal([]byte(text), &s); err != nil {
		return s, fmt.Errorf("a dial report: %w", err)
	}
	if s.Role != RoleDial {
		return s, fmt.Errorf("a report of role %q, not %q", s.Role, RoleDial)
	}
	return s, nil
}
