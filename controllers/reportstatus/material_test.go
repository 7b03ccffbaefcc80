package reportstatus

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/reports"
)

// movedOverOnePercent stands in for the noise and the histograms'
// bucket: values within 1% are the same.
type movedOverOnePercent struct{}

func (movedOverOnePercent) between(_, _ string, _ int, a, b time.Duration) bool {
	d := a - b
	if d < 0 {
		d = -d
	}
	return d*100 > max(a, b)
}

func reportedStatus(mutate ...func(*v1alpha1.SubscriptionStatus)) *v1alpha1.SubscriptionStatus {
	lat := func(p99 time.Duration) v1alpha1.LatencySummary {
		d := func(x time.Duration) metav1.Duration { return metav1.Duration{Duration: x} }
		return v1alpha1.LatencySummary{P50: d(p99 / 4), P90: d(p99 / 2), P99: d(p99), P999: d(2 * p99), P9999: d(3 * p99), Max: d(4 * p99), Count: 1000}
	}
	podLat := lat(2 * time.Millisecond)
	st := &v1alpha1.SubscriptionStatus{
		Aggregate: &v1alpha1.AggregateStatus{LatencySummary: lat(time.Millisecond), Delivered: 1000, Pods: 2,
			Dropped: []v1alpha1.ReasonCount{{Reason: "killed", Count: 3}}},
		Dropped: 3,
		Pods:    []v1alpha1.SubscriptionPodStatus{{Name: "a", Delivered: 500, Latency: &podLat}, {Name: "b", Delivered: 500}},
	}
	for _, m := range mutate {
		m(st)
	}
	return st
}

func TestMaterialChanges(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*v1alpha1.SubscriptionStatus)
		want   string // part of the reason; "" for not material
	}{
		{"nothing", func(*v1alpha1.SubscriptionStatus) {}, ""},
		{"more delivered and measured", func(s *v1alpha1.SubscriptionStatus) {
			s.Aggregate.Delivered, s.Aggregate.Count, s.Pods[0].Delivered = 9000, 9000, 4500
		}, "-> 9000, 9000"},
		{"a pod delivered more", func(s *v1alpha1.SubscriptionStatus) { s.Pods[1].Delivered = 501 }, "pod b delivered 500 -> 501"},
		{"a report came", func(s *v1alpha1.SubscriptionStatus) { s.Pods[0].LastReportTime = &metav1.Time{Time: time.Now()} }, ""},
		{"the window moved", func(s *v1alpha1.SubscriptionStatus) { s.Aggregate.WindowStart = metav1.Now() }, ""},
		{"p99 within one bucket", func(s *v1alpha1.SubscriptionStatus) { s.Aggregate.P99.Duration += 5 * time.Microsecond }, ""},
		{"p99 beyond one bucket", func(s *v1alpha1.SubscriptionStatus) { s.Aggregate.P99.Duration += 50 * time.Microsecond }, "end-to-end p99"},
		{"a pod's max beyond one bucket", func(s *v1alpha1.SubscriptionStatus) {
			l := *s.Pods[0].Latency
			l.Max.Duration *= 2
			s.Pods[0].Latency = &l
		}, "pod a end-to-end max"},
		{"dwell appeared", func(s *v1alpha1.SubscriptionStatus) { s.Aggregate.Dwell = &v1alpha1.LatencySummary{} }, "dwell"},
		{"a drop", func(s *v1alpha1.SubscriptionStatus) { s.Dropped = 4 }, "dropped"},
		{"drops moved between reasons", func(s *v1alpha1.SubscriptionStatus) {
			s.Aggregate.Dropped = []v1alpha1.ReasonCount{{Reason: "overflow", Count: 3}}
		}, "drops by reason"},
		{"a pod went stale", func(s *v1alpha1.SubscriptionStatus) { s.Pods[1].Stale, s.Aggregate.StalePods = true, 1 }, "stale"},
		{"the operator shed latency", func(s *v1alpha1.SubscriptionStatus) { s.Aggregate.LatencyShedReports = 3 }, "latency shed"},
		{"a pod was killed", func(s *v1alpha1.SubscriptionStatus) {
			s.Pods[1].Killed = &v1alpha1.PodKill{Reason: v1alpha1.KillAuto}
		}, "kill state"},
		{"the kill summary", func(s *v1alpha1.SubscriptionStatus) { s.Killed = "Auto 1/2 pods" }, "kill state"},
		{"another pod listed", func(s *v1alpha1.SubscriptionStatus) { s.Pods[1].Name = "c" }, "pod c listed"},
		{"the listed pods reordered", func(s *v1alpha1.SubscriptionStatus) { s.Pods[0], s.Pods[1] = s.Pods[1], s.Pods[0] }, ""},
		{"reports ended", func(s *v1alpha1.SubscriptionStatus) { s.Aggregate = nil }, "reports began or ended"},
		{"Degraded", func(s *v1alpha1.SubscriptionStatus) {
			s.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: ReasonTrouble}}
		}, "Degraded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := materialSubscriptionChange(reportedStatus(), reportedStatus(tt.mutate), movedOverOnePercent{})
			if (got == "") != (tt.want == "") || !strings.Contains(got, tt.want) {
				t.Fatalf("material change %q, want one mentioning %q", got, tt.want)
			}
		})
	}
}

// With more pods reporting than listed, noise swaps pods at the list's
// end: a swap of like pods is not material.
func TestACutListOfPods(t *testing.T) {
	cut := func(s *v1alpha1.SubscriptionStatus) { s.Aggregate.Pods = 3 }
	tests := []struct {
		name   string
		mutate func(*v1alpha1.SubscriptionStatus)
		want   string
	}{
		{"a like pod instead of another", func(s *v1alpha1.SubscriptionStatus) {
			s.Pods[1].Name = "c"
		}, ""},
		{"a slower pod instead of another", func(s *v1alpha1.SubscriptionStatus) {
			l := *s.Pods[0].Latency
			l.P99.Duration *= 2
			s.Pods[0].Name, s.Pods[0].Latency = "c", &l
		}, "pod c listed instead of a"},
		{"a stale pod instead of another", func(s *v1alpha1.SubscriptionStatus) {
			s.Pods[1].Name, s.Pods[1].Stale = "c", true
		}, "pod c listed instead of b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := materialSubscriptionChange(reportedStatus(cut), reportedStatus(cut, tt.mutate), movedOverOnePercent{})
			if (got == "") != (tt.want == "") || !strings.Contains(got, tt.want) {
				t.Fatalf("material change %q, want one mentioning %q", got, tt.want)
			}
		})
	}
}

func TestDegraded(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*v1alpha1.SubscriptionStatus)
		status metav1.ConditionStatus
		says   string
	}{
		{"no reports", func(s *v1alpha1.SubscriptionStatus) { s.Aggregate = nil }, metav1.ConditionUnknown, "no sidecar reported"},
		{"healthy; routine drops do not count", func(*v1alpha1.SubscriptionStatus) {}, metav1.ConditionFalse, "2 pod(s) reporting"},
		{"a stale pod", func(s *v1alpha1.SubscriptionStatus) { s.Aggregate.StalePods, s.Pods[1].Stale = 1, true }, metav1.ConditionTrue, "1 pod(s) stopped reporting (b)"},
		{"latency shed at the cap", func(s *v1alpha1.SubscriptionStatus) { s.Aggregate.LatencyShedReports = 2 }, metav1.ConditionTrue, "shed the latency of 2 report(s) at its report memory cap (-report-max-bytes)"},
		{"a refusal", func(s *v1alpha1.SubscriptionStatus) {
			s.Config = &v1alpha1.ConfigStatus{Rejected: []v1alpha1.ConfigRejection{{Pod: "a", Reason: "bad"}}}
		}, metav1.ConditionTrue, "refused the configuration (a)"},
		{"a tripped breaker", func(s *v1alpha1.SubscriptionStatus) { s.Pods[0].Killed = &v1alpha1.PodKill{Reason: v1alpha1.KillAuto} }, metav1.ConditionTrue, "breaker tripped in 1 pod(s) (a)"},
		{"killed by hand is no trouble", func(s *v1alpha1.SubscriptionStatus) {
			s.Pods[0].Killed = &v1alpha1.PodKill{Reason: v1alpha1.KillManual}
		}, metav1.ConditionFalse, "no loss"},
		{"loss", func(s *v1alpha1.SubscriptionStatus) {
			s.Aggregate.Dropped = append(s.Aggregate.Dropped, v1alpha1.ReasonCount{Reason: "overflow", Count: 7})
		}, metav1.ConditionTrue, "lost in the window: 7 overflow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, msg := degraded(reportedStatus(tt.mutate))
			if status != tt.status || !strings.Contains(msg, tt.says) {
				t.Fatalf("Degraded %s %q, want %s mentioning %q", status, msg, tt.status, tt.says)
			}
		})
	}
}

func TestMovedBeyondNoise(t *testing.T) {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	band := func(lo, hi float64) reports.Bands {
		var b reports.Bands
		for i := range b {
			b[i] = reports.Band{Low: ms(lo), High: ms(hi)}
		}
		return b
	}
	written := latencyBands{"end-to-end": band(9, 11)}
	tests := []struct {
		name      string
		written   latencyBands
		next      latencyBands
		cur, want time.Duration
		moved     bool
	}{
		{"within the noise of both", written, latencyBands{"end-to-end": band(10.5, 12.5)}, ms(10), ms(11.5), false},
		{"the bands are apart", written, latencyBands{"end-to-end": band(12, 14)}, ms(10), ms(13), true},
		{"nothing remembered: the written value is exact", nil, latencyBands{"end-to-end": band(10.5, 12.5)}, ms(10), ms(11.5), true},
		{"nothing remembered, within the new band", nil, latencyBands{"end-to-end": band(9.5, 12.5)}, ms(10), ms(11.5), false},
		{"a written value outside its remembered band is exact", written, latencyBands{"end-to-end": band(11.9, 14)}, ms(12), ms(13), false},
		{"no band for the new value: one bucket", written, nil, ms(10), ms(11.5), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := (movedBeyondNoise{written: tt.written, next: tt.next}).between("end-to-end", "end-to-end", 2, tt.cur, tt.want); got != tt.moved {
				t.Fatalf("moved = %v, want %v", got, tt.moved)
			}
		})
	}
}
