package reports

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
)

// One pod may send PodReportBurst reports at once, then
// PodReportsPerInterval per Interval; the next ends its stream
// RESOURCE_EXHAUSTED, naming the flags, before anything of it is read,
// and is counted. Other pods are not held back.
func TestAPodThatReportsTooFastIsRefused(t *testing.T) {
	clk := newClock()
	r := startGRPC(t, clk)
	// The defaults: a burst of 8, 2 per 10 s interval (one every 5 s).
	if DefaultPodReportBurst != 8 || DefaultPodReportsPerInterval != 2 || DefaultInterval != 10*time.Second {
		t.Fatalf("the defaults changed: burst %d, %d per %s", DefaultPodReportBurst, DefaultPodReportsPerInterval, DefaultInterval)
	}
	rep := func(seq uint64) *xdsv1.Report {
		return report("uid-0", "boot-a", seq, []*xdsv1.SubscriptionReport{subReport(t, "billing", seq, []int64{100}, nil)})
	}
	st := r.open(t, "token-0")
	for seq := uint64(1); seq <= DefaultPodReportBurst; seq++ {
		// Resends count too: each costs a look-up.
		if seq == DefaultPodReportBurst {
			mustSend(t, st, rep(1))
			continue
		}
		mustSend(t, st, rep(seq))
	}
	wantCode(t, send(t, st, rep(DefaultPodReportBurst)), codes.ResourceExhausted, "-report-pod-rate")
	if got := value(r.svc.metrics.refused.WithLabelValues(refusedPodRate)); got != 1 {
		t.Fatalf("refused{reason=pod_rate} %v, want 1", got)
	}
	// Another pod has its own bucket.
	mustSend(t, r.open(t, "token-1"), report("uid-1", "boot-a", 1, []*xdsv1.SubscriptionReport{subReport(t, "billing", 1, []int64{100}, nil)}))

	// One token comes back every 5 s: not a millisecond before.
	clk.Advance(5*time.Second - time.Millisecond)
	wantCode(t, send(t, r.open(t, "token-0"), rep(DefaultPodReportBurst)), codes.ResourceExhausted, "-report-pod-burst")
	clk.Advance(time.Millisecond)
	st = r.open(t, "token-0")
	mustSend(t, st, rep(DefaultPodReportBurst))
	wantCode(t, send(t, st, rep(DefaultPodReportBurst+1)), codes.ResourceExhausted, "-report-pod-rate")
	if got := value(r.svc.metrics.accepted); got != DefaultPodReportBurst+1 {
		t.Fatalf("accepted %v, want %d (the burst less one resend, the other pod's, the refilled one)", got, DefaultPodReportBurst+1)
	}
}
