package meshconfig

// Defaults is the operator's policy for subjects that no Topic governs, so
// that nothing is unbounded. The operator's flags set it; DefaultPolicy
// documents the values used when they do not.
type Defaults struct {
	MaxMessageBytes int64
	PublishRate     Rate
	StampHeader     bool
}

// DefaultPolicy: NATS's own default max_payload (1 MiB) for size; for rate,
// 1,000 messages/s with a burst of 2,000 and 8 MiB/s with a burst of 16 MiB
// per pod, generous for a service that has not declared a Topic yet and
// small enough that one runaway pod cannot flood a broker.
var DefaultPolicy = Defaults{
	MaxMessageBytes: 1 << 20,
	PublishRate: Rate{
		MessagesPerSecond: 1000,
		MessagesBurst:     2000,
		BytesPerSecond:    8 << 20,
		BytesBurst:        16 << 20,
	},
	StampHeader: true,
}

// DefaultSidecarMemoryBudget is the sidecar's default -memory-budget, 64
// MiB: the operator sizes the injected sidecar's memory limit from it, so
// it lives here, where both read it, rather than in the sidecar package.
const DefaultSidecarMemoryBudget = 64 << 20
