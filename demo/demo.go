package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/weighstation/weighstation/demo/podrunner"
	"github.com/weighstation/weighstation/test/bench/harness"
	"github.com/weighstation/weighstation/test/bench/harness/kubeenv"
)

// demo is one run's state.
type demo struct {
	o options
	p *progress
	// dir is the scratch directory: kubeconfigs, tokens, every process's
	// log. Removed at the end.
	dir     string
	appsBin string // the sample applications' binary
	tools   tools
	cl      *kubeenv.Cluster
	op      *benchharness.Operator

	brokerURL string
	pods      map[string]*podrunner.Pod
	apps      map[string]*app
	bench     *benchharness.LoggedProc
	// procs are the local processes besides the operator, for liveness.
	procs []*benchharness.LoggedProc

	events []event
	// released is when the manual kill switch was released: the last
	// phase runs from there.
	released time.Time
	// tables is the last `kubectl get topics,subscriptions`, for the report.
	tables string
	res    result
}

// result is what the demo showed, for its test.
type result struct {
	// StatusFilled: the Subscriptions' status had latency from the
	// sidecars' reports.
	StatusFilled bool
	// AutoKilled is the spam filter's KILLED column once its breaker
	// tripped; BillingP99DuringOverload billing's P99 then.
	AutoKilled               string
	BillingP99DuringOverload time.Duration
	// ManualKilled is the KILLED column with the kill switch engaged;
	// FailFast how fast orders-api's first failing request failed;
	// Propagation the status' propagationTime; PatchToEffect from the
	// patch to that first fast failure.
	ManualKilled                      string
	FailFast, Propagation, PatchToEff time.Duration
	// SpamDeliveredWhileKilled is what the spam filter's sidecar delivered
	// while its kill switch was engaged (while billing got BillingWhileKilled).
	SpamDeliveredWhileKilled, BillingWhileKilled int64
	// RefusedSize and RefusedRate are the Topics' refusals in status;
	// SizeRefusal and RateRefusal the -ERR orders-api got.
	RefusedSize, RefusedRate int64
	SizeRefusal, RateRefusal string
	// Report is the written report.
	Report string
	// Phases are billing's latency phases in the report.
	Phases []string
}

// run runs the demo's seven steps and tears everything down, whether they
// succeed or not.
func run(o options, p *progress) (*result, error) {
	d := &demo{o: o, p: p, tools: tools{kubectl: o.kubectl, helm: o.helm}, pods: map[string]*podrunner.Pod{}, apps: map[string]*app{}}
	if len(d.o.sidecar) == 0 {
		// The sidecar's own binary, beside weighstation: what a pod runs.
		d.o.sidecar = []string{filepath.Join(filepath.Dir(o.bin), "weighstation-sidecar")}
	}
	err := d.steps()
	if err != nil {
		err = errors.Join(err, d.processTails())
	}
	p.step(7, "tearing down: every process stopped, the control plane and the scratch directory removed")
	benchharness.RunCleanups()
	return &d.res, err
}

func (d *demo) steps() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var err error
	if d.dir, err = os.MkdirTemp("", "weighstation-demo-"); err != nil {
		return err
	}
	// Registered first, so that it runs last: the processes log into it.
	benchharness.AtExit(func() { _ = os.RemoveAll(d.dir) })
	d.tools.helmHome = d.dir
	if d.appsBin = d.o.apps; d.appsBin == "" {
		if d.appsBin, err = buildApps(d.dir); err != nil {
			return err
		}
	}
	for _, step := range []func(context.Context) error{
		func(context.Context) error { return d.controlPlane() },
		d.mesh, d.policyAndLoad, d.liveStatus, d.killSwitches, d.refusals, d.report,
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// alive reports the first process that exited.
func (d *demo) alive() error {
	if err := d.op.Alive(); err != nil {
		return err
	}
	for _, p := range d.procs {
		if err := p.Alive(); err != nil {
			return err
		}
	}
	return nil
}

// processTails is the end of every process's log, when the demo failed.
func (d *demo) processTails() error {
	var errs []error
	if d.op != nil {
		errs = append(errs, fmt.Errorf("the operator's log:\n%s", d.op.Tail(15)))
	}
	for _, p := range d.procs {
		errs = append(errs, fmt.Errorf("%s's log:\n%s", p.Name, p.Tail(10)))
	}
	return errors.Join(errs...)
}
