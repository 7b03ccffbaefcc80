package e2e

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrTimeout is what Poll returns, wrapped, when its condition did not
// hold in time.
var ErrTimeout = errors.New("timed out")

// Check is one look at a condition: whether it holds, and what was seen
// (for the error when it never does). It gets a context bounded by the
// poll's deadline.
type Check func(ctx context.Context) (done bool, status string)

// Poll calls check at once and then every interval until it holds, and
// returns when it was first seen to hold. After timeout, or when ctx ends,
// it returns an error naming what and the last status. Every wait of the
// stories goes through it: none sleeps and hopes.
func Poll(ctx context.Context, what string, timeout, interval time.Duration, check Check) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	status := "not checked"
	for {
		done, s := check(ctx)
		if done {
			return time.Now(), nil
		}
		if s != "" {
			status = s
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return time.Time{}, fmt.Errorf("%s: %w after %s; last seen: %s", what, ErrTimeout, timeout, status)
			}
			return time.Time{}, fmt.Errorf("%s: %w; last seen: %s", what, ctx.Err(), status)
		case <-tick.C:
		}
	}
}
