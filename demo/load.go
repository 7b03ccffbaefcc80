package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/weighstation/weighstation/test/bench/harness"
)

// The phases of billing's latency, in order (warm-up, before the
// status is filled, is left out of the report).
const (
	phaseBefore   = "before"
	phaseOverload = "overload: spam filter slow"
	phaseRecovery = "recovery"
	phaseKilled   = "manual kill switch engaged"
	phaseAfter    = "after its release"
)

// policyAndLoad is step 3: the Topics and Subscriptions, and the load.
func (d *demo) policyAndLoad(context.Context) error {
	d.p.step(3, "applying the demo's Topics and Subscriptions (size limits, quotas, kill switches)")
	if _, err := d.tools.kubectlShow(d.p, "apply", "-f", filepath.Join(d.o.manifests, "policy.yaml")); err != nil {
		return err
	}
	// Ready: every selected pod's sidecar acknowledged the policy.
	if _, err := d.tools.kubectlShow(d.p, "wait", "--for=condition=Ready", "topics,subscriptions", "--all", "-n", namespace,
		"--timeout="+d.o.wait.String()); err != nil {
		return err
	}
	if err := d.startApps(); err != nil {
		return err
	}
	// Open loop: each order has its send time on a fixed schedule, and its
	// latency counts from there, whatever the system under test does.
	// The generator publishes from orders-api's pod (its sidecar); its own
	// subscriber, on billing's sidecar, checks that every order arrives.
	rate := strconv.FormatFloat(d.o.rate, 'f', -1, 64)
	args := []string{"bench", "-url", d.pods[ordersAPI].NATSURL, "-sub-url", d.pods[billing].NATSURL, "-subject", "orders.created",
		"-rate", rate, "-size", strconv.Itoa(d.o.size), "-duration", "1h"}
	bench, err := benchharness.StartLogged("weighstation bench", filepath.Join(d.dir, "bench.log"), d.o.bin, args...)
	if err != nil {
		return err
	}
	benchharness.AtExit(bench.Stop)
	d.bench = bench
	d.procs = append(d.procs, bench)
	d.p.say("$ weighstation %s", quoteArgs(args))
	d.p.say("steady open-loop load: %s orders/s of %d bytes on orders.created, from orders-api's pod (pid %d)", rate, d.o.size, bench.Pid())
	return nil
}

// liveStatus is step 4: status filled from the sidecars' reports.
func (d *demo) liveStatus(ctx context.Context) error {
	d.p.step(4, "waiting for the sidecars' reports to fill status (every second, over a %s window)", d.o.reportWindow)
	err := d.waitFor("latency in status", func() (bool, string) {
		for _, name := range []string{billing, spamFilter} {
			s, err := d.subscription(ctx, name)
			if err != nil {
				return false, err.Error()
			}
			if a := s.Status.Aggregate; a == nil || a.Count == 0 {
				return false, fmt.Sprintf("Subscription %s has no latency yet", name)
			}
		}
		t, err := d.topic(ctx, "orders")
		if err != nil {
			return false, err.Error()
		}
		if t.Status.Publish == nil || t.Status.Publish.Forwarded == 0 {
			return false, "Topic orders counts no publish yet"
		}
		return true, ""
	})
	if err != nil {
		return err
	}
	d.res.StatusFilled = true
	if err := d.phase(phaseBefore); err != nil {
		return err
	}
	d.mark(now(), "steady load, status filled", "billing's latency phase \""+phaseBefore+"\" begins")
	d.p.say("letting the load run for %s", d.o.before)
	if err := d.hold(d.o.before); err != nil {
		return err
	}
	return d.showTables()
}
