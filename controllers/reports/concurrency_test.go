package reports

import (
	"context"
	"sync"
	"testing"
	"time"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
)

// TestConcurrentReportsSummariesAndSweeps runs pods' reports, resends,
// summaries and sweeps at once: the race detector watches, and the totals
// must come out exact.
func TestConcurrentReportsSummariesAndSweeps(t *testing.T) {
	clk := newClock()
	svc, _ := newTestService(t, clk, nil)
	store := svc.Store()
	var notified sync.Map
	store.OnChange(func(kind, namespace, name string) { notified.Store(kind+" "+namespace+"/"+name, true) })
	const pods, reports = 8, 40
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for ctx.Err() == nil {
				store.Subscription("shop", "billing")
				store.Topic("shop", "orders")
				store.sweep()
			}
		})
	}
	var writers sync.WaitGroup
	for pod := range pods {
		writers.Go(func() {
			for seq := uint64(1); seq <= reports; seq++ {
				r := report(identity(pod).PodUID, "a", seq,
					[]*xdsv1.SubscriptionReport{subReport(t, "billing", seq*2, []int64{int64(100 * (pod + 1))}, nil, reason("overflow", seq))},
					topicRep("orders", seq, seq))
				for range 2 { // every report twice: once counted
					if refused := svc.accept(identity(pod), r); refused != nil {
						t.Error(refused)
						return
					}
				}
			}
		})
	}
	writers.Wait()
	cancel()
	readers.Wait()
	sum, ok := store.Subscription("shop", "billing")
	if !ok || len(sum.Pods) != pods || sum.Delivered != pods*reports*2 || sum.EndToEnd.Count != pods*reports {
		t.Fatalf("%d pods, delivered %d, values %d; want %d, %d, %d", len(sum.Pods), sum.Delivered, sum.EndToEnd.Count, pods, pods*reports*2, pods*reports)
	}
	if !equalReasons(sum.Dropped, []ReasonCount{{"overflow", pods * reports}}) {
		t.Fatalf("dropped %v", sum.Dropped)
	}
	if topic, _ := store.Topic("shop", "orders"); topic.Attempts != pods*reports {
		t.Fatalf("attempts %d, want %d", topic.Attempts, pods*reports)
	}
	if _, ok := notified.Load("Subscription shop/billing"); !ok {
		t.Fatal("billing was never notified")
	}
}
