package sidecar

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// healthCheck is one line of /readyz?verbose. A check that is not required
// is reported but never makes the sidecar unready.
type healthCheck struct {
	name     string
	required bool
	// check returns "" when all is well, else a short reason.
	check func() string
}

// HealthHandler serves the kubelet's probes and nothing else, so that it can
// listen on every interface while /metrics and the debug pages stay where
// -metrics-listen puts them:
//
//   - /livez: 200 while the process serves.
//   - /readyz: 200 once the sidecar holds a configuration (HasConfig), else
//     503 with the reason. With a credential from the operator, whether it
//     knows its pod's inbox space (which the credential names) is
//     reported, not required. The broker connection is reported but not
//     required: while it is away, the sidecar still serves its applications
//     and buffers their publishes (bounded), and taking every pod out of its
//     Services because the broker restarted would turn a broker outage into
//     an application outage.
//
// As kube-apiserver's, /readyz?verbose lists every check ("[+]config ok",
// "[-]broker disconnected (not required)"), and a failing /readyz always
// does.
func (s *Server) HealthHandler() http.Handler {
	checks := []healthCheck{
		{name: "config", required: true, check: failsUnless(s.HasConfig, "none received yet")},
		{name: "broker", check: failsUnless(s.BrokerConnected, "disconnected")},
	}
	if s.opts.InboxPrefix != nil {
		// With a credential from the operator, the pod's inbox space
		// comes with it (inbox.go). Reported, not required, as the broker
		// is: the operator issues the credential once the broker knows the
		// pod's account, so requiring it would make a broker outage an
		// application outage. Until then requests are refused and inbox
		// SUBs wait.
		checks = slices.Insert(checks, 1, healthCheck{name: "inbox", check: func() string {
			if _, ok := s.podInbox(); !ok {
				return "the broker credential, which names this pod's inbox space, has not arrived"
			}
			return ""
		}})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		writeHealth(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		ready := true
		for _, c := range checks {
			reason := c.check()
			switch {
			case reason == "":
				fmt.Fprintf(&b, "[+]%s ok\n", c.name)
			case c.required:
				ready = false
				fmt.Fprintf(&b, "[-]%s %s\n", c.name, reason)
			default:
				fmt.Fprintf(&b, "[-]%s %s (not required)\n", c.name, reason)
			}
		}
		switch {
		case !ready:
			b.WriteString("readyz check failed\n")
			writeHealth(w, http.StatusServiceUnavailable, b.String())
		case r.URL.Query().Has("verbose"):
			b.WriteString("readyz check passed\n")
			writeHealth(w, http.StatusOK, b.String())
		default:
			writeHealth(w, http.StatusOK, "ok\n")
		}
	})
	return mux
}

// failsUnless is a check that fails for reason unless ok.
func failsUnless(ok func() bool, reason string) func() string {
	return func() string {
		if !ok() {
			return reason
		}
		return ""
	}
}

func writeHealth(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}
