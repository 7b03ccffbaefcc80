package sidecar

import (
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// StampHeader carries the publishing sidecar's receive time (Unix
// nanoseconds) to the consuming sidecar, which removes it. It is reserved:
// an application's own header of that name is removed and counted. Across
// nodes the two times come from two clocks; skew shows in the end-to-end
// histogram's out-of-range counts (negative values).
const StampHeader = "Weighstation-Sent"

// stampRoom is what the stamp adds to a message at most:
// "NATS/1.0\r\n" + "Weighstation-Sent: " + 19 digits + "\r\n" + "\r\n",
// rounded up. INFO's max_payload leaves it free under the broker's limit.
const stampRoom = 64

// shouldStamp: only where the Topic allows it, and never on '$' subjects
// ($JS, $KV, $SYS), whose headers belong to NATS itself.
func shouldStamp(allowed bool, subject string) bool {
	return allowed && !strings.HasPrefix(subject, "$")
}

// removeStamp deletes every spelling of StampHeader from h and returns the
// stamped time (0 when there was none or it was not a number) and whether
// a header was removed.
func removeStamp(h nats.Header) (sentUnixNanos int64, removed bool) {
	for k, v := range h {
		if strings.EqualFold(k, StampHeader) {
			if len(v) > 0 {
				sentUnixNanos, _ = strconv.ParseInt(v[0], 10, 64)
			}
			delete(h, k)
			removed = true
		}
	}
	return sentUnixNanos, removed
}

func stamp(h nats.Header, now time.Time) {
	h[StampHeader] = []string{strconv.FormatInt(now.UnixNano(), 10)}
}
