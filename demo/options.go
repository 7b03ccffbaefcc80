package main

import "time"

// options are one run of the demo. Paths are from the repository's root,
// where `make demo` runs it.
type options struct {
	// bin is bin/weighstation; sidecar the sidecar's command (bin
	// sidecar, until the sidecar has a binary of its own); apps the
	// sample applications (built into the scratch directory when empty).
	bin     string
	sidecar []string
	apps    string
	// kubectl and helm are the tools hack/setup-envtest.sh links into bin/.
	kubectl, helm string
	// chart, manifests and out: the chart, the demo's manifests, and the
	// report's directory.
	chart, manifests, out string

	// rate and size are the load generator's orders per second and
	// payload bytes.
	rate float64
	size int
	// The phases of billing's latency: how long the load runs before the
	// overload, how long the spam filter stays slow after its kill switch
	// tripped, how long the manual kill switch stays engaged, and how long
	// the load runs after its release.
	before, overload, kill, after time.Duration
	// slowDelay is how long the slow spam filter takes for each message.
	slowDelay time.Duration
	// reportWindow is the operator's -report-window: what status
	// summarises. Reports come every second and are written every second,
	// so that status follows the demo's phases within seconds.
	reportWindow time.Duration
	// wait bounds every wait for something to happen.
	wait time.Duration
}

func defaultOptions() options {
	return options{
		bin: "bin/weighstation", kubectl: "bin/kubectl", helm: "bin/helm",
		chart: "charts/weighstation", manifests: "demo/manifests", out: "demo",
		rate: 200, size: 256,
		before: 20 * time.Second, overload: 15 * time.Second, kill: 10 * time.Second, after: 15 * time.Second,
		slowDelay: 200 * time.Millisecond, reportWindow: 20 * time.Second, wait: 90 * time.Second,
	}
}

// shorten makes the load short, for `make test`: the same steps and
// checks, seconds of each phase.
func (o *options) shorten() {
	o.before, o.overload, o.kill, o.after = 4*time.Second, 3*time.Second, 3*time.Second, 3*time.Second
	o.reportWindow = 10 * time.Second
}
