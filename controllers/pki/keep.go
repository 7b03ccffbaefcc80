package pki

import (
	"context"
	"time"

	"github.com/go-logr/logr"
)

// keepEnsured calls ensure at once and then every interval, until ctx
// ends. It retries sooner after a failure, from firstRetry doubling up to
// interval. Failures are logged as failing to keep what, and retried
// rather than returned, because a transient API error must not stop the
// operator. The Authority and the route certificate run on it.
func keepEnsured(ctx context.Context, interval time.Duration, ensure func(context.Context) error, log logr.Logger, what string) error {
	retry := firstRetry
	for {
		wait := interval
		if err := ensure(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			wait = min(retry, interval)
			retry *= 2
			log.Error(err, "keeping "+what, "retryIn", wait)
		} else {
			retry = firstRetry
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
	}
}
