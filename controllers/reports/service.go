package reports

import (
	"errors"
	"fmt"
	"io"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
	"github.com/weighstation/weighstation/controllers/xds"
	"github.com/weighstation/weighstation/controllers/xds/bounded"
)

// Service receives the sidecars' reports: the Reports stream, which the
// xDS server serves behind its authentication (register it with
// xds.Options.Services under xdsv1.Reports_Stream_FullMethodName).
//
// Every report is checked before anything of it is stored: its pod UID
// must be the stream's pod's, its schema version known, every policy it
// names in the pod's configuration, every histogram of the sidecars'
// geometry. A refused report ends the stream with a status that says
// why; an accepted or duplicate one is acknowledged with its sequence.
type Service struct {
	xdsv1.UnimplementedReportsServer
	opts    Options
	store   *Store
	metrics *metrics
	// podRate is each pod's report bucket (Options.PodReportsPerInterval).
	podRate *bounded.Limiters[string]
}

var _ xdsv1.ReportsServer = (*Service)(nil)

// New returns a Service and its Store.
func New(opts Options) (*Service, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("reports: registering metrics: %w", err)
	}
	m.maxBytes.Set(float64(opts.MaxBytes))
	perSecond := rate.Limit(float64(opts.PodReportsPerInterval) / opts.Interval.Seconds())
	return &Service{opts: opts, store: newStore(opts, m), metrics: m,
		podRate: bounded.NewLimiters[string](perSecond, opts.PodReportBurst, maxRatedPods)}, nil
}

// Store is what the service keeps: add it to the manager (it needs leader
// election) and read summaries from it.
func (s *Service) Store() *Store { return s.store }

// Register registers the service on a gRPC server: the value of
// xds.Options.Services.
func (s *Service) Register(r grpc.ServiceRegistrar) { xdsv1.RegisterReportsServer(r, s) }

var errNotServing = status.Error(codes.Unavailable, "this operator replica is not the leader (or has not computed every pod yet) and does not take reports; retry")

// Stream implements xdsv1.ReportsServer.
func (s *Service) Stream(stream grpc.BidiStreamingServer[xdsv1.Report, xdsv1.ReportAck]) error {
	if !s.opts.Serving() {
		s.metrics.refused.WithLabelValues(refusedNotServing).Inc()
		return errNotServing
	}
	id, ok := xds.IdentityFrom(stream.Context())
	if !ok {
		s.metrics.refused.WithLabelValues(refusedNoIdentity).Inc()
		return status.Error(codes.Unauthenticated, "the stream has no authenticated pod")
	}
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if !s.opts.Serving() {
			s.metrics.refused.WithLabelValues(refusedNotServing).Inc()
			return errNotServing
		}
		refused := s.allow(id)
		if refused == nil {
			refused = s.accept(id, r)
		}
		if refused != nil {
			s.metrics.refused.WithLabelValues(refused.reason).Inc()
			if refused.reason == refusedHistogram {
				s.metrics.decodeErrors.Inc()
			}
			s.opts.Log.Info("refused a report", "pod", id.NodeID(), "sequence", r.GetSequence(), "reason", refused.Error())
			return refused
		}
		if err := stream.Send(&xdsv1.ReportAck{Sequence: r.GetSequence()}); err != nil {
			return err
		}
	}
}

// allow takes one report from the pod's bucket: a report over it is
// refused before anything of it is read, resent or not.
func (s *Service) allow(id xds.Identity) *refusal {
	if s.podRate.Allow(id.PodUID, s.opts.Now()) {
		return nil
	}
	return refuse(codes.ResourceExhausted, refusedPodRate, "pod %s reports faster than the operator takes: over %d reports per -report-interval (%s) with a burst of %d (-report-pod-rate, -report-pod-burst); send it again later",
		id.NodeID(), s.opts.PodReportsPerInterval, s.opts.Interval, s.opts.PodReportBurst)
}

// accept checks and stores one report of the stream's pod id; nil means
// acknowledge it.
func (s *Service) accept(id xds.Identity, r *xdsv1.Report) *refusal {
	if refused := checkHeader(id, r); refused != nil {
		return refused
	}
	// A resent report is acknowledged whatever changed since: it was
	// checked when it was counted.
	if s.store.isDuplicate(id.Namespace, id.PodUID, r.GetBootId(), r.GetSequence()) {
		s.metrics.duplicates.Inc()
		return nil
	}
	topics, subscriptions, ok := s.opts.PolicyNames(id.Namespace, id.Pod)
	if !ok {
		return refuse(codes.Unavailable, refusedUnknownPod, "the operator has no configuration for pod %s; retry", id.NodeID())
	}
	if refused := checkPolicies(r, topics, subscriptions); refused != nil {
		return refused
	}
	checked, refused := decodeReport(id, r)
	if refused != nil {
		return refused
	}
	duplicate, refused := s.store.add(checked)
	switch {
	case refused != nil:
		return refused
	case duplicate:
		s.metrics.duplicates.Inc()
		return nil
	}
	s.metrics.accepted.Inc()
	s.store.notify(checked.changed)
	s.store.gather(checked.gathered)
	return nil
}
