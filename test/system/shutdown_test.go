package system_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar"
)

// TestShutdownDropsReachStatus: what a stopping sidecar could not deliver
// within its drain is counted with reason shutdown, and its last report
// (Reporter.Flush, which the sidecar command sends after the drain)
// carries that count into the Subscription's status, where Degraded names
// it as loss.
func TestShutdownDropsReachStatus(t *testing.T) {
	ctx := background()
	ns := newNamespace(t)
	broker := natstest.StartBroker(t, nil)
	xdsAddr := natstest.FreeAddr(t)
	sub := &v1alpha1.Subscription{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "audit"},
		Spec:       v1alpha1.SubscriptionSpec{Subject: "audit.>", Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "audit"}}},
	}
	if err := k8sClient.Create(ctx, sub); err != nil {
		t.Fatal(err)
	}
	op := startOperator(t, xdsAddr)
	publisher := startPod(t, ns, "writer-0", map[string]string{"app": "writer"}, broker.ClientURL(), xdsAddr)
	// The kernel holds little for the stuck application: the messages
	// wait in the sidecar, where the drain finds them.
	consumer := startPod(t, ns, "audit-0", map[string]string{"app": "audit"}, broker.ClientURL(), xdsAddr,
		func(o *sidecar.Options) { o.AppSendBuffer = 4096 })
	for _, p := range []*pod{publisher, consumer} {
		waitConfigured(t, op, ns, p, "configured", func(meshconfig.PodConfig) error { return nil })
	}
	stuck := subscribeAndNeverRead(t, consumer, "audit.>")
	defer stuck.Close()

	pub := publisher.app(t)
	payload := []byte(strings.Repeat("x", 1024))
	const sent = 200
	for range sent {
		if err := pub.Publish("audit.event", payload); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	var held uint64
	eventually(t, "the consumer's sidecar holds what the application does not read", func() error {
		c := consumer.side.PolicyTotals()["audit"]
		if held = c.Pending + c.InFlight; c.Arrived < sent || held == 0 {
			return fmt.Errorf("arrived %d of %d, %d held", c.Arrived, sent, held)
		}
		return nil
	})

	sum := consumer.side.Shutdown(0) // no grace: everything held is dropped
	if sum.Drained || sum.Undelivered == 0 {
		t.Fatalf("shutdown %+v: want undelivered messages", sum)
	}
	flushCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := consumer.reporter.Flush(flushCtx); err != nil {
		t.Fatalf("the last report: %v", err)
	}
	consumer.stopReports() // as the process ends: nothing after the last report

	want := int64(sum.Undelivered)
	var got v1alpha1.Subscription
	eventually(t, "status counts the shutdown drops", func() error {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(sub), &got); err != nil {
			return err
		}
		agg := got.Status.Aggregate
		if agg == nil {
			return fmt.Errorf("no aggregate yet")
		}
		for _, d := range agg.Dropped {
			if d.Reason == "shutdown" && d.Count == want {
				return conditionIs(got.Status.Conditions, v1alpha1.ConditionDegraded, metav1.ConditionTrue, fmt.Sprintf("%d shutdown", want))
			}
		}
		return fmt.Errorf("dropped %+v, want %d shutdown", agg.Dropped, want)
	})
}

// subscribeAndNeverRead is an application that subscribes through its
// sidecar, with a small receive buffer, and then reads nothing.
func subscribeAndNeverRead(t *testing.T, p *pod, subject string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.DialContext(context.Background(), "tcp", p.side.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	in := bufio.NewReader(conn)
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if line, err := in.ReadString('\n'); err != nil || !strings.HasPrefix(line, "INFO ") {
		t.Fatalf("the sidecar's greeting: %q, %v", line, err)
	}
	if _, err := fmt.Fprintf(conn, "CONNECT {\"verbose\":false,\"pedantic\":false,\"protocol\":1}\r\nSUB %s 1\r\nPING\r\n", subject); err != nil {
		t.Fatal(err)
	}
	if line, err := in.ReadString('\n'); err != nil || line != "PONG\r\n" {
		t.Fatalf("after SUB: %q, %v", line, err)
	}
	return conn
}
