package injectionstatus

import (
	"strings"
	"testing"
)

func TestPodsWithoutSidecarMessage(t *testing.T) {
	pod := func(name, reason string) unsupported {
		u := unsupported{name: name, reason: reason}
		if reason == ReasonSidecarOutdated {
			u.version = "v0.0.1"
		}
		return u
	}
	r := &Reconciler{}
	for _, c := range []struct {
		name       string
		pods       []unsupported
		wantReason string
		wantParts  []string
		notParts   []string
	}{
		{"one missed", []unsupported{pod("a", ReasonSidecarNotInjected)}, ReasonSidecarNotInjected,
			[]string{"1 selected pod(s)", "1 not injected, 0 older than " + MinSidecarVersion, ": a (not injected);", "delete them"}, []string{"more"}},
		{"outdated only", []unsupported{pod("a", ReasonSidecarOutdated)}, ReasonSidecarOutdated,
			[]string{"a (sidecar v0.0.1)"}, nil},
		{"both: not injected wins", []unsupported{pod("a", ReasonSidecarOutdated), pod("b", ReasonSidecarNotInjected)}, ReasonSidecarNotInjected,
			[]string{"2 selected pod(s)", "a (sidecar v0.0.1), b (not injected)"}, nil},
		{"three named, the rest counted", []unsupported{pod("a", ReasonSidecarNotInjected), pod("b", ReasonSidecarNotInjected),
			pod("c", ReasonSidecarNotInjected), pod("d", ReasonSidecarNotInjected), pod("e", ReasonSidecarOutdated)}, ReasonSidecarNotInjected,
			[]string{"5 selected pod(s)", "4 not injected, 1 older", "a (not injected), b (not injected), c (not injected) and 2 more;"}, []string{"d (", "e ("}},
	} {
		t.Run(c.name, func(t *testing.T) {
			reason, msg := r.conditionMessage(c.pods)
			if reason != c.wantReason {
				t.Errorf("reason %s, want %s", reason, c.wantReason)
			}
			for _, p := range c.wantParts {
				if !strings.Contains(msg, p) {
					t.Errorf("message %q lacks %q", msg, p)
				}
			}
			for _, p := range c.notParts {
				if strings.Contains(msg, p) {
					t.Errorf("message %q has %q", msg, p)
				}
			}
		})
	}
}
