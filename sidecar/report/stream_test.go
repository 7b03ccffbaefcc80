package report_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/sidecar/report"
)

func marshal(t *testing.T, r *xdsv1.Report) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A report the operator did not acknowledge is sent again on the next
// stream, unchanged and before the newer ones; an acknowledged one never
// is. Each stream presents the token as the file holds it then.
func TestUnacknowledgedReportsAreResentUnchanged(t *testing.T) {
	op, conn := startOperator(t)
	src := newSource()
	src.configure([]string{"orders"}, nil)
	token := tokenFile(t, "first-token")
	r := newReporter(t, src, token)
	// End the stream, unacknowledged, on report 2 when stream 1 sends it,
	// and on report 4 when stream 2 sends it.
	op.setVerdict(func(stream int, rep *xdsv1.Report) error {
		if (stream == 1 && rep.GetSequence() == 2) || (stream == 2 && rep.GetSequence() == 4) {
			return status.Error(codes.Unavailable, "the operator restarts")
		}
		return nil
	})
	run(t, r, conn)

	src.record("orders", ms(1), ms(2))
	r.CollectNow(time.Now())
	first := op.next(t)
	if first.stream != 1 || first.report.GetSequence() != 1 || first.token != "first-token" {
		t.Fatalf("got report %d on stream %d with token %q, want 1 on 1 with first-token", first.report.GetSequence(), first.stream, first.token)
	}
	writeToken(t, token, "rotated-token") // the kubelet rotates it
	src.record("orders", ms(3), ms(4))
	r.CollectNow(time.Now())
	lost := op.next(t) // report 2, never acknowledged on stream 1
	if lost.stream != 1 || lost.report.GetSequence() != 2 {
		t.Fatalf("got report %d on stream %d, want 2 on 1", lost.report.GetSequence(), lost.stream)
	}
	r.CollectNow(time.Now()) // 3, wherever the reporter is: on stream 1, in backoff or on stream 2

	resent, third := op.next(t), op.next(t)
	if resent.stream != 2 || third.stream != 2 || resent.report.GetSequence() != 2 || third.report.GetSequence() != 3 {
		t.Fatalf("stream %d sent %d, then stream %d sent %d; want 2 then 3 on stream 2",
			resent.stream, resent.report.GetSequence(), third.stream, third.report.GetSequence())
	}
	if !bytes.Equal(marshal(t, resent.report), marshal(t, lost.report)) {
		t.Errorf("report 2 changed when it was sent again:\n%v\nwas\n%v", resent.report, lost.report)
	}
	checkHistogram(t, "the resent report's dwell", resent.report.GetSubscriptions()[0].GetDwellBuckets(), ms(3)...)
	if resent.token != "rotated-token" {
		t.Errorf("stream 2 presented %q, want the rotated token", resent.token)
	}

	// Stream 2 acknowledged 2 and 3 and ends on 4: stream 3 starts at 4,
	// and sends nothing acknowledged.
	r.CollectNow(time.Now())
	r4 := op.next(t)
	if r4.stream != 2 || r4.report.GetSequence() != 4 {
		t.Fatalf("got report %d on stream %d, want 4 on 2", r4.report.GetSequence(), r4.stream)
	}
	if d := op.next(t); d.stream != 3 || d.report.GetSequence() != 4 {
		t.Fatalf("stream %d sent report %d first, want 4 on stream 3 (2 and 3 were acknowledged)", d.stream, d.report.GetSequence())
	}
	r.CollectNow(time.Now())
	if d := op.next(t); d.stream != 3 || d.report.GetSequence() != 5 {
		t.Fatalf("got report %d on stream %d, want 5 on 3", d.report.GetSequence(), d.stream)
	}
	natstest.WaitFor(t, "the operator acknowledges every report", func() bool { return r.Stats().Acknowledged == 5 })
	st := r.Stats()
	// 3 was a resend too if stream 1 took it before it ended.
	if st.Pending != 0 || st.Built != 5 || st.Sent-st.Resent != 5 || st.Resent < 2 || st.StreamErrors["Unavailable"] != 2 {
		t.Errorf("stats %+v: want 5 built, each sent once and 2 or 3 of them again, none pending, 2 streams ended UNAVAILABLE", st)
	}
}

// While the operator refuses every stream (no leader), at most MaxPending
// reports wait: the oldest are dropped and counted, and the rest are sent
// in order once a stream is admitted. A refused stream sends nothing.
func TestPendingReportsAreBounded(t *testing.T) {
	op, conn := startOperator(t)
	src := newSource()
	src.configure([]string{"orders"}, nil)
	r := newReporter(t, src, tokenFile(t, "token"), func(o *report.Options) { o.MaxPending = 3 })
	op.setRefuse(codes.Unavailable)
	run(t, r, conn)
	op.waitRefused(t)

	for range 5 {
		r.CollectNow(time.Now())
	}
	st := r.Stats()
	if st.Built != 5 || st.Pending != 3 || st.Dropped[report.DropOverflow] != 2 || st.Sent != 0 {
		t.Fatalf("stats %+v: want 5 built, 3 pending, 2 dropped for overflow, none sent", st)
	}
	op.waitRefused(t) // still refusing, after the reports were queued

	op.setRefuse(codes.OK)
	streams, sequences := op.nextSequences(t, 3)
	if !slices.Equal(sequences, []uint64{3, 4, 5}) || streams[0] != streams[2] {
		t.Fatalf("the operator received reports %v on streams %v, want 3, 4, 5 on one stream", sequences, streams)
	}
	natstest.WaitFor(t, "the operator acknowledges the three", func() bool { return r.Stats().Acknowledged == 3 })
	st = r.Stats()
	if st.Pending != 0 || st.Sent != 3 || st.Resent != 0 || st.Dropped[report.DropOverflow] != 2 || st.StreamErrors["Unavailable"] < 2 || !st.Connected {
		t.Errorf("stats %+v: want none pending, 3 sent once, 2 dropped, streams refused UNAVAILABLE, connected", st)
	}

	metrics := scrape(t, r)
	for _, want := range []string{
		`weighstation_sidecar_reports_dropped_total{reason="overflow"} 2`,
		`weighstation_sidecar_reports_dropped_total{reason="refused"} 0`,
		`weighstation_sidecar_reports_sent_total 3`,
		`weighstation_sidecar_reports_resent_total 0`,
		`weighstation_sidecar_reports_acknowledged_total 3`,
		`weighstation_sidecar_reports_pending 0`,
		`weighstation_sidecar_report_stream_connected 1`,
		`weighstation_sidecar_report_stream_errors_total{code="Unavailable"} `,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("the metrics have no %q:\n%s", want, metrics)
		}
	}
}

// A report the operator refuses (INVALID_ARGUMENT, PERMISSION_DENIED: it
// names a policy the pod no longer has, say) would be refused again: it is
// dropped and counted, and the reports after it go on.
func TestARefusedReportIsDropped(t *testing.T) {
	tests := []codes.Code{codes.InvalidArgument, codes.PermissionDenied}
	for _, code := range tests {
		t.Run(code.String(), func(t *testing.T) {
			op, conn := startOperator(t)
			src := newSource()
			r := newReporter(t, src, tokenFile(t, "token"))
			op.setVerdict(func(_ int, rep *xdsv1.Report) error {
				if rep.GetSequence() == 2 {
					return status.Error(code, "Subscription gone is not in the pod's configuration")
				}
				return nil
			})
			run(t, r, conn)
			for range 3 {
				r.CollectNow(time.Now())
			}
			// The operator stops reading a stream it ends: 3 arrives on the
			// next one, wherever the reporter first sent it.
			streams, sequences := op.nextSequences(t, 3)
			if !slices.Equal(sequences, []uint64{1, 2, 3}) || !slices.Equal(streams, []int{1, 1, 2}) {
				t.Fatalf("the operator received reports %v on streams %v, want 1 and 2 on stream 1, then 3 on stream 2 (2 dropped)", sequences, streams)
			}
			natstest.WaitFor(t, "3 is acknowledged", func() bool { return r.Stats().Pending == 0 })
			if st := r.Stats(); st.Dropped[report.DropRefused] != 1 || st.Acknowledged != 2 || st.StreamErrors[code.String()] != 1 {
				t.Errorf("stats %+v: want 1 dropped as refused, 2 acknowledged, 1 stream ended %s", st, code)
			}
		})
	}
}

// scrape is r's metrics as Prometheus reads them.
func scrape(t *testing.T, r *report.Reporter) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(r.Collector())
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// Flush sends a last report with what was recorded since the last one and
// returns once the operator acknowledged it; while the operator does not
// acknowledge, it gives up when its context ends, saying how many are
// unacknowledged.
func TestFlushSendsALastReportAndWaitsForItsAcknowledgement(t *testing.T) {
	op, conn := startOperator(t)
	src := newSource()
	src.configure([]string{"orders"}, nil)
	r := newReporter(t, src, tokenFile(t, "token"))
	run(t, r, conn)

	src.record("orders", ms(1), ms(2))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if st := r.Stats(); st.Built != 1 || st.Acknowledged != 1 || st.Pending != 0 {
		t.Fatalf("stats %+v after Flush: want 1 built and acknowledged, none pending", st)
	}
	last := op.next(t)
	checkHistogram(t, "the last report's dwell", last.report.GetSubscriptions()[0].GetDwellBuckets(), ms(1)...)

	op.setVerdict(func(int, *xdsv1.Report) error { return errQuiet })
	short, cancelShort := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelShort()
	err := r.Flush(short)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "1 report(s) not acknowledged") {
		t.Fatalf("Flush while the operator acknowledges nothing: %v, want the deadline and 1 unacknowledged report", err)
	}
}
