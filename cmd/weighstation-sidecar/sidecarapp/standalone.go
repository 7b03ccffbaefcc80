package sidecarapp

import (
	"fmt"

	"github.com/go-logr/logr"

	"github.com/weighstation/weighstation/meshconfig"
)

// logStandaloneDefaults says, at the start of a sidecar with neither
// -config nor -operator, what its documented defaults allow. Under them a
// stock client may subscribe only to its own inboxes: every other SUB fails
// with a Permissions Violation, and without this line nothing in the log
// would tell a new user why, or what to do.
func logStandaloneDefaults(log logr.Logger, d meshconfig.Defaults) {
	log.Info(standaloneDefaultsMessage(d),
		"maySubscribe", "only the application's own inboxes, _INBOX.<token>.>",
		"mayPublish", "every subject but those starting with '$'",
		"maxMessageBytes", d.MaxMessageBytes,
		"messagesPerSecond", d.PublishRate.MessagesPerSecond,
		"bytesPerSecond", d.PublishRate.BytesPerSecond)
}

func standaloneDefaultsMessage(d meshconfig.Defaults) string {
	return fmt.Sprintf("no -config and no -operator: running on the documented defaults, under which applications may publish to every subject "+
		"but those starting with '$' (messages of at most %d bytes, %d messages/s and %d bytes/s), and may subscribe ONLY to their own inboxes "+
		"(_INBOX.<token>.>): every other SUB is refused with a Permissions Violation. To let them subscribe, give -config FILE, "+
		"a pod configuration with Subscriptions (README, \"Standalone mode\"; example: config/samples/sidecar/sidecar-config.yaml), "+
		"or, in a cluster, -operator ADDRESS",
		d.MaxMessageBytes, d.PublishRate.MessagesPerSecond, d.PublishRate.BytesPerSecond)
}
