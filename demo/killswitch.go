package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/weighstation/weighstation/demo/demoapi"
	"github.com/weighstation/weighstation/test/bench/harness"
)

// killSwitches is step 5: the automatic kill switch, then the manual one.
func (d *demo) killSwitches(ctx context.Context) error {
	if err := d.autoKill(ctx); err != nil {
		return err
	}
	if err := d.recover(ctx); err != nil {
		return err
	}
	if err := d.manualKill(ctx); err != nil {
		return err
	}
	return d.release(ctx)
}

// autoKill makes the spam filter slow and waits for its breaker to trip,
// in status, while billing's latency holds.
func (d *demo) autoKill(ctx context.Context) error {
	d.p.step(5, "making the spam filter slow: %s for each order and each check (its kill switch trips past a 100ms reply p99)", d.o.slowDelay)
	if err := d.slow(d.o.slowDelay); err != nil {
		return err
	}
	slowAt := now()
	d.mark(slowAt, "spam filter slow", fmt.Sprintf("%s per message and per check", d.o.slowDelay))
	if err := d.phase(phaseOverload); err != nil {
		return err
	}
	var killed string
	var trippedAt time.Time
	err := d.waitFor("the spam filter's automatic kill switch in status", func() (bool, string) {
		s, err := d.subscription(ctx, spamFilter)
		if err != nil {
			return false, err.Error()
		}
		// Status keeps whole seconds: a trip in the second the spam
		// filter became slow is one it caused.
		pk := podKill(s, spamFilter)
		if !strings.HasPrefix(s.Status.Killed, "Auto") || pk == nil || pk.Since.Time.Before(slowAt.Truncate(time.Second)) {
			return false, fmt.Sprintf("Subscription spam-filter is killed %q", s.Status.Killed)
		}
		killed, trippedAt = s.Status.Killed, pk.Since.Time
		return true, ""
	})
	if err != nil {
		return err
	}
	d.mark(trippedAt, "breaker tripped", "in spam-filter's sidecar, by status.pods[].killed.since")
	d.mark(now(), "automatic kill seen in status", "KILLED "+killed)
	d.res.AutoKilled = killed
	if _, err := d.tools.kubectlShow(d.p, "get", "subscriptions", "-n", namespace); err != nil {
		return err
	}
	d.p.say("keeping the spam filter slow for %s: on each trial after the cooldown it trips again; billing carries on", d.o.overload)
	if err := d.hold(d.o.overload); err != nil {
		return err
	}
	s, err := d.subscription(ctx, billing)
	if err != nil {
		return err
	}
	if s.Status.Aggregate != nil {
		d.res.BillingP99DuringOverload = s.Status.Aggregate.P99.Duration
	}
	if _, err := d.tools.kubectlShow(d.p, "get", "subscriptions", "-n", namespace); err != nil {
		return err
	}
	return d.showPhases()
}

// recover makes the spam filter fast again and waits until its breaker
// closed after a healthy trial, and orders-api's checks are answered.
func (d *demo) recover(ctx context.Context) error {
	d.p.say("the spam filter is fast again: its breaker goes on trial after the cooldown and closes after a healthy window")
	if err := d.slow(0); err != nil {
		return err
	}
	fast := now()
	d.mark(fast, "spam filter fast again", "")
	if err := d.phase(phaseRecovery); err != nil {
		return err
	}
	spam := d.pods[spamFilter]
	err := d.waitFor("the spam filter's breaker to close", func() (bool, string) {
		m, err := benchharness.Scrape(spam.MetricsURL)
		if err != nil {
			return false, err.Error()
		}
		closed, _ := metric(m, "weighstation_sidecar_kill_switch_state", `state="closed"`)
		if closed != 1 {
			return false, "the spam filter's breaker is not closed"
		}
		if !d.answeredSince(fast) {
			return false, "orders-api's checks are not answered again"
		}
		return true, ""
	})
	if err != nil {
		return err
	}
	d.mark(now(), "breaker closed", "a healthy trial; orders-api's checks answered again")
	_ = ctx
	return nil
}

// manualKill engages the kill switch with kubectl patch, and measures how
// long it took to stop the spam filter.
func (d *demo) manualKill(ctx context.Context) error {
	d.p.say("engaging the spam filter's kill switch by hand")
	patch := []string{"patch", "subscription", spamFilter, "-n", namespace, "--type=merge",
		"-p", `{"spec":{"killSwitch":{"engaged":true,"reason":"demo: taken out by hand"}}}`}
	patched := now()
	if _, err := d.tools.kubectlShow(d.p, patch...); err != nil {
		return err
	}
	d.mark(patched, "kubectl patch: kill switch engaged", "")
	if err := d.phase(phaseKilled); err != nil {
		return err
	}
	var first demoapi.Change
	err := d.waitFor("orders-api's checks to fail fast", func() (bool, string) {
		var rq demoapi.Requests
		if err := d.apps[ordersAPI].get(demoapi.PathRequests, &rq); err != nil {
			return false, err.Error()
		}
		for _, c := range rq.Changes {
			if c.Outcome == demoapi.NoResponders && c.At.After(patched) {
				first = c
				return true, ""
			}
		}
		return false, "orders-api's checks still get answers"
	})
	if err != nil {
		return err
	}
	d.res.FailFast, d.res.PatchToEff = first.Took, first.At.Sub(patched)
	d.mark(first.At, "checks fail fast", fmt.Sprintf("no responders in %s, %s after the patch", first.Took.Round(10*time.Microsecond), d.res.PatchToEff.Round(time.Millisecond)))
	err = d.waitFor("the kill switch's propagation in status", func() (bool, string) {
		s, err := d.subscription(ctx, spamFilter)
		if err != nil {
			return false, err.Error()
		}
		c := s.Status.Config
		if s.Status.Killed != "Manual" || c == nil || c.PropagationTime == nil || c.ObservedTime == nil || c.ObservedTime.Time.Before(patched.Truncate(time.Second)) {
			return false, fmt.Sprintf("Subscription spam-filter is killed %q, its propagation not yet in status", s.Status.Killed)
		}
		d.res.ManualKilled, d.res.Propagation = s.Status.Killed, c.PropagationTime.Duration
		return true, ""
	})
	if err != nil {
		return err
	}
	d.p.say("propagation: %s from the operator serving the change to the last sidecar's ACK (status.config.propagationTime); %s from the patch to orders-api's first fast failure",
		d.res.Propagation, d.res.PatchToEff.Round(time.Millisecond))
	return d.noDeliveries()
}

// noDeliveries shows that the spam filter's sidecar delivers nothing while
// the kill switch is engaged, although the load goes on (billing gets it).
func (d *demo) noDeliveries() error {
	spam0, bill0, err := d.deliveries()
	if err != nil {
		return err
	}
	d.p.say("holding the kill switch for %s", d.o.kill)
	if err := d.hold(d.o.kill); err != nil {
		return err
	}
	spam1, bill1, err := d.deliveries()
	if err != nil {
		return err
	}
	d.res.SpamDeliveredWhileKilled, d.res.BillingWhileKilled = spam1-spam0, bill1-bill0
	d.p.say("while engaged: spam-filter's sidecar delivered %d orders, billing received %d", d.res.SpamDeliveredWhileKilled, d.res.BillingWhileKilled)
	if d.res.SpamDeliveredWhileKilled != 0 || d.res.BillingWhileKilled == 0 {
		return fmt.Errorf("with the kill switch engaged the spam filter got %d orders and billing %d: want none and some", d.res.SpamDeliveredWhileKilled, d.res.BillingWhileKilled)
	}
	_, err = d.tools.kubectlShow(d.p, "get", "subscriptions", "-n", namespace)
	return err
}

// deliveries are what the spam filter's sidecar delivered so far and what
// billing received.
func (d *demo) deliveries() (spam, bill int64, err error) {
	m, err := benchharness.Scrape(d.pods[spamFilter].MetricsURL)
	if err != nil {
		return 0, 0, err
	}
	delivered, ok := metric(m, "weighstation_sidecar_delivered_total", spamFilter)
	if !ok {
		return 0, 0, fmt.Errorf("spam-filter's sidecar has no delivered count for its Subscription")
	}
	st, err := d.apps[billing].stats()
	return int64(delivered), st.Received, err
}

// release disengages the kill switch and waits for the checks to be
// answered again.
func (d *demo) release(context.Context) error {
	patch := []string{"patch", "subscription", spamFilter, "-n", namespace, "--type=merge", "-p", `{"spec":{"killSwitch":{"engaged":false}}}`}
	released := now()
	d.released = released
	if _, err := d.tools.kubectlShow(d.p, patch...); err != nil {
		return err
	}
	d.mark(released, "kubectl patch: kill switch released", "")
	if err := d.phase(phaseAfter); err != nil {
		return err
	}
	err := d.waitFor("orders-api's checks answered again", func() (bool, string) {
		if !d.answeredSince(released) {
			return false, "orders-api's checks are not answered yet"
		}
		return true, ""
	})
	if err != nil {
		return err
	}
	d.mark(now(), "checks answered again", "")
	return nil
}

// answeredSince says whether a check orders-api sent after t was answered.
func (d *demo) answeredSince(t time.Time) bool {
	var rq demoapi.Requests
	if err := d.apps[ordersAPI].get(demoapi.PathRequests, &rq); err != nil {
		return false
	}
	return rq.Last[demoapi.Answered].After(t)
}

// slow sets the spam filter's delay.
func (d *demo) slow(delay time.Duration) error {
	return d.apps[spamFilter].post(demoapi.PathSlow, url.Values{"delay": {delay.String()}}, nil)
}
