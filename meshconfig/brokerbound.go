package meshconfig

import (
	"maps"
	"slices"
	"strings"

	"github.com/weighstation/weighstation/matcher"
)

// BrokerBound is what a pod's broker credential allows: an upper bound of what
// its sidecar enforces, checked by the broker at every publish and
// subscription, so that a credential copied out of a sidecar can do no
// more than the pod could, inside its namespace's account.
//
// It is coarse on purpose. nats-server reads a user's permissions at
// CONNECT only, so a bound that followed every policy change would cost a
// reconnection per change; this one changes only when the pod's subject
// set widens (a Subscription that selects it, a Topic that starts letting
// it publish, a larger Topic size). Topic rates and kill switches never
// change it: the sidecar enforces those, at once.
type BrokerBound struct {
	// PublishAllow and PublishDeny are the subjects the pod may publish to
	// (nats-server: allowed when some allow pattern matches and no deny
	// pattern does). Replies to requests it received go through
	// allow_responses instead, one per request.
	PublishAllow, PublishDeny []string
	// SubscribeAllow are the patterns the pod may subscribe to: its
	// Subscriptions' subjects and its own inbox space.
	SubscribeAllow []string
	// MaxPayload is the largest message the pod may publish: the largest
	// Topic size of its namespace (or the default policy's), and
	// ReservedHeaderRoom for the headers its sidecar adds.
	MaxPayload int64
}

// ReservedHeaderRoom is what a sidecar adds to a message at most, its
// reserved headers (the sidecar's stampRoom): it checks the application's
// message against the Topic's size, then adds them, and nats-server closes
// a connection that publishes past its payload limit, so the bound leaves
// this much above the largest Topic size.
const ReservedHeaderRoom = 128

// reservedPublishDeny are the '$' subject spaces a sidecar opens only where
// a Topic or Subscription names them (docs/sidecar.md, Subject
// permissions); the broker refuses them otherwise. "$WEIGHSTATION" is
// reserved and never open. A namespace account has no JetStream and no
// system access, so these matter most on an external NATS; the bound is the
// same everywhere.
var reservedPublishDeny = []string{"$JS.>", "$KV.>", "$O.>", "$SRV.>", "$SYS.>"}

// weighstationReserved is never open to a pod.
const weighstationReserved = "$WEIGHSTATION.>"

// BrokerBoundOf returns the bound of a pod's configuration, with inboxPrefix (the
// pod's own inbox space, InboxPrefix) as the only inboxes it may
// subscribe under. In audit mode the sidecar lets the pod try anything of
// its namespace, so the bound is the namespace-wide one: every
// Subscription subject of the namespace (namespaceSubscriptions) and every
// Topic.
func BrokerBoundOf(cfg PodConfig, inboxPrefix string, namespaceSubscriptions []string) BrokerBound {
	audit := cfg.Access.Mode == AccessAudit
	b := BrokerBound{PublishAllow: []string{">"}, MaxPayload: cfg.Default.MaxMessageBytes}
	named := map[string]bool{} // '$' tokens a Topic or Subscription names
	for _, t := range cfg.Topics {
		b.MaxPayload = max(b.MaxPayload, t.MaxMessageBytes)
		if tok, ok := dollarToken(t.Subject); ok && (t.MayPublish || audit) {
			named[tok] = true
		}
	}
	subscribe := map[string]bool{inboxPrefix + ".>": true}
	subjects := make([]string, 0, len(cfg.Subscriptions))
	for _, s := range cfg.Subscriptions {
		subjects = append(subjects, s.Subject)
	}
	if audit {
		subjects = append(subjects, namespaceSubscriptions...)
	}
	for _, s := range subjects {
		if strings.HasPrefix(s, weighstationReserved[:len(weighstationReserved)-2]) {
			continue
		}
		subscribe[s] = true
		if tok, ok := dollarToken(s); ok {
			named[tok] = true
		}
	}
	b.SubscribeAllow = slices.Sorted(maps.Keys(subscribe))

	deny := map[string]bool{weighstationReserved: true}
	for _, d := range reservedPublishDeny {
		if tok, _ := dollarToken(d); !named[tok] {
			deny[d] = true
		}
	}
	if !audit {
		for _, t := range cfg.Topics {
			if t.MayPublish || refinedForPod(t, cfg.Topics) {
				continue
			}
			deny[t.Subject] = true
		}
	}
	b.PublishDeny = slices.Sorted(maps.Keys(deny))
	b.MaxPayload += ReservedHeaderRoom
	return b
}

// refinedForPod reports whether a more specific Topic that the pod may
// publish to overlaps t: nats-server's deny wins over allow, so denying t
// would refuse what that Topic allows. The bound then allows t's subjects
// (the sidecar still refuses them): an upper bound may be wider, never
// narrower.
func refinedForPod(t TopicPolicy, topics []TopicPolicy) bool {
	for _, o := range topics {
		if o.MayPublish && matcher.CompareSpecificity(o.Subject, t.Subject) > 0 && matcher.Overlaps(o.Subject, t.Subject) {
			return true
		}
	}
	return false
}

// dollarToken returns a '$' pattern's first token ("$JS").
func dollarToken(pattern string) (string, bool) {
	if !strings.HasPrefix(pattern, "$") {
		return "", false
	}
	tok, _, _ := strings.Cut(pattern, ".")
	return tok, true
}

// Covers reports whether b allows at least what want does: a credential
// with b needs no renewal for want.
func (b BrokerBound) Covers(want BrokerBound) bool {
	return b.MaxPayload >= want.MaxPayload &&
		isSubset(want.SubscribeAllow, b.SubscribeAllow) &&
		isSubset(want.PublishAllow, b.PublishAllow) &&
		isSubset(b.PublishDeny, want.PublishDeny)
}

func isSubset(small, large []string) bool {
	for _, s := range small {
		if !slices.Contains(large, s) {
			return false
		}
	}
	return true
}
