package v1alpha1

const (
	// InjectLabel on a pod asks for the weighstation sidecar; its value must
	// be InjectEnabled. Only such pods get a configuration.
	InjectLabel = "weighstation.io/inject"
	// InjectEnabled is InjectLabel's value that enables the sidecar.
	InjectEnabled = "enabled"
)

// Pod annotations that shape the pod's subject permissions (ACLs).
const (
	// AccessModeAnnotation is "enforce" (the default: refuse what the
	// pod's Topics and Subscriptions do not allow) or "audit" (allow, count
	// and log it), for rolling ACLs out.
	AccessModeAnnotation = "weighstation.io/access-mode"
	// InboxPrefixAnnotation declares a custom inbox prefix (nats.go's
	// CustomInboxPrefix) that the pod may subscribe under, like _INBOX.
	InboxPrefixAnnotation = "weighstation.io/inbox-prefix"
)

// Condition types.
const (
	// ConditionReady: the resource's policy is in force.
	ConditionReady = "Ready"
	// ConditionConflicting: another Topic of the namespace has the same
	// subject pattern.
	ConditionConflicting = "Conflicting"
	// ConditionKillSwitchEngaged: delivery to the Subscription is stopped.
	ConditionKillSwitchEngaged = "KillSwitchEngaged"
	// ConditionDegraded: some consuming pods drop messages or are killed.
	ConditionDegraded = "Degraded"
)
