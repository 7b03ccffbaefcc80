// Package keep runs a reconcile-like function on a schedule: at once, then
// every interval and on every wake-up, retrying sooner after a failure.
// The operator keeps its CA, its certificates and the webhook's caBundle
// this way.
package keep

import (
	"context"
	"time"

	"github.com/go-logr/logr"
)

// FirstRetry is how soon a failed call is retried; later retries double,
// up to the interval. The usual failure is an API server that is briefly
// unavailable, so the first retry is quick.
const FirstRetry = time.Second

// Run calls do at once, then every interval and whenever wake fires (nil:
// never), until ctx ends. Failures are logged as failing to keep what, and
// retried rather than returned, because a transient API error must not
// stop the operator. It returns nil when ctx ends.
func Run(ctx context.Context, interval time.Duration, wake <-chan struct{}, do func(context.Context) error, log logr.Logger, what string) error {
	retry := FirstRetry
	for {
		wait := interval
		if err := do(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			wait = min(retry, interval)
			retry *= 2
			log.Error(err, "keeping "+what, "retryIn", wait)
		} else {
			retry = FirstRetry
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-wake:
			timer.Stop()
		case <-timer.C:
		}
	}
}
