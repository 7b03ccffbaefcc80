package meshconfig

import (
	"fmt"
	"strings"

	"github.com/weighstation/weighstation/matcher"
)

// ReservedToken is the first token of the subjects reserved for
// weighstation: no Topic or Subscription may name them, and sidecars never
// open them to applications.
const ReservedToken = "$WEIGHSTATION"

// Bounds of killSwitch.auto, as the Subscription CRD's rules state them.
const (
	MinKillSwitchWindowMillis   = 1_000
	MaxKillSwitchWindowMillis   = 3_600_000
	MinKillSwitchCooldownMillis = 1_000
	MaxKillSwitchCooldownMillis = 86_400_000
)

// MaxQueueGroupLength bounds a Subscription's queueGroup, as its CRD does.
const MaxQueueGroupLength = 255

// validateFile checks a file's configuration, after its defaults, against
// what the cluster would accept of the same Topics and Subscriptions (the
// CRDs' bounds and rules), naming each problem by its path in the file.
func validateFile(p *problems, cfg PodConfig) {
	validateTopic(p, "default", cfg.Default, 0)
	topicNames, topicSubjects := map[string]int{}, map[string]int{}
	for i, tp := range cfg.Topics {
		path := fmt.Sprintf("topics[%d]", i)
		validateName(p, path, tp.Name, topicNames, i, "topics")
		if validateSubject(p, path, tp.Subject) {
			if j, dup := topicSubjects[tp.Subject]; dup {
				p.addf("%s.subject %q is topics[%d]'s too: two Topics with one pattern conflict, and neither would govern reliably", path, tp.Subject, j)
			} else {
				topicSubjects[tp.Subject] = i
			}
		}
		validateTopic(p, path, tp, MaxTopicMaxMessageBytes)
	}
	subNames := map[string]int{}
	for i, sp := range cfg.Subscriptions {
		path := fmt.Sprintf("subscriptions[%d]", i)
		validateName(p, path, sp.Name, subNames, i, "subscriptions")
		validateSubject(p, path, sp.Subject)
		validateSubscription(p, path, sp)
	}
	switch cfg.Access.Mode {
	case AccessEnforce, AccessAudit:
	default:
		p.addf("access.mode must be %s or %s, got %q", AccessEnforce, AccessAudit, cfg.Access.Mode)
	}
	if cfg.Access.InboxPrefix != "" {
		if err := ValidateInboxPrefix(cfg.Access.InboxPrefix); err != nil {
			p.addf("access.inboxPrefix: %v", err)
		}
	}
}

// validateName requires a unique name: it labels the policy's metrics and
// keys its kill switch.
func validateName(p *problems, path, name string, seen map[string]int, i int, list string) {
	if name == "" {
		p.addf("%s.name is required: it names the policy in metrics, logs and errors", path)
		return
	}
	if j, dup := seen[name]; dup {
		p.addf("%s.name %q is %s[%d]'s too: names must be unique", path, name, list, j)
		return
	}
	seen[name] = i
}

// validateSubject reports whether the pattern is usable.
func validateSubject(p *problems, path, subject string) bool {
	if subject == "" {
		p.addf("%s.subject is required (a subject pattern such as orders.>)", path)
		return false
	}
	if err := matcher.ValidatePattern(subject); err != nil {
		p.addf("%s.subject %q: %v", path, subject, err)
		return false
	}
	if first, _, _ := strings.Cut(subject, "."); first == ReservedToken {
		p.addf("%s.subject %q: subjects under %s are reserved for weighstation", path, subject, ReservedToken)
		return false
	}
	return true
}

// validateTopic checks a Topic's limits; max bounds maxMessageBytes (0: no
// bound, for the default policy, which the operator's flags set freely).
func validateTopic(p *problems, path string, tp TopicPolicy, max int64) {
	switch {
	case tp.MaxMessageBytes < 1:
		p.addf("%s.maxMessageBytes must be positive, got %d", path, tp.MaxMessageBytes)
	case max > 0 && tp.MaxMessageBytes > max:
		p.addf("%s.maxMessageBytes must be at most %d (8 MiB), got %d", path, max, tp.MaxMessageBytes)
	}
	if path == "default" && tp.Subject != ">" {
		p.addf("default.subject must be \">\" (the default policy governs every subject no Topic does), got %q", tp.Subject)
	}
	if r := tp.PublishRate; r != nil {
		validateRate(p, path, *r, tp.MaxMessageBytes)
	}
}

// checkLimit checks that a limit (field) is positive and at most max;
// unit follows max in the message.
func checkLimit(p *problems, field string, v, max int64, unit string) {
	switch {
	case v < 1:
		p.addf("%s must be positive, got %d", field, v)
	case v > max:
		p.addf("%s must be at most %d%s, got %d", field, max, unit, v)
	}
}

// validateRate checks a quota as the Topic CRD does: each rate with its
// burst, and a byte burst that admits the largest allowed message.
func validateRate(p *problems, path string, r Rate, maxMessageBytes int64) {
	rp := path + ".publishRate"
	for _, f := range []struct {
		name  string
		value int64
	}{{"messagesPerSecond", r.MessagesPerSecond}, {"messagesBurst", r.MessagesBurst}, {"bytesPerSecond", r.BytesPerSecond}, {"bytesBurst", r.BytesBurst}} {
		if f.value < 0 {
			p.addf("%s.%s must be positive, got %d", rp, f.name, f.value)
		}
	}
	if (r.MessagesPerSecond > 0) != (r.MessagesBurst > 0) {
		p.addf("%s.messagesPerSecond and %s.messagesBurst must be set together (a rate without a burst refuses every message)", rp, rp)
	}
	if (r.BytesPerSecond > 0) != (r.BytesBurst > 0) {
		p.addf("%s.bytesPerSecond and %s.bytesBurst must be set together (a rate without a burst refuses every message)", rp, rp)
	}
	if r.BytesBurst > 0 && r.BytesBurst < maxMessageBytes {
		p.addf("%s.bytesBurst (%d) must be at least %s.maxMessageBytes (%d): a smaller burst would refuse the largest allowed messages forever", rp, r.BytesBurst, path, maxMessageBytes)
	}
}

func validateSubscription(p *problems, path string, sp SubscriptionPolicy) {
	if q := sp.QueueGroup; q != "" && (len(q) > MaxQueueGroupLength || strings.ContainsAny(q, " \t\n\r\f*>")) {
		p.addf("%s.queueGroup %q must be at most %d bytes without whitespace, '*' or '>'", path, q, MaxQueueGroupLength)
	}
	lp := path + ".limits"
	checkLimit(p, lp+".maxPendingMessages", int64(sp.Limits.MaxPendingMessages), MaxMaxPendingMessages, "")
	checkLimit(p, lp+".maxPendingBytes", sp.Limits.MaxPendingBytes, MaxMaxPendingBytes, " (1 GiB)")
	if o := sp.Limits.Overflow; o != OverflowDropNewest && o != OverflowDropOldest {
		p.addf("%s.overflow must be %s or %s, got %q", lp, OverflowDropNewest, OverflowDropOldest, o)
	}
	auto := sp.KillSwitch.Auto
	if auto == nil {
		return
	}
	ap := path + ".killSwitch.auto"
	if sp.Essential {
		p.addf("%s is only allowed with %s.essential: false (essential subscriptions never trip automatically; essential defaults to true)", ap, path)
	}
	if auto.MaxPendingMessages == 0 && auto.MaxLatencyMillis == 0 {
		p.addf("%s needs maxPendingMessages, maxLatencyMillis or both to trip on", ap)
	}
	if auto.MaxPendingMessages < 0 {
		p.addf("%s.maxPendingMessages must be positive, got %d", ap, auto.MaxPendingMessages)
	} else if auto.MaxPendingMessages > sp.Limits.MaxPendingMessages {
		p.addf("%s.maxPendingMessages (%d) must not exceed %s.maxPendingMessages (%d): the queue would drop before the switch trips", ap, auto.MaxPendingMessages, lp, sp.Limits.MaxPendingMessages)
	}
	if auto.MaxLatencyMillis < 0 {
		p.addf("%s.maxLatencyMillis must be positive, got %d", ap, auto.MaxLatencyMillis)
	}
	if w := auto.WindowMillis; w < MinKillSwitchWindowMillis || w > MaxKillSwitchWindowMillis {
		p.addf("%s.windowMillis must be between %d (1s) and %d (1h), got %d", ap, MinKillSwitchWindowMillis, MaxKillSwitchWindowMillis, w)
	}
	if c := auto.CooldownMillis; c < MinKillSwitchCooldownMillis || c > MaxKillSwitchCooldownMillis {
		p.addf("%s.cooldownMillis must be between %d (1s) and %d (24h), got %d", ap, MinKillSwitchCooldownMillis, MaxKillSwitchCooldownMillis, c)
	}
}
