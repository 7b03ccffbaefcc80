package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/weighstation/weighstation/meshconfig"
)

// Subject permissions (ACLs). A pod may SUB only patterns that the
// Subscriptions selecting it cover (matcher.Covers), and its own inboxes:
// "_INBOX.<token>..." (or under its declared custom prefix) where the token
// after the prefix is a literal. "_INBOX.>" and "_INBOX.*" would read every
// reply in the cluster without the sidecar, which translates every inbox
// SUB into its pod's own inbox space (sidecar/inbox.go); the rule stays, for
// a sidecar whose broker does not pin inboxes. It may PUB where the governing Topic's publishers
// selector admits it (or there is none). '$' subjects (JetStream $JS, $KV,
// $SYS) are open only where a Topic or Subscription names them: its pattern
// starts with the same '$' token. Subjects under ReservedToken belong to
// weighstation and are never open to applications, in either mode.

// ReservedToken is the first token of the subjects weighstation keeps for
// itself (meshconfig's, which the configuration file's check uses too).
const ReservedToken = meshconfig.ReservedToken

// Inbox is NATS's default inbox prefix.
const Inbox = "_INBOX"

// Rule names the permission a SUB or PUB lacked.
type Rule uint8

const (
	// Allowed: no rule refuses it.
	Allowed Rule = iota
	// RuleNotCovered: no Subscription selecting the pod covers the pattern.
	RuleNotCovered
	// RuleInboxWildcard: an inbox pattern whose token after the prefix is a
	// wildcard (or missing), which would read other pods' replies.
	RuleInboxWildcard
	// RuleDollar: a '$' subject that no Topic or Subscription names.
	RuleDollar
	// RuleReserved: a subject reserved for weighstation.
	RuleReserved
	// RuleNotPublisher: the governing Topic's publishers selector does not
	// select the pod.
	RuleNotPublisher
	NumRules
)

func (r Rule) String() string {
	switch r {
	case Allowed:
		return "allowed"
	case RuleNotCovered:
		return "not-covered"
	case RuleInboxWildcard:
		return "inbox-wildcard"
	case RuleDollar:
		return "dollar"
	case RuleReserved:
		return "reserved"
	case RuleNotPublisher:
		return "not-publisher"
	}
	return fmt.Sprintf("Rule(%d)", uint8(r))
}

// Explain is the rule in words, for the error the client gets.
func (r Rule) Explain() string {
	switch r {
	case RuleNotCovered:
		return "no Subscription selecting this pod covers it"
	case RuleInboxWildcard:
		return "an inbox subscription must name its own inbox with a literal token after the prefix; a wildcard there would read every pod's replies"
	case RuleDollar:
		return "'$' subjects are open only where a Topic or Subscription names them"
	case RuleReserved:
		return "subjects under " + ReservedToken + " are reserved for weighstation"
	case RuleNotPublisher:
		return "the governing Topic's publishers selector does not select this pod"
	}
	return r.String()
}

// access is the compiled Access of a configuration.
type access struct {
	audit bool
	// inboxes are the inbox prefixes, split into tokens; prefixes the same
	// whole, longest first.
	inboxes  [][]string
	prefixes []string
}

func compileAccess(a meshconfig.Access) (access, error) {
	var out access
	switch a.Mode {
	case meshconfig.AccessEnforce, "":
	case meshconfig.AccessAudit:
		out.audit = true
	default:
		return access{}, fmt.Errorf("access mode %q: it must be %q or %q", a.Mode, meshconfig.AccessEnforce, meshconfig.AccessAudit)
	}
	out.inboxes = [][]string{{Inbox}}
	if a.InboxPrefix != "" {
		if err := meshconfig.ValidateInboxPrefix(a.InboxPrefix); err != nil {
			return access{}, err
		}
		out.inboxes = append(out.inboxes, strings.Split(a.InboxPrefix, "."))
	}
	for _, p := range out.inboxes {
		out.prefixes = append(out.prefixes, strings.Join(p, "."))
	}
	// The longest first, so that a custom prefix under _INBOX ("_INBOX.app")
	// is found before _INBOX.
	slices.SortStableFunc(out.prefixes, func(a, b string) int { return len(b) - len(a) })
	return out, nil
}

// InboxPrefixes are the application's inbox prefixes: Inbox, and the
// configuration's custom one (Access.InboxPrefix), longest first. The
// sidecar translates subjects under them into its pod's own inbox space.
func (p *Publish) InboxPrefixes() []string { return p.access.prefixes }

// Audit reports whether refusals are only counted and logged.
func (p *Publish) Audit() bool { return p.access.audit }

// CheckSubscribe says which rule, if any, refuses a SUB of pattern (a
// valid pattern).
func (p *Publish) CheckSubscribe(pattern string) Rule {
	first, _, _ := strings.Cut(pattern, ".")
	if first == ReservedToken {
		return RuleReserved
	}
	for _, prefix := range p.access.inboxes {
		if inbox, ok := inboxPattern(pattern, prefix); inbox {
			if ok {
				return Allowed
			}
			return RuleInboxWildcard
		}
	}
	sp, covered := p.SubscriptionFor(pattern)
	if strings.HasPrefix(first, "$") && !(covered && startsWithToken(sp.Subject, first)) {
		return RuleDollar
	}
	if !covered {
		return RuleNotCovered
	}
	return Allowed
}

// CheckPublish says which rule, if any, refuses a PUB to subject (a valid
// subject) governed by t.
func (p *Publish) CheckPublish(subject string, t *Topic) Rule {
	first, _, _ := strings.Cut(subject, ".")
	if first == ReservedToken {
		return RuleReserved
	}
	if strings.HasPrefix(first, "$") && !(t != p.defaultPol && startsWithToken(t.Policy.Subject, first)) {
		return RuleDollar
	}
	if !t.Policy.MayPublish {
		return RuleNotPublisher
	}
	return Allowed
}

// startsWithToken reports whether pattern's first token is token: the
// pattern names it, literally.
func startsWithToken(pattern, token string) bool {
	return pattern == token || strings.HasPrefix(pattern, token+".")
}

// inboxPattern reports whether pattern lies under the inbox prefix, and if
// so whether it names one inbox: the token after the prefix is a literal.
func inboxPattern(pattern string, prefix []string) (inbox, ok bool) {
	rest := pattern
	for i, want := range prefix {
		tok, after, more := strings.Cut(rest, ".")
		if tok != want {
			// A wildcard where the prefix is would cover every inbox:
			// "*.x" is not under the prefix; the coverage rule judges it.
			return false, false
		}
		if !more {
			// The prefix itself, or part of it: "_INBOX" alone.
			return i == len(prefix)-1, false
		}
		rest = after
	}
	tok, _, _ := strings.Cut(rest, ".")
	return true, tok != "*" && tok != ">"
}
