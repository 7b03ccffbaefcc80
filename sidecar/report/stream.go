package report

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
)

// connect runs Reports streams, one after another, until ctx ends.
func (r *Reporter) connect(ctx context.Context, client xdsv1.ReportsClient) {
	b := newBackoff(r.opts.InitialBackoff, r.opts.MaxBackoff)
	for ctx.Err() == nil {
		worked, err := r.stream(ctx, client)
		r.stats.update(func(s *Stats) { s.Connected = false })
		if ctx.Err() != nil {
			return
		}
		code := codeOf(err)
		r.stats.update(func(s *Stats) { increment(&s.StreamErrors, code.String()) })
		wait := b.wait(worked)
		// UNAVAILABLE (not the leader, the operator restarting) and
		// UNAUTHENTICATED (an expired token, read again next time) are the
		// usual ends: retried like any other.
		r.opts.Log.Info("report stream ended; keeping the unacknowledged reports and retrying",
			"code", code.String(), "reason", err.Error(), "retryIn", wait.String(), "pending", r.queue.len())
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// codeOf is the gRPC code a stream ended with: OK when the operator ended
// it without an error (io.EOF).
func codeOf(err error) codes.Code {
	if errors.Is(err, io.EOF) {
		return codes.OK
	}
	return status.Code(err)
}

// The headers of the operator's authentication, shared with the xDS
// stream: authorization carries the bearer token, acceptedHeader admits the
// stream (the operator's xds.AcceptedHeader; the sidecar does not import
// the operator).
const (
	authorization  = "authorization"
	acceptedHeader = "weighstation-accepted-pod"
)

// stream runs one Reports stream until it fails: it sends every report the
// queue holds, oldest first, then each new one, and removes each report the
// operator acknowledges. It reports whether the stream worked (an
// acknowledgement came), which starts the backoff over.
func (r *Reporter) stream(ctx context.Context, client xdsv1.ReportsClient) (worked bool, err error) {
	token, err := os.ReadFile(r.opts.TokenFile)
	if err != nil {
		return false, fmt.Errorf("reading the identity token: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream, and with it the receiver
	ctx = metadata.AppendToOutgoingContext(ctx, authorization, "Bearer "+strings.TrimSpace(string(token)))
	st, err := client.Stream(ctx)
	if err != nil {
		return false, fmt.Errorf("opening the stream: %w", err)
	}
	// The operator admits a stream with a header, as it does the xDS
	// stream: nothing is sent before, so a refused stream (not the leader,
	// an expired token) counts no send.
	if header, err := st.Header(); err != nil || len(header.Get(acceptedHeader)) == 0 {
		_, err := st.Recv() // the refusal's status
		if err == nil {
			err = errors.New("the operator answered without admitting the stream")
		}
		return false, err
	}
	r.stats.update(func(s *Stats) { s.Connected = true })

	acks := make(chan uint64)
	ended := make(chan error, 1)
	go func() {
		for {
			ack, err := st.Recv()
			if err != nil {
				ended <- err
				return
			}
			select {
			case acks <- ack.GetSequence():
			case <-ctx.Done():
				return
			}
		}
	}()
	acknowledge := func(sequence uint64) {
		worked = true
		if r.queue.ack(sequence) {
			r.stats.update(func(s *Stats) { s.Acknowledged++ })
		}
	}
	// end is the stream's end, as Recv has it.
	end := func() error {
		for {
			select {
			case sequence := <-acks:
				acknowledge(sequence)
			case err := <-ended:
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}

	var last uint64 // the last sequence sent on this stream
	for {
		for _, e := range r.queue.after(last) {
			if err := st.Send(e.report); err != nil {
				if errors.Is(err, io.EOF) {
					// The stream is over; its status comes with Recv.
					err = end()
				}
				return worked, r.ended(err, last)
			}
			resend := r.queue.sent(e)
			r.stats.update(func(s *Stats) {
				s.Sent++
				if resend {
					s.Resent++
				}
			})
			last = e.report.GetSequence()
		}
		select {
		case <-ctx.Done():
			_ = st.CloseSend()
			return worked, ctx.Err()
		case <-r.queue.added:
		case sequence := <-acks:
			acknowledge(sequence)
		case err := <-ended:
			return worked, r.ended(err, last)
		}
	}
}

// ended handles why a stream ended after sending up to last. INVALID_ARGUMENT
// and PERMISSION_DENIED refuse a report (a policy the pod is no longer
// configured with, another pod's report, an unknown schema): the operator
// handles reports in order, so it is the oldest one sent and not
// acknowledged. Sent again, it would be refused again, and hold back every
// report after it: it is dropped and counted instead.
func (r *Reporter) ended(err error, last uint64) error {
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("the operator ended the stream: %w", io.EOF)
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.PermissionDenied:
		if refused := r.queue.dropOldestSent(last); refused != nil {
			r.stats.update(func(s *Stats) { increment(&s.Dropped, DropRefused) })
			r.opts.Log.Error(err, "the operator refused a report; it is dropped, not sent again", "sequence", refused.GetSequence())
		}
	}
	return err
}
