package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/weighstation/weighstation/internal/proctest"
)

// TestDemoShort runs `make demo`'s seven steps with short load (what
// `go run ./demo -short` does), so that the demo cannot silently
// break: each step must produce its outcome, and the report its plots.
func TestDemoShort(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run `make test`, which builds the apiserver, kubectl and helm (hack/setup-envtest.sh)")
	}
	ctrllog.SetLogger(logr.Discard())
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	o := defaultOptions()
	o.shorten()
	o.bin = build(t, root, dir, "weighstation", "./cmd/weighstation")
	build(t, root, dir, "weighstation-sidecar", "./cmd/weighstation-sidecar") // beside it, where the demo looks
	o.apps = build(t, root, dir, "demo-apps", "./demo/apps")
	o.kubectl, o.helm = filepath.Join(root, "bin", "kubectl"), filepath.Join(root, "bin", "helm")
	o.chart, o.manifests, o.out = filepath.Join(root, "charts", "weighstation"), filepath.Join(root, "demo", "manifests"), dir
	for _, tool := range []string{o.kubectl, o.helm} {
		if _, err := os.Stat(tool); err != nil {
			t.Fatalf("%v: run `make envtest` (hack/setup-envtest.sh links kubectl and helm into bin/)", err)
		}
	}

	out := &proctest.LockedBuffer{}
	start := time.Now()
	res, err := run(o, newProgress(out, start))
	t.Logf("the demo's output (%s):\n%s", time.Since(start).Round(time.Second), out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"step 1/7", "step 2/7", "step 3/7", "step 4/7", "step 5/7", "step 6/7", "step 7/7", "$ kubectl get topics,subscriptions", "$ kubectl patch subscription spam-filter",
		// The pods go through the webhook, and their sidecars run from
		// what it injected.
		"$ kubectl get pod orders-api -n demo -o yaml", "weighstation.io/injected:", "name: weighstation-sidecar", "restartPolicy: Always",
		"the injected sidecar of orders-api, as the pod runner ran it", "-identity-token-file=", "-operator-server-name="} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output has no %q", want)
		}
	}
	if !res.StatusFilled {
		t.Error("status was never filled from the sidecars' reports")
	}
	if !strings.HasPrefix(res.AutoKilled, "Auto") {
		t.Errorf("the automatic kill switch shows KILLED %q, want Auto ...", res.AutoKilled)
	}
	if res.ManualKilled != "Manual" || res.Propagation <= 0 {
		t.Errorf("the manual kill switch shows KILLED %q after a propagation of %s, want Manual after a positive one", res.ManualKilled, res.Propagation)
	}
	// Fast: no responders from the broker, not a timeout (500 ms).
	if res.FailFast <= 0 || res.FailFast > 250*time.Millisecond {
		t.Errorf("with the kill switch engaged a check failed in %s, want fast", res.FailFast)
	}
	if res.SpamDeliveredWhileKilled != 0 || res.BillingWhileKilled == 0 {
		t.Errorf("while killed the spam filter got %d orders and billing %d, want none and some", res.SpamDeliveredWhileKilled, res.BillingWhileKilled)
	}
	if res.RefusedSize < 1 || res.RefusedRate < exportRefusedAtLeast || !strings.Contains(res.SizeRefusal, "maxMessageBytes") || !strings.Contains(res.RateRefusal, "quota") {
		t.Errorf("refusals: %d for size (%q), %d for rate (%q)", res.RefusedSize, res.SizeRefusal, res.RefusedRate, res.RateRefusal)
	}
	page, err := os.ReadFile(res.Report)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range append([]string{"<svg", "nines", "kubectl patch: kill switch engaged"}, phaseBefore, phaseOverload, phaseKilled, phaseAfter) {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("the report has no %q", want)
		}
	}
}

// build builds a package of the module into dir.
func build(t *testing.T, root, dir, name, pkg string) string {
	t.Helper()
	bin := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, out)
	}
	return bin
}
