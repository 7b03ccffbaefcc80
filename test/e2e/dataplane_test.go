//go:build e2e

package e2e

import (
	"context"
	"time"

	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

// Bounds of the data-plane checks.
const (
	keepsFlowing = 30 * time.Second
	// lossWindowMargin is added after a fault's recovery: the time for a
	// gap to be seen (the next message) and for the stats to be read.
	lossWindowMargin = 5 * time.Second
)

// subscriberNow reads the subscriber's stats.
func (s *stepRun) subscriberNow(ctx context.Context) probestats.Stats {
	st, err := s.c.probeStats(ctx, s.cfg.AppNamespace, PodSubscriber)
	if err != nil {
		s.fatalf("%v", err)
	}
	return st
}

// checkStillFlowing checks that the subscriber receives more than it had
// in before: the stream goes on after a fault.
func (s *stepRun) checkStillFlowing(ctx context.Context, before probestats.Stats) {
	if _, err := s.waitReceivedBeyond(ctx, before.Subscriber.Received+minFlowGrowth, keepsFlowing); err != nil {
		s.errorf("the stream stopped: %v", err)
	}
}

// checkNoLossSince fails the step for every loss the subscriber detected
// since since outside the fault windows. It first waits until the
// subscriber's report is later than the end of every window that began
// after since, so that a loss inside one is detected before it is judged.
func (s *stepRun) checkNoLossSince(ctx context.Context, since time.Time) {
	end := time.Now()
	for _, w := range s.windows {
		if w.Start.After(since) && w.End.After(end) {
			end = w.End
		}
	}
	var st probestats.Stats
	_, err := Poll(ctx, "the subscriber's report past the fault windows", time.Until(end)+keepsFlowing, apiPoll, func(ctx context.Context) (bool, string) {
		var err error
		st, err = s.c.probeStats(ctx, s.cfg.AppNamespace, PodSubscriber)
		if err != nil {
			return false, err.Error()
		}
		return time.Unix(0, st.AtUnixNano).After(end), probeLine(st)
	})
	if err != nil {
		s.errorf("%v", err)
		return
	}
	if gaps := st.Subscriber.GapsOutside(since, s.windows); len(gaps) > 0 {
		s.errorf("the subscriber lost messages outside any fault window: %s", probestats.DescribeGaps(gaps, since))
		return
	}
	s.note("no message lost outside the fault windows since %s (%s)", since.Format("15:04:05"), probeLine(st))
}

// addWindow records a span in which losses are expected.
func (s *stepRun) addWindow(name string, start, end time.Time) probestats.Window {
	w := probestats.Window{Name: name, Start: start, End: end}
	s.windows = append(s.windows, w)
	return w
}
