package e2e

import (
	"fmt"
	"strings"
	"time"

	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

// FormatProbeSummary is one line about a probe's report, for the
// narrative and the diagnostics, and whether the report is a probe's.
func FormatProbeSummary(s probestats.Stats) (string, bool) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: connected %v (attempts %d, disconnects %d)", s.Role, s.ID, s.Connected, s.ConnectAttempts, s.Disconnects)
	if s.AsyncErrors > 0 {
		fmt.Fprintf(&b, ", %d async errors (last: %s)", s.AsyncErrors, s.LastAsyncError)
	}
	switch {
	case s.Publisher != nil:
		p := s.Publisher
		fmt.Fprintf(&b, "; published %d at %g/s, %d publish errors, %d refusals", p.Published, p.RatePerSecond, p.PublishErrors, p.Refusals)
	case s.Subscriber != nil:
		x := s.Subscriber
		fmt.Fprintf(&b, "; received %d, lost %d, duplicates %d, out of order %d, subscribe refusals %d", x.Received, x.Lost, x.Duplicates, x.OutOfOrder, x.SubscribeRefusals)
	case s.Requester != nil:
		r := s.Requester
		fmt.Fprintf(&b, "; sent %d: ok %d, fast failures %d, timeouts %d, other %d; now %s", r.Sent, r.OK, r.FastFailures, r.Timeouts, r.OtherErrors, orNone(string(r.State())))
	case s.Responder != nil:
		r := s.Responder
		fmt.Fprintf(&b, "; answered %d of %d, subscribe refusals %d", r.Answered, r.Requests, r.SubscribeRefusals)
	default:
		return b.String(), s.Role == probestats.RoleIdle
	}
	if s.AtUnixNano != 0 {
		fmt.Fprintf(&b, " (as of %s)", time.Unix(0, s.AtUnixNano).UTC().Format("15:04:05.000"))
	}
	return b.String(), true
}

func orNone(s string) string {
	if s == "" {
		return "no answer yet"
	}
	return s
}
