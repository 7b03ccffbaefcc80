package main

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weighstation/weighstation/controllers/xds"
)

// The operator reviews each sidecar's token once (TokenReview), at most
// -xds-tokenreview-rate a second after a burst of -xds-tokenreview-burst
// (all sidecars together), and -xds-tokenreview-peer-rate per remote
// address (controllers/xds/gate.go). In a world whose sidecars start
// together after its last create (ObjectsFirst), every review falls in
// the Ready time: the bench tells their share of it apart.
const (
	reviewRateFlag      = "xds-tokenreview-rate"
	reviewBurstFlag     = "xds-tokenreview-burst"
	peerRateFlag        = "xds-tokenreview-peer-rate"
	peerBurstFlag       = "xds-tokenreview-peer-burst"
	concurrentStreamsFl = "xds-max-concurrent-streams"
)

// sharedConnArgs are the operator's flags for sidecars that share a
// connection k at a time (worldSize.StreamsPerConn): each connection
// stands for k pods, so its per-peer TokenReview limit is k pods' (k ×
// the default rate and burst), and it may hold k streams; flags given in
// -operator-args stay as given.
func sharedConnArgs(o options, k int) []string {
	if k <= 1 {
		return nil
	}
	def, lim := xds.DefaultReviewLimits, xds.DefaultLimits
	var args []string
	set := func(name string, v any) {
		if _, given := flagValue(o.operatorArgs, name); !given {
			args = append(args, fmt.Sprintf("-%s=%v", name, v))
		}
	}
	set(peerRateFlag, float64(k)*def.PeerRate)
	set(peerBurstFlag, k*def.PeerBurst)
	if k > lim.MaxConcurrentStreams {
		set(concurrentStreamsFl, k)
	}
	if len(args) > 0 {
		progress("%d sidecars per gRPC connection, each connection standing for %d pods: the bench runs the operator with %s", k, k, strings.Join(args, " "))
	}
	return args
}

// tokenReviews is what the sidecars' TokenReviews took of a world's
// Ready time.
type tokenReviews struct {
	// Sidecars is how many sidecars started after the last create.
	Sidecars int `json:"sidecars"`
	// Rate and Burst are the operator's global TokenReview limit, and
	// SetBy who chose it: "default" (xds.DefaultReviewLimits), "bench" (the
	// default alone would keep the world from Ready within its target) or
	// "-operator-args".
	Rate  float64 `json:"rate"`
	Burst int     `json:"burst"`
	SetBy string  `json:"setBy"`
	// DefaultMinSeconds and MinSeconds are the least time the limit
	// alone allows the reviews, (Sidecars - Burst) / Rate, at the
	// operator's default and at the limit used.
	DefaultMinSeconds float64 `json:"defaultMinSeconds"`
	MinSeconds        float64 `json:"minSeconds"`
	// Seconds is from the last create until the operator had reviewed
	// every sidecar's token (weighstation_operator_xds_tokenreviews_total
	// {result="authenticated"} up by Sidecars; scraped every 200 ms); 0
	// if it never did before Ready.
	Seconds float64 `json:"secondsFromLastCreate"`
	// Reviews are the TokenReviews by result and Refused the streams the
	// gate refused by reason (review_rate_global, review_rate_peer, ...),
	// from the last create to Ready.
	Reviews map[string]float64 `json:"reviews"`
	Refused map[string]float64 `json:"refused"`
}

// reviewLimitArgs returns the operator's TokenReview flags for a world,
// and the tokenReviews to fill (nil where the sidecars start before the
// timed creates, so that their reviews are not part of Ready).
func reviewLimitArgs(o options, size worldSize) ([]string, *tokenReviews) {
	if !size.ObjectsFirst {
		return nil, nil
	}
	def := xds.DefaultReviewLimits
	n := size.totalPods()
	tr := &tokenReviews{Sidecars: n, Rate: def.Rate, Burst: def.Burst, SetBy: "default", DefaultMinSeconds: minReviewSeconds(n, def.Rate, def.Burst)}
	var args []string
	rate, rateGiven := flagValue(o.operatorArgs, reviewRateFlag)
	burst, burstGiven := flagValue(o.operatorArgs, reviewBurstFlag)
	switch {
	case rateGiven || burstGiven:
		tr.SetBy = "-operator-args"
		if v, err := strconv.ParseFloat(rate, 64); rateGiven && err == nil {
			tr.Rate = v
		}
		if v, err := strconv.Atoi(burst); burstGiven && err == nil {
			tr.Burst = v
		}
	case size.ReadySeconds > 0 && tr.DefaultMinSeconds > size.ReadySeconds && size.ReviewRate > 0:
		tr.SetBy, tr.Rate = "bench", size.ReviewRate
		args = append(args, fmt.Sprintf("-%s=%g", reviewRateFlag, tr.Rate))
		progress("the operator's default TokenReview limit (-%s %g/s, -%s %d) alone keeps %d sidecars that start together from Ready for %.0f s, over the %s world's %g s target: the bench runs it with -%s=%g (%.1f s)",
			reviewRateFlag, def.Rate, reviewBurstFlag, def.Burst, n, tr.DefaultMinSeconds, size.Name, size.ReadySeconds, reviewRateFlag, tr.Rate, minReviewSeconds(n, tr.Rate, tr.Burst))
	}
	tr.MinSeconds = minReviewSeconds(n, tr.Rate, tr.Burst)
	return args, tr
}

// minReviewSeconds is the least time a token bucket of rate and burst
// allows n reviews.
func minReviewSeconds(n int, rate float64, burst int) float64 {
	return max(0, float64(n-burst)/rate)
}

// flagValue finds flag name's value in args (-name=v, --name=v, -name v).
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
		if a == name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

var (
	reviewsMetric = "weighstation_operator_xds_tokenreviews_total"
	refusedMetric = "weighstation_operator_xds_refused_total"
)

// byLabel sums a counter's series by the value of its one label.
func (m metrics) byLabel(name string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if rest, ok := strings.CutPrefix(k, name+"{"); ok {
			if _, val, ok := strings.Cut(strings.TrimSuffix(rest, "}"), `="`); ok {
				out[strings.TrimSuffix(val, `"`)] += v
			}
		}
	}
	return out
}

// watchReviews scrapes the operator every 200 ms from the last create
// (m0 its counters then) until the returned function is called, which
// fills tr and returns it.
func watchReviews(url string, m0 metrics, lastCreate time.Time, tr *tokenReviews) func() *tokenReviews {
	stop, done := make(chan struct{}), make(chan struct{})
	base := m0.byLabel(reviewsMetric)["authenticated"]
	var mu sync.Mutex
	var last metrics
	go func() {
		defer close(done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			m, err := scrape(url)
			if err != nil {
				continue
			}
			at := time.Now()
			mu.Lock()
			last = m
			if tr.Seconds == 0 && m.byLabel(reviewsMetric)["authenticated"]-base >= float64(tr.Sidecars) {
				tr.Seconds = at.Sub(lastCreate).Seconds()
			}
			mu.Unlock()
		}
	}()
	return func() *tokenReviews {
		close(stop)
		<-done
		if m, err := scrape(url); err == nil {
			last = m
		}
		if last != nil {
			tr.Reviews = diff(last.byLabel(reviewsMetric), m0.byLabel(reviewsMetric))
			tr.Refused = diff(last.byLabel(refusedMetric), m0.byLabel(refusedMetric))
			if tr.Seconds == 0 && tr.Reviews["authenticated"] >= float64(tr.Sidecars) {
				tr.Seconds = time.Since(lastCreate).Seconds()
			}
		}
		return tr
	}
}

// summary is one line: the reviews' time and the limit that bound them.
func (tr *tokenReviews) summary() string {
	done := "not all reviewed by Ready"
	if tr.Seconds > 0 {
		done = fmt.Sprintf("the last of %d sidecars' tokens reviewed %.1f s after the last create", tr.Sidecars, tr.Seconds)
	}
	limit := fmt.Sprintf("-%s %g/s, -%s %d (%s", reviewRateFlag, tr.Rate, reviewBurstFlag, tr.Burst, tr.SetBy)
	if tr.SetBy == "bench" {
		limit += fmt.Sprintf(": the default %g/s alone would take ≥ %.0f s", xds.DefaultReviewLimits.Rate, tr.DefaultMinSeconds)
	}
	limit += ")"
	return fmt.Sprintf("%s; the limit %s alone needs ≥ %.1f s; reviews %s; streams refused %s",
		done, limit, tr.MinSeconds, countsCell(tr.Reviews), countsCell(tr.Refused))
}

func countsCell(m map[string]float64) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range keysOf(m) {
		parts = append(parts, fmt.Sprintf("%s %g", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
