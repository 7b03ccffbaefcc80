//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"runtime/debug"
	"testing"
	"time"

	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

// world is what the stories share: the cluster, what earlier steps found
// (the lease duration, when the stream began to flow), and the windows in
// which a fault may lose messages.
type world struct {
	cfg Config
	c   *cluster
	m   Manifests

	installed, uninstalled bool
	// ownReleaseNamespace: the install created the release's namespace,
	// so the cleanup may delete it.
	ownReleaseNamespace bool
	// ownAppNamespace: the applications' namespace is the stories' (absent
	// before, or left by an earlier run), so the cleanup may delete it.
	ownAppNamespace bool
	leaseDuration   time.Duration
	// flowSince is when the stream was first seen flowing: losses count
	// from then.
	flowSince time.Time
	// windows are the spans in which losses are expected (a fault and its
	// recovery), reported but not failed.
	windows []probestats.Window
}

// step is one story: it needs the steps named in needs to have passed.
type step struct {
	name        string
	needs       []string
	destructive bool // deletes or kills the release's own pods
	run         func(s *stepRun)
}

// stepRun is a step in progress: its test, its result, and the world.
type stepRun struct {
	*world
	t      *testing.T
	ctx    context.Context
	result *StepResult
	// suspects are pods whose logs the diagnostics print if the step
	// fails, beside the ones that are not Ready.
	suspects []string
}

// fatalf fails the step with a reason the summary shows.
func (s *stepRun) fatalf(format string, args ...any) {
	s.t.Helper()
	s.fail(fmt.Sprintf(format, args...))
	s.t.FailNow()
}

// errorf fails the step and goes on.
func (s *stepRun) errorf(format string, args ...any) {
	s.t.Helper()
	s.fail(fmt.Sprintf(format, args...))
}

func (s *stepRun) fail(msg string) {
	s.t.Helper()
	if s.result.Reason == "" {
		s.result.Reason = msg
	}
	say("FAIL: %s", msg)
	s.t.Error(msg)
}

// skipf skips the step, saying why.
func (s *stepRun) skipf(format string, args ...any) {
	s.t.Helper()
	s.result.Reason = fmt.Sprintf(format, args...)
	s.t.Skip(s.result.Reason)
}

// note records a finding of the step.
func (s *stepRun) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.result.Notes = append(s.result.Notes, msg)
	say("%s", msg)
}

// measure records a timing; past its target (when it has one) it fails
// the step, unless E2E_TARGETS=report.
func (s *stepRun) measure(name string, value, target time.Duration) {
	s.t.Helper()
	m := Measurement{Name: name, Value: value, Target: target}
	s.result.Measurements = append(s.result.Measurements, m)
	say("measured: %s", m)
	if !m.Met() {
		if s.cfg.EnforceTargets {
			s.errorf("%s took %s, over its target of %s", name, roundDuration(value), target)
		} else {
			s.note("target missed (E2E_TARGETS=report): %s", m)
		}
	}
}

// TestStories runs the stories in order. Each is a subtest; a failed
// step fails the test, and the steps that need it are skipped, saying
// why. The end prints every step's outcome and timing against its target.
func TestStories(t *testing.T) {
	env, err := OSEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(env)
	if err != nil {
		t.Fatalf("the stories' environment (see test/e2e/README.md):\n%v", err)
	}
	c, err := newCluster(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{cfg: cfg, c: c, m: NewManifests(cfg), leaseDuration: DefaultLeaseDuration}
	say("weighstation end to end: chart %s, image %s:%s (pull %s), release %s in %s, applications in %s, destructive %v",
		cfg.Chart, cfg.ImageRepository, cfg.ImageTag, cfg.PullPolicy, ReleaseName, cfg.ReleaseNamespace, cfg.AppNamespace, cfg.Destructive)

	var results []StepResult
	passed := map[string]bool{}
	defer func() {
		fmt.Println()
		fmt.Println("SUMMARY")
		fmt.Print(Summary(results))
		w.cleanup()
	}()
	for _, st := range stories() {
		t.Run(st.name, func(t *testing.T) {
			runStep(t, w, st, passed, func(r StepResult) { results = append(results, r) })
		})
	}
}

// stories are the steps, in the order they run.
func stories() []step {
	return []step{
		{name: "1-install", run: stepInstall},
		{name: "2-apps", needs: []string{"1-install"}, run: stepApps},
		{name: "3a-policy-status", needs: []string{"2-apps"}, run: stepPolicyStatus},
		{name: "3b-kill-switch", needs: []string{"2-apps"}, run: stepKillSwitch},
		{name: "4a-leader-delete", needs: []string{"3b-kill-switch"}, destructive: true, run: stepLeaderDelete},
		{name: "4b-leader-sigkill", needs: []string{"3b-kill-switch"}, destructive: true, run: stepLeaderSigkill},
		{name: "4c-broker-delete", needs: []string{"2-apps"}, destructive: true, run: stepBrokerDelete},
		{name: "4d-pod-delete-revocation", needs: []string{"2-apps"}, run: stepRevocation},
		{name: "4e-helm-upgrade", needs: []string{"2-apps"}, run: stepUpgrade},
		{name: "4f-subscription-delete", needs: []string{"2-apps"}, run: stepSubscriptionDelete},
		{name: "6-observability", needs: []string{"2-apps"}, run: stepObservability},
		{name: "7-networkpolicy", needs: []string{"2-apps"}, run: stepNetworkPolicy},
		{name: "5-uninstall", needs: []string{"1-install"}, run: stepUninstall},
	}
}

// runStep runs one step and records its result, also when the step ends
// by t.FailNow or t.Skip (runtime.Goexit: only deferred calls run).
func runStep(t *testing.T, w *world, st step, passed map[string]bool, record func(StepResult)) {
	res := StepResult{Name: st.name}
	s := &stepRun{world: w, t: t, ctx: t.Context(), result: &res}
	start := time.Now()
	say("STEP %s: starting", st.name)
	defer func() {
		// A bug in a step fails that step, not the whole run.
		if r := recover(); r != nil {
			say("panic in %s:\n%s", st.name, debug.Stack())
			s.fail(fmt.Sprintf("panic: %v", r))
		}
		res.Duration = time.Since(start)
		switch {
		case t.Failed():
			res.Outcome = Failed
			w.diagnose(st.name, s.suspects)
		case t.Skipped():
			res.Outcome = Skipped
		default:
			res.Outcome = Passed
			passed[st.name] = true
		}
		fmt.Println(StepLine(res))
		record(res)
	}()
	for _, need := range st.needs {
		if !passed[need] {
			s.skipf("needs %s, which did not pass", need)
		}
	}
	if st.destructive && !w.cfg.Destructive {
		s.skipf("deletes the release's own pods: E2E_DESTRUCTIVE is not true")
	}
	st.run(s)
}

// cleanup removes what the stories created, unless E2E_KEEP is set: the
// applications' namespace, the release if the uninstall step did not run,
// and the release's namespace. The CRDs stay (the chart keeps them).
func (w *world) cleanup() {
	if w.cfg.Keep {
		say("E2E_KEEP: leaving the release %s and the namespaces %s and %s", ReleaseName, w.cfg.ReleaseNamespace, w.cfg.AppNamespace)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	say("cleaning up")
	if !w.ownAppNamespace {
		return // the preflight refused to run here: nothing of the stories' to remove
	}
	if _, err := command(ctx, 3*time.Minute, "", w.cfg.Kubectl, "delete", "namespace", w.cfg.AppNamespace, "--ignore-not-found", "--wait=true", "--timeout=150s"); err != nil {
		say("  %v", err)
	}
	if w.installed && !w.uninstalled {
		if _, err := w.c.helm(ctx, 4*time.Minute, "uninstall", ReleaseName, "-n", w.cfg.ReleaseNamespace, "--wait", "--timeout", "3m"); err != nil {
			say("  %v", err)
		}
	}
	if w.ownReleaseNamespace {
		if _, err := command(ctx, 3*time.Minute, "", w.cfg.Kubectl, "delete", "namespace", w.cfg.ReleaseNamespace, "--ignore-not-found", "--wait=true", "--timeout=150s"); err != nil {
			say("  %v", err)
		}
	}
}
