package meshconfig

// The CRDs' defaults and bounds (the kubebuilder markers of api/v1alpha1),
// for a sidecar configuration file that leaves a field out: a file should
// mean what the same Topic or Subscription means in the cluster. They live
// here because the sidecar must not import api/v1alpha1 (a Kubernetes
// package); api/v1alpha1's crddefaults_test.go compares them with the
// generated CRDs, so that they cannot drift.
const (
	// DefaultTopicMaxMessageBytes is a Topic's limits.maxMessageBytes
	// default (1 MiB), and MaxTopicMaxMessageBytes its maximum (8 MiB).
	DefaultTopicMaxMessageBytes = 1 << 20
	MaxTopicMaxMessageBytes     = 8 << 20
	// DefaultTopicStampHeader is a Topic's latency.stampHeader default.
	DefaultTopicStampHeader = true

	// DefaultSubscriptionEssential is a Subscription's essential default.
	DefaultSubscriptionEssential = true
	// DefaultMaxPendingMessages is a Subscription's
	// limits.maxPendingMessages default, MaxMaxPendingMessages its maximum.
	DefaultMaxPendingMessages = 1000
	MaxMaxPendingMessages     = 1_000_000
	// DefaultMaxPendingBytes is a Subscription's limits.maxPendingBytes
	// default (8 MiB), MaxMaxPendingBytes its maximum (1 GiB).
	DefaultMaxPendingBytes = 8 << 20
	MaxMaxPendingBytes     = 1 << 30
	// DefaultOverflow is a Subscription's limits.overflow default.
	DefaultOverflow = OverflowDropNewest

	// DefaultKillSwitchWindowMillis and DefaultKillSwitchCooldownMillis are
	// killSwitch.auto's window and cooldown defaults (30s each).
	DefaultKillSwitchWindowMillis   = 30_000
	DefaultKillSwitchCooldownMillis = 30_000
)

// Overflow policies of a Subscription's limits.
const (
	OverflowDropNewest = "DropNewest"
	OverflowDropOldest = "DropOldest"
)
