// Package meshconfig holds the configuration types that one sidecar
// enforces: every policy its pod is under, versioned by a hash of its
// content. The operator computes it (controllers/desired) and sends it over
// xDS (meshconfig/xdsresource); the sidecar reads it from there or from a
// file and enforces it.
//
// It is a leaf shared by the operator and the sidecar, so it must import no
// Kubernetes package: the sidecar carries none.
package meshconfig

// PodConfig is everything one sidecar enforces. Its JSON form is what
// sidecars receive, and it is deterministic: slices are sorted, so equal
// inputs give byte-equal output and an equal Version.
type PodConfig struct {
	// Namespace and Pod name the pod this configuration is for.
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`

	// Version is a hash of everything below: it changes exactly when the
	// content does.
	Version string `json:"version"`

	// Topics are the publishing policies of the pod's namespace, sorted by
	// subject. For a published subject, the most specific matching Topic
	// governs (matcher.CompareSpecificity); Default governs subjects no
	// Topic matches, so nothing is unbounded.
	Topics  []TopicPolicy `json:"topics"`
	Default TopicPolicy   `json:"default"`

	// Subscriptions are those whose selector matches the pod, sorted by
	// name.
	Subscriptions []SubscriptionPolicy `json:"subscriptions"`

	// Access is how the pod's subject permissions are applied.
	Access Access `json:"access"`
}

// Access modes.
const (
	// AccessEnforce refuses what the pod may not do.
	AccessEnforce = "enforce"
	// AccessAudit allows it, counts it and logs it.
	AccessAudit = "audit"
)

// Access is how the sidecar applies the pod's subject permissions: it may
// subscribe to patterns its Subscriptions cover and to its own inboxes, and
// publish where the governing Topic lets it.
type Access struct {
	// Mode is AccessEnforce or AccessAudit.
	Mode string `json:"mode"`
	// InboxPrefix is a custom inbox prefix the pod may subscribe under, as
	// under "_INBOX" ("" for none).
	InboxPrefix string `json:"inboxPrefix,omitempty"`
}

// TopicPolicy is one Topic as it applies to this pod.
type TopicPolicy struct {
	// Name is the Topic's name ("" for the operator's default policy).
	Name            string `json:"name,omitempty"`
	Subject         string `json:"subject"`
	MaxMessageBytes int64  `json:"maxMessageBytes"`
	// PublishRate is the pod's publish quota; nil means none beyond the
	// size limit.
	PublishRate *Rate `json:"publishRate,omitempty"`
	// MayPublish says whether the Topic's publishers selector (if any)
	// admits this pod.
	MayPublish bool `json:"mayPublish"`
	// StampHeader allows the sidecar's latency timestamp header.
	StampHeader bool `json:"stampHeader"`
}

// Rate is a pair of token buckets; a zero rate leaves that dimension
// unlimited.
type Rate struct {
	MessagesPerSecond int64 `json:"messagesPerSecond,omitempty"`
	MessagesBurst     int64 `json:"messagesBurst,omitempty"`
	BytesPerSecond    int64 `json:"bytesPerSecond,omitempty"`
	BytesBurst        int64 `json:"bytesBurst,omitempty"`
}

// SubscriptionPolicy is one Subscription that selects this pod.
type SubscriptionPolicy struct {
	Name       string     `json:"name"`
	Subject    string     `json:"subject"`
	QueueGroup string     `json:"queueGroup,omitempty"`
	Essential  bool       `json:"essential"`
	KillSwitch KillSwitch `json:"killSwitch"`
	Limits     Limits     `json:"limits"`
}

// KillSwitch is a Subscription's kill switch state and automatic policy.
type KillSwitch struct {
	Engaged bool   `json:"engaged"`
	Reason  string `json:"reason,omitempty"`
	// Auto is nil unless the Subscription trips automatically.
	Auto *AutoKillSwitch `json:"auto,omitempty"`
}

// AutoKillSwitch is when a kill switch trips by itself; durations are in
// milliseconds so that the JSON is language-neutral.
type AutoKillSwitch struct {
	MaxPendingMessages int32 `json:"maxPendingMessages,omitempty"`
	MaxLatencyMillis   int64 `json:"maxLatencyMillis,omitempty"`
	WindowMillis       int64 `json:"windowMillis"`
	CooldownMillis     int64 `json:"cooldownMillis"`
}

// Limits bound a subscription's pending queue in the sidecar.
type Limits struct {
	MaxPendingMessages int32  `json:"maxPendingMessages"`
	MaxPendingBytes    int64  `json:"maxPendingBytes"`
	Overflow           string `json:"overflow"`
}
