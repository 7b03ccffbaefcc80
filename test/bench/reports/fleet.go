package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/credentials"

	"github.com/weighstation/weighstation/cmd/weighstation-sidecar/sidecarapp"
	"github.com/weighstation/weighstation/internal/tlsreload"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar/report"
	"github.com/weighstation/weighstation/sidecar/xdsclient"
	"github.com/weighstation/weighstation/test/bench/harness"
	"github.com/weighstation/weighstation/test/bench/harness/kubeenv"
)

// podIdentity is what a sidecar knows of its pod (the downward API and
// its projected token).
type podIdentity struct {
	Name, UID, TokenFile string
}

// simSidecar is one simulated sidecar: a pod's sidecar's operator-facing
// half, as the sidecar builds it (sidecarapp.NewOperatorLink) — what makes
// the operator treat it as its pod's sidecar (its own gRPC connection, TLS
// to the operator's CA, its pod-bound token, an xDS client that applies
// and ACKs its configuration) and sidecar/report's Reporter on the same
// connection — reading a synthetic source instead of a sidecar.Server.
type simSidecar struct {
	index  int
	pod    podIdentity
	link   *sidecarapp.OperatorLink
	src    *source
	want   []string    // the Subscriptions its configuration must hold
	topics int         // and how many Topics
	ready  atomic.Bool // holds its configuration
}

// apply is the xDS client's Apply: it takes the configuration's policies
// into the source, and tells whether it holds the one the world expects.
func (s *simSidecar) apply(cfg meshconfig.PodConfig) error {
	subs := make([]string, 0, len(cfg.Subscriptions))
	for _, sp := range cfg.Subscriptions {
		subs = append(subs, sp.Name)
	}
	topics := make([]string, 0, len(cfg.Topics))
	for _, t := range cfg.Topics {
		topics = append(topics, t.Name)
	}
	slices.Sort(subs)
	s.src.apply(subs, topics)
	s.ready.Store(slices.Equal(subs, s.want) && len(topics) == s.topics)
	return nil
}

// fleet is every simulated sidecar, in this process.
type fleet struct {
	ctx      context.Context
	sidecars []*simSidecar
}

// startFleet connects one simulated sidecar per pod to the operator's
// xDS server at xdsAddr, trusting caFile's CA. They only take their
// configuration: startReporting starts their reports.
func startFleet(ctx context.Context, w *world, l *load, xdsAddr, caFile string, pods []podIdentity) (*fleet, error) {
	// One CA pool for all: these are simulated sidecars, and each real one
	// reads the same mounted bundle.
	pool, err := tlsreload.NewReloadingPool(caFile, tlsreload.Options{})
	if err != nil {
		return nil, err
	}
	creds := credentials.NewTLS(pool.ClientConfig(kubeenv.XDSServerName()))
	f := &fleet{ctx: ctx}
	for i, p := range pods {
		s := &simSidecar{index: i, pod: p, want: w.podSubscriptions(i), topics: w.topics,
			src: newSource(l, i, w.podTopic(i), w.isMoving)}
		s.link, err = sidecarapp.NewOperatorLink(sidecarapp.LinkOptions{XDS: xdsclient.Options{
			Address: xdsAddr, Namespace: podNamespace, Pod: p.Name, PodUID: p.UID, TokenFile: p.TokenFile,
			// Each from its own loopback address, as pods have their own
			// IPs: the operator's per-peer TokenReview limit would
			// otherwise admit the whole fleet at one review a second.
			Credentials: creds, LocalAddr: benchharness.SidecarIP(i),
			Apply: s.apply, MaxBackoff: 2 * time.Second, Log: logr.Discard(),
		}})
		if err != nil {
			f.stop()
			return nil, fmt.Errorf("pod %s: %w", p.Name, err)
		}
		f.sidecars = append(f.sidecars, s)
		s.link.Start(ctx)
	}
	return f, nil
}

// configured is how many sidecars hold the configuration they must.
func (f *fleet) configured() int {
	n := 0
	for _, s := range f.sidecars {
		if s.ready.Load() {
			n++
		}
	}
	return n
}

// startReporting starts every sidecar's Reporter, their phases spread
// uniformly over one interval in a random order, and returns once the last
// started.
func (f *fleet) startReporting(l *load) error {
	order := rand.New(rand.NewPCG(l.seed, 0)).Perm(len(f.sidecars))
	t0 := time.Now()
	for rank, i := range order {
		at := t0.Add(l.interval * time.Duration(rank) / time.Duration(len(f.sidecars)))
		select {
		case <-f.ctx.Done():
			return f.ctx.Err()
		case <-time.After(time.Until(at)):
		}
		s := f.sidecars[i]
		// On the link's connection; the pod's UID and token are the
		// link's.
		if _, err := s.link.StartReports(report.Options{Source: s.src, Interval: l.interval, Log: logr.Discard()}); err != nil {
			return err
		}
		s.src.begin(time.Now())
	}
	return nil
}

// fleetStats are the sidecars' own counts, summed.
type fleetStats struct {
	XDSConnects      uint64            `json:"xdsConnects"`
	XDSApplied       uint64            `json:"xdsApplied"`
	ReportsBuilt     uint64            `json:"reportsBuilt"`
	ReportsSent      uint64            `json:"reportsSent"`
	ReportsResent    uint64            `json:"reportsResent"`
	ReportsAcked     uint64            `json:"reportsAcknowledged"`
	ReportsDropped   map[string]uint64 `json:"reportsDropped,omitempty"`
	StreamErrors     map[string]uint64 `json:"reportStreamErrors,omitempty"`
	ReportsPending   int               `json:"reportsPending"`
	ReportsConnected int               `json:"reportStreamsConnected"`
}

func (f *fleet) stats() fleetStats {
	out := fleetStats{ReportsDropped: map[string]uint64{}, StreamErrors: map[string]uint64{}}
	for _, s := range f.sidecars {
		x := s.link.XDS.Stats()
		out.XDSConnects += x.Connects
		out.XDSApplied += x.Applied
		r := s.link.Reporter()
		if r == nil {
			continue
		}
		st := r.Stats()
		out.ReportsBuilt += st.Built
		out.ReportsSent += st.Sent
		out.ReportsResent += st.Resent
		out.ReportsAcked += st.Acknowledged
		out.ReportsPending += st.Pending
		if st.Connected {
			out.ReportsConnected++
		}
		for k, v := range st.Dropped {
			out.ReportsDropped[k] += v
		}
		for k, v := range st.StreamErrors {
			out.StreamErrors[k] += v
		}
	}
	return out
}

// stop stops the sidecars (their context is the caller's, normally
// cancelled first) and waits, up to 10 s, until they ended and closed
// their connections.
func (f *fleet) stop() {
	done := make(chan struct{})
	go func() {
		for _, s := range f.sidecars {
			s.link.Close()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}
