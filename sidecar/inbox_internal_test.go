package sidecar

import (
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar/policy"
)

const testSpace = "_INBOX.podtoken"

// inboxServer is a Server with the inbox space testSpace and a
// configuration whose custom inbox prefix is custom ("" for none), as far
// as the translation needs one.
func inboxServer(t *testing.T, custom string) (*Server, *policy.Publish) {
	t.Helper()
	cfg := meshconfig.DefaultConfig(meshconfig.DefaultPolicy)
	cfg.Access.InboxPrefix = custom
	pol, err := policy.Compile(cfg, policy.NewCounters())
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{opts: Options{Log: logr.Discard()}, answerable: newAnswerable()}
	space := testSpace
	s.inbox.Store(&space)
	return s, pol
}

// TestInboxTranslation: which SUB patterns and reply subjects go up in the
// pod's inbox space, and how, and how a delivered subject comes back.
func TestInboxTranslation(t *testing.T) {
	tests := []struct {
		name, custom, in string
		sub, reply       string // at the broker; "" for the same as in
	}{
		{name: "nats.go's new-style inbox", in: "_INBOX.abc.*", sub: testSpace + ".abc.*"},
		{name: "nats.go's reply subject", in: "_INBOX.abc.17", sub: testSpace + ".abc.17", reply: testSpace + ".abc.17"},
		{name: "old-style inbox", in: "_INBOX.abc", sub: testSpace + ".abc", reply: testSpace + ".abc"},
		{name: "another pod's inbox pattern", in: "_INBOX.otherpod.nuid.>", sub: testSpace + ".otherpod.nuid.>", reply: ""},
		{name: "every inbox", in: "_INBOX.>", sub: testSpace + ".>"},
		{name: "_INBOX alone is no inbox", in: "_INBOX"},
		{name: "a subject that merely starts so", in: "_INBOXES.x"},
		{name: "an ordinary subject", in: "orders.eu"},
		{name: "a wildcard before the prefix", in: "*.abc.>"},
		{name: "custom prefix", custom: "billing.inbox", in: "billing.inbox.abc.*", sub: testSpace + ".abc.*"},
		{name: "custom prefix, reply", custom: "billing.inbox", in: "billing.inbox.abc.3", sub: testSpace + ".abc.3", reply: testSpace + ".abc.3"},
		{name: "_INBOX beside a custom prefix", custom: "billing.inbox", in: "_INBOX.abc.3", sub: testSpace + ".abc.3", reply: testSpace + ".abc.3"},
		{name: "custom prefix under _INBOX: the longest wins", custom: "_INBOX.app", in: "_INBOX.app.abc.3", sub: testSpace + ".abc.3", reply: testSpace + ".abc.3"},
		{name: "a reply already in the pod's space", in: testSpace + ".abc.3", sub: testSpace + "." + strings.TrimPrefix(testSpace, "_INBOX.") + ".abc.3", reply: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, pol := inboxServer(t, tc.custom)
			sub, mapping, err := s.translateSub(tc.in, pol)
			wantSub := tc.sub
			if wantSub == "" {
				wantSub = tc.in
			}
			if err != nil || sub != wantSub || (mapping == nil) != (tc.sub == "") {
				t.Fatalf("translateSub(%q) = %q, %+v, %v; want %q", tc.in, sub, mapping, err, wantSub)
			}
			if mapping != nil {
				prefix, rest := mapping.appSubject(sub)
				if !strings.HasPrefix(tc.in, prefix) || prefix+rest != tc.in {
					t.Fatalf("a message on %q comes back as %q+%q, want %q", sub, prefix, rest, tc.in)
				}
			}
			if strings.ContainsAny(tc.in, "*>") {
				return // a pattern is no reply subject
			}
			up, changed, err := s.translateReply(nil, tc.in, pol)
			wantReply := tc.reply
			if wantReply == "" {
				wantReply = tc.in
			}
			got := tc.in
			if changed {
				got = string(up)
			}
			if err != nil || got != wantReply || changed != (tc.reply != "") {
				t.Fatalf("translateReply(%q) = %q, %v, %v; want %q", tc.in, got, changed, err, wantReply)
			}
		})
	}
}

// TestForwardedReplySubjectIsKept: a reply subject that is a request's
// this pod received (an application forwarding a request with its
// requester's reply subject) goes up as it is.
func TestForwardedReplySubjectIsKept(t *testing.T) {
	s, pol := inboxServer(t, "")
	const requesters = "_INBOX.otherpod.nuid.1"
	s.answerable.delivered(requesters, "", nanotime())
	if _, changed, err := s.translateReply(nil, requesters, pol); changed || err != nil {
		t.Fatalf("translateReply(%q) changed it (%v, %v)", requesters, changed, err)
	}
}

// TestInInboxSpace: the reply subjects the one-reply allowance covers.
func TestInInboxSpace(t *testing.T) {
	for subject, want := range map[string]bool{
		"_INBOX.token.1":        true,
		"_INBOX.token.nuid.17":  true,
		testSpace + ".abc.1":    true,
		"_INBOX.token":          false,
		"_INBOX":                false,
		"_INBOXES.token.1":      false,
		"orders.secret":         false,
		"$JS.API.STREAM.DELETE": false,
		"x._INBOX.token.1":      false,
	} {
		if got := inInboxSpace(subject); got != want {
			t.Errorf("inInboxSpace(%q) = %v, want %v", subject, got, want)
		}
	}
}

// TestValidInboxSpace: the credential's inbox prefix must be "_INBOX." and
// literal tokens, within MaxInboxPrefixBytes (which UpstreamLineRoom keeps
// room for); the sidecar's own always is.
func TestValidInboxSpace(t *testing.T) {
	for prefix, ok := range map[string]bool{
		"_INBOX.abcdefghijklmnopqrst": true,
		newInboxSpace():               true,
		"_INBOX.a.b":                  true,
		"_INBOX":                      false,
		"_INBOX.*":                    false,
		"_INBOX.a.>":                  false,
		"inbox.a":                     false,
		"_INBOX." + strings.Repeat("x", MaxInboxPrefixBytes): false,
	} {
		if err := validInboxSpace(prefix); (err == nil) != ok {
			t.Errorf("validInboxSpace(%q) = %v, want ok %v", prefix, err, ok)
		}
	}
}
