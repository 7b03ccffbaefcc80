package sidecar

import (
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"

	"github.com/weighstation/weighstation/matcher"
	"github.com/weighstation/weighstation/sidecar/pending"
	"github.com/weighstation/weighstation/sidecar/policy"
)

// Inbox translation. A requester's reply subject travels with its request,
// so every responder learns it, and nothing in NATS stops one from
// subscribing to it ("_INBOX.<nuid>.>") and reading the requester's replies
// from everyone. So the sidecar keeps its applications' inboxes in an inbox
// space of its pod's own, "_INBOX.<token of this pod>" (the broker
// credential's inbox_prefix, which the broker pins the credential's
// subscriptions to, or one the sidecar makes), as NATS recommends for
// pinning inboxes, by translating:
//
//   - a SUB under an application inbox prefix (_INBOX, or the pod's custom
//     one, Access.InboxPrefix): "_INBOX.abc.>" becomes "<pod space>.abc.>"
//     at the broker, whatever follows the prefix: an application that
//     subscribes to another pod's inbox pattern gets its own space, where
//     nothing of the other pod's arrives;
//   - a PUB's or HPUB's reply subject under one: "_INBOX.abc.1" goes up as
//     "<pod space>.abc.1", so the replies come to the pod's space;
//   - a delivered message's subject back, for the SUB it is delivered to:
//     "<pod space>.abc.1" reaches the SUB "_INBOX.abc.>" as "_INBOX.abc.1".
//
// Subjects of publishes are never translated: a reply goes to the reply
// subject the request came with, which is already in its requester's
// space. Neither is a reply subject that already is in this pod's space,
// or that is the reply subject of a request this pod received (an
// application that forwards a request with its requester's reply subject).

// MaxInboxPrefixBytes bounds the pod's inbox space prefix: its translation
// adds at most this much to a forwarded control line, which
// protocol.UpstreamLineRoom keeps room for.
const MaxInboxPrefixBytes = 48

// inboxTokenLen is the length of the token of the inbox space the sidecar
// makes for itself: 100 random bits, in the alphabet (lower-case base32)
// and length of the operator's.
const inboxTokenLen = 20

// errInboxPending is why a request is refused while the pod's inbox space
// is not known yet (an inbox SUB waits for it instead: deferInboxSub).
var errInboxPending = errors.New("this pod's inbox space is not known yet: its broker credential has not arrived from the operator")

// newInboxSpace makes an inbox space of this sidecar's own:
// "_INBOX.<random token>".
func newInboxSpace() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return policy.Inbox + "." + strings.ToLower(base32.StdEncoding.EncodeToString(b[:])[:inboxTokenLen])
}

// validInboxSpace checks a pod's inbox space: "_INBOX." and literal
// tokens, within MaxInboxPrefixBytes.
func validInboxSpace(prefix string) error {
	switch {
	case len(prefix) > MaxInboxPrefixBytes:
		return fmt.Errorf("inbox prefix %q: longer than %d bytes", prefix, MaxInboxPrefixBytes)
	case !strings.HasPrefix(prefix, policy.Inbox+"."):
		return fmt.Errorf("inbox prefix %q: it must start with %s.", prefix, policy.Inbox)
	}
	if err := matcher.ValidateSubject(prefix); err != nil {
		return fmt.Errorf("inbox prefix %q: %w", prefix, err)
	}
	return nil
}

// podInbox returns the pod's inbox space, latched on first use: the
// credential's (Options.InboxPrefix) once it is known, or the sidecar's own
// when there is no credential or it names none. ok is false while the
// credential has not arrived. The inbox SUBs made meanwhile are
// registered when it latches.
func (s *Server) podInbox() (string, bool) {
	if p := s.inbox.Load(); p != nil {
		return *p, true
	}
	prefix, ok := s.opts.InboxPrefix()
	if !ok {
		return "", false
	}
	if prefix == "" {
		prefix = newInboxSpace()
	} else if err := validInboxSpace(prefix); err != nil {
		// The broker would refuse the sidecar's inbox SUBs either way;
		// its own at least keeps the applications' inboxes apart.
		s.opts.Log.Error(err, "the broker credential's inbox prefix is unusable; using one of the sidecar's own")
		prefix = newInboxSpace()
	}
	s.inboxMu.Lock()
	latched := s.inbox.CompareAndSwap(nil, &prefix)
	waiting := s.inboxWaiting
	s.inboxWaiting = nil
	s.inboxMu.Unlock()
	if latched {
		s.opts.Log.Info("applications' inboxes are translated into this pod's inbox space", "inboxSpace", prefix, "inboxSubsWaiting", len(waiting))
	}
	for _, ls := range waiting {
		s.registerInboxSub(ls)
	}
	return *s.inbox.Load(), true
}

// deferInboxSub keeps an inbox SUB made before the pod's inbox space is
// known, to be registered once it is (podInbox): an application whose
// first request comes before the broker credential then gets its replies
// once the credential arrived, where a refused SUB would leave its
// client's request subscription dead. It reports false when the space
// became known meanwhile: the caller registers the SUB itself.
func (s *Server) deferInboxSub(ls *localSub) bool {
	s.inboxMu.Lock()
	defer s.inboxMu.Unlock()
	if s.inbox.Load() != nil {
		return false
	}
	s.inboxWaiting = append(s.inboxWaiting, ls)
	return true
}

// registerInboxSub gives a deferred inbox SUB its subscription at the
// broker, in the pod's inbox space, unless it was removed meanwhile.
func (s *Server) registerInboxSub(ls *localSub) {
	if ls.removed.Load() {
		return
	}
	if err := s.setInboxKey(ls); err == nil {
		err = s.subscribe(ls)
		if err == nil {
			return
		}
	}
	ls.conn.removeSub(ls, pending.ReasonUnsubscribed)
	ls.conn.queueErr(fmt.Sprintf("Permissions Violation for Subscription to %q: the broker refused it", ls.subject))
}

// setInboxKey translates a deferred inbox SUB's subject into the pod's
// inbox space, as its key at the broker; under interestMu, under which
// the key is read while the SUB is not registered (Stats).
func (s *Server) setInboxKey(ls *localSub) error {
	s.interestMu.Lock()
	defer s.interestMu.Unlock()
	key, mapping, err := s.translateSub(ls.subject, s.policy.Load())
	if err != nil {
		return err
	}
	ls.key.Subject, ls.inbox = key, mapping
	return nil
}

// InboxSpace is the pod's inbox space ("_INBOX.<token>"), or "" while it
// is not known yet.
func (s *Server) InboxSpace() string {
	p, _ := s.podInbox()
	return p
}

// inboxMapping is how one SUB's subjects translate: app, the application's
// inbox prefix it was under; pod, the pod's inbox space that replaced it.
type inboxMapping struct{ app, pod string }

// underPrefix returns what follows prefix in subject, when subject lies
// under it: at least one token after it.
func underPrefix(subject, prefix string) (rest string, ok bool) {
	if len(subject) <= len(prefix)+1 || subject[len(prefix)] != '.' || subject[:len(prefix)] != prefix {
		return "", false
	}
	return subject[len(prefix)+1:], true
}

// appInbox returns the application inbox prefix subject lies under, if
// any (the longest).
func appInbox(subject string, pol *policy.Publish) (string, bool) {
	for _, prefix := range pol.InboxPrefixes() {
		if _, ok := underPrefix(subject, prefix); ok {
			return prefix, true
		}
	}
	return "", false
}

// translateSub returns the broker's pattern for a SUB of pattern, and its
// mapping (nil when it is no inbox). err is errInboxPending while the
// pod's inbox space is not known.
func (s *Server) translateSub(pattern string, pol *policy.Publish) (string, *inboxMapping, error) {
	app, ok := appInbox(pattern, pol)
	if !ok {
		return pattern, nil, nil
	}
	pod, known := s.podInbox()
	if !known {
		return "", nil, errInboxPending
	}
	rest, _ := underPrefix(pattern, app)
	return pod + "." + rest, &inboxMapping{app: app, pod: pod}, nil
}

// translateReply appends to dst the reply subject a publish's reply goes up
// with, and reports whether it differs from reply (dst unused otherwise).
func (s *Server) translateReply(dst []byte, reply string, pol *policy.Publish) ([]byte, bool, error) {
	app, ok := appInbox(reply, pol)
	if !ok {
		return dst, false, nil
	}
	pod, known := s.podInbox()
	if !known {
		return dst, false, errInboxPending
	}
	if _, mine := underPrefix(reply, pod); mine || s.answerable.has(reply) {
		return dst, false, nil // already this pod's, or a received request's: forwarded as it is
	}
	rest, _ := underPrefix(reply, app)
	dst = append(append(append(dst, pod...), '.'), rest...)
	return dst, true, nil
}

// serviceReplyPrefix is where nats-server maps the reply subjects of
// requests that reach an account through a service import (another
// namespace's Topic that imports from this one): it carries the reply
// back to the requester's inbox.
const serviceReplyPrefix = "_R_"

// inInboxSpace reports whether subject lies in an inbox space as a reply
// subject arrives from the broker, translated: "_INBOX.<token>." or
// "_R_.<token>." (a request from another namespace), and at least one
// token more. The one-reply allowance is granted there alone.
func inInboxSpace(subject string) bool {
	rest, ok := underPrefix(subject, policy.Inbox)
	if !ok {
		if rest, ok = underPrefix(subject, serviceReplyPrefix); !ok {
			return false
		}
	}
	token, more, found := strings.Cut(rest, ".")
	return found && token != "" && more != ""
}

// appSubject is the subject a message on subject is delivered with to a
// SUB with mapping m: its application's form.
func (m *inboxMapping) appSubject(subject string) (prefix, rest string) {
	if m == nil {
		return "", subject
	}
	if after, ok := strings.CutPrefix(subject, m.pod); ok {
		return m.app, after
	}
	return "", subject
}
