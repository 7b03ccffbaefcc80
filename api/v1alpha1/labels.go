package v1alpha1

const (
	// InjectLabel on a pod asks for the weighstation sidecar; its value must
	// be InjectEnabled. Only such pods get a configuration.
	InjectLabel = "weighstation.io/inject"
	// InjectEnabled is InjectLabel's value that enables the sidecar.
	InjectEnabled = "enabled"
	// InjectedAnnotation is set by the injection webhook on every pod it
	// gave the sidecar; its value is the sidecar's version. An opted-in
	// pod without it missed injection (see ConditionPodsWithoutSidecar).
	InjectedAnnotation = "weighstation.io/injected"
)

// Labels and annotations that shape the pods' subject permissions (ACLs).
const (
	// AccessModeLabel on a Namespace is "enforce" (refuse what the pod's
	// Topics and Subscriptions do not allow) or "audit" (allow, count and
	// log it), for rolling ACLs out; without it, the operator's
	// -access-mode (default enforce). It is a namespace label, set by
	// whoever administers namespaces, not a pod annotation: a pod cannot
	// turn its own ACLs off. (A pod annotation of the same name, which
	// earlier versions read, is ignored.)
	AccessModeLabel = "weighstation.io/access-mode"
	// InboxPrefixAnnotation declares a custom inbox prefix (nats.go's
	// CustomInboxPrefix) that the pod may subscribe under, like _INBOX.
	InboxPrefixAnnotation = "weighstation.io/inbox-prefix"
)

// Status has several writers. Each field and each condition type has one
// owner, a server-side apply field manager, and each writer applies only
// its own fields, unforced, so that no writer reverts another:
//
//	fields                                            owner (field manager)
//	observedGeneration, Topic subscriptions,          FieldManagerReconciler
//	  conditions Valid, Conflicting, KillSwitchEngaged;
//	  Events InvalidSelector, Conflicting
//	config (version, appliedPods, totalPods,          FieldManagerPropagation
//	  rejected, observedTime, propagationTime),
//	  conditions Ready, ConfigRejected
//	aggregate, pods[], dropped, killed,               FieldManagerReports
//	  Topic publish, condition Degraded
//	condition PodsWithoutSidecar                      FieldManagerInjection
//	  Events SidecarNotInjected, SidecarOutdated (on pods)
const (
	FieldManagerReconciler  = "weighstation-operator"
	FieldManagerPropagation = "weighstation-propagation"
	FieldManagerReports     = "weighstation-reports"
	FieldManagerInjection   = "weighstation-injection"
)

// Condition types.
const (
	// ConditionValid: the spec is valid and, for a Topic, in force.
	ConditionValid = "Valid"
	// ConditionReady: every counted pod's sidecar applied the current
	// version of the resource's policy.
	ConditionReady = "Ready"
	// ConditionConfigRejected: some pod's sidecar refused (NACKed) the
	// current version; status.config.rejected says why.
	ConditionConfigRejected = "ConfigRejected"
	// ConditionConflicting: another Topic of the namespace has the same
	// subject pattern.
	ConditionConflicting = "Conflicting"
	// ConditionKillSwitchEngaged: delivery to the Subscription is stopped.
	ConditionKillSwitchEngaged = "KillSwitchEngaged"
	// ConditionDegraded: the sidecars report trouble: stale pods, a
	// refused configuration, tripped breakers, or drops for reasons that
	// mean loss (overflow, budget, shed, connection, shutdown).
	ConditionDegraded = "Degraded"
	// ConditionPodsWithoutSidecar: some pod the resource selects (a
	// Subscription's selector, a Topic's publishers) was opted in for the
	// sidecar but runs without it (the webhook was not called), or with a
	// sidecar older than the operator supports.
	ConditionPodsWithoutSidecar = "PodsWithoutSidecar"
)
