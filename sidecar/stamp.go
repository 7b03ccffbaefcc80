package sidecar

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
)

// Headers reserved for sidecars. An application's own header of either
// name is removed from its publishes and counted (StrippedStamps), and the
// consuming sidecar removes them before delivery, so applications receive
// exactly the headers that were published.
const (
	// StampHeader carries the publishing sidecar's receive time (Unix
	// nanoseconds) to the consuming sidecar. Across nodes the two times
	// come from two clocks; skew shows in the end-to-end histogram's
	// out-of-range counts (negative values).
	StampHeader = "Weighstation-Sent"
	// OriginHeader names the sidecar and connection that published a
	// message, "<sidecar id>.<connection id>". It is added only for
	// connections that asked for echo:false in CONNECT: their sidecar
	// shares one upstream connection among all its applications, so the
	// broker cannot suppress the echo itself, and the sidecar recognises
	// its own connection's messages by this header.
	OriginHeader = "Weighstation-Origin"
)

// stampRoom is what the reserved headers add to a message at most:
// "NATS/1.0\r\n" (10) + "Weighstation-Sent: " + 19 digits + "\r\n" (40) +
// "Weighstation-Origin: " + 16 hex + "." + 20 digits + "\r\n" (60) + "\r\n"
// (2) = 112, rounded up. INFO's max_payload leaves it free under the
// broker's limit.
const stampRoom = 128

// shouldStamp: only where the Topic allows it, and never on '$' subjects
// ($JS, $KV, $SYS), whose headers belong to NATS itself (a KV put would
// store them).
func shouldStamp(allowed bool, subject string) bool {
	return allowed && !isDollar(subject)
}

func isDollar(subject string) bool { return strings.HasPrefix(subject, "$") }

// reserved is what stripReserved found in a header block.
type reserved struct {
	sentUnixNanos int64  // the stamp, 0 when there was none or it was not a number
	origin        []byte // OriginHeader's value, nil when none
	removed       int    // how many reserved lines were removed
}

// newSidecarID returns 16 random hex digits: the prefix of this sidecar's
// OriginHeader values, distinct from every other sidecar's.
func newSidecarID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// originValue is the OriginHeader value of connection id of this sidecar.
func originValue(sidecarID string, connID uint64) string {
	return sidecarID + "." + strconv.FormatUint(connID, 10)
}

// originConn returns the connection id in an OriginHeader value that this
// sidecar wrote, or 0 when another sidecar (or nobody) wrote it.
func originConn(sidecarID string, origin []byte) uint64 {
	rest, ok := bytes.CutPrefix(origin, []byte(sidecarID))
	if !ok || len(rest) < 2 || rest[0] != '.' {
		return 0
	}
	id, err := strconv.ParseUint(string(rest[1:]), 10, 64)
	if err != nil {
		return 0
	}
	return id
}
