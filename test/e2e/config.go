package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ReleaseName is the Helm release the stories install. With it the
// chart's fullname is "weighstation", which the names below assume.
const ReleaseName = "weighstation"

// Config is the stories' environment (README.md lists every variable).
type Config struct {
	// Kubeconfig is $KUBECONFIG, which kubectl, helm and client-go read.
	Kubeconfig string
	Kubectl    string
	Helm       string
	// Chart is the chart's directory.
	Chart string

	ImageRepository string
	ImageTag        string
	// PullPolicy is the chart's image.pullPolicy and the test pods'.
	PullPolicy string
	DemoImage  string
	ProbeImage string

	// Destructive allows deleting the operator's and the brokers' pods and
	// killing the leader: on a node of its own, not on a shared cluster.
	Destructive bool
	// KillContainerCmd is a shell command with {id} for a container ID
	// that kills that container with SIGKILL on its node.
	KillContainerCmd string
	// LogDir holds the node components' *.log files, printed on failure.
	LogDir string

	ReleaseNamespace string
	AppNamespace     string

	// PodAccess is how the stories reach pods' HTTP ports: "direct" (the
	// pod IP: inside the cluster's network), "proxy" (the apiserver's pod
	// proxy) or "auto" (direct when a first try works).
	PodAccess string
	// EnforceTargets fails a step whose measurement misses its target;
	// false only reports it.
	EnforceTargets bool
	// Keep leaves the release and the namespaces in place at the end.
	Keep bool
}

// Defaults of the optional variables.
const (
	DefaultPullPolicy       = "Never"
	DefaultDemoImage        = "weighstation.local/demo-apps:e2e"
	DefaultProbeImage       = "weighstation.local/e2e-probe:e2e"
	DefaultReleaseNamespace = "weighstation-system"
	DefaultAppNamespace     = "e2e-apps"
	// KillIDPlaceholder is replaced by the container ID in
	// E2E_KILL_CONTAINER_CMD.
	KillIDPlaceholder = "{id}"
)

// Environment is what LoadConfig reads the process's surroundings with;
// tests give their own.
type Environment struct {
	Getenv   func(string) string
	LookPath func(string) (string, error)
	// Dir is the working directory, where the chart is looked for.
	Dir string
	// IsChart reports whether dir holds a chart (a Chart.yaml).
	IsChart func(dir string) bool
}

// OSEnvironment is the process's own.
func OSEnvironment() (Environment, error) {
	wd, err := os.Getwd()
	if err != nil {
		return Environment{}, fmt.Errorf("the working directory: %w", err)
	}
	return Environment{Getenv: os.Getenv, LookPath: exec.LookPath, Dir: wd, IsChart: isChartDir}, nil
}

func isChartDir(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, "Chart.yaml"))
	return err == nil && st.Mode().IsRegular()
}

// LoadConfig reads the E2E_* variables and KUBECONFIG, with their
// defaults, and reports every problem at once.
func LoadConfig(env Environment) (Config, error) {
	get := func(name, def string) string {
		if v := strings.TrimSpace(env.Getenv(name)); v != "" {
			return v
		}
		return def
	}
	var errs []error
	c := Config{
		Kubeconfig:       get("KUBECONFIG", ""),
		ImageRepository:  get("E2E_IMAGE_REPOSITORY", ""),
		ImageTag:         get("E2E_IMAGE_TAG", ""),
		PullPolicy:       get("E2E_PULL_POLICY", DefaultPullPolicy),
		DemoImage:        get("E2E_DEMO_IMAGE", DefaultDemoImage),
		ProbeImage:       get("E2E_PROBE_IMAGE", DefaultProbeImage),
		KillContainerCmd: get("E2E_KILL_CONTAINER_CMD", ""),
		LogDir:           get("E2E_LOGDIR", ""),
		ReleaseNamespace: get("E2E_RELEASE_NAMESPACE", DefaultReleaseNamespace),
		AppNamespace:     get("E2E_APP_NAMESPACE", DefaultAppNamespace),
		PodAccess:        get("E2E_POD_ACCESS", "auto"),
	}
	if c.Kubeconfig == "" {
		errs = append(errs, errors.New("KUBECONFIG is required: the cluster's kubeconfig file"))
	}
	if c.ImageRepository == "" || c.ImageTag == "" {
		errs = append(errs, errors.New("E2E_IMAGE_REPOSITORY and E2E_IMAGE_TAG are required: the weighstation image the chart runs (already on the node with E2E_PULL_POLICY=Never)"))
	}
	var err error
	if c.Kubectl, err = binary(env, "E2E_KUBECTL", "kubectl"); err != nil {
		errs = append(errs, err)
	}
	if c.Helm, err = binary(env, "E2E_HELM", "helm"); err != nil {
		errs = append(errs, err)
	}
	if c.Chart, err = findChart(env, get("E2E_CHART", "")); err != nil {
		errs = append(errs, err)
	}
	switch c.PullPolicy {
	case "Always", "IfNotPresent", "Never":
	default:
		errs = append(errs, fmt.Errorf("E2E_PULL_POLICY must be Always, IfNotPresent or Never, got %q", c.PullPolicy))
	}
	for name, v := range map[string]*bool{"E2E_DESTRUCTIVE": &c.Destructive, "E2E_KEEP": &c.Keep} {
		if *v, err = boolVar(name, get(name, "false")); err != nil {
			errs = append(errs, err)
		}
	}
	switch targets := get("E2E_TARGETS", "enforce"); targets {
	case "enforce", "report":
		c.EnforceTargets = targets == "enforce"
	default:
		errs = append(errs, fmt.Errorf("E2E_TARGETS must be enforce or report, got %q", targets))
	}
	switch c.PodAccess {
	case "auto", "direct", "proxy":
	default:
		errs = append(errs, fmt.Errorf("E2E_POD_ACCESS must be auto, direct or proxy, got %q", c.PodAccess))
	}
	for name, ns := range map[string]string{"E2E_RELEASE_NAMESPACE": c.ReleaseNamespace, "E2E_APP_NAMESPACE": c.AppNamespace} {
		if problems := validation.IsDNS1123Label(ns); len(problems) > 0 {
			errs = append(errs, fmt.Errorf("%s %q: %s", name, ns, strings.Join(problems, "; ")))
		}
	}
	if c.ReleaseNamespace == c.AppNamespace || c.AppNamespace == "kube-system" {
		// The webhook never injects in the release's namespace or kube-system.
		errs = append(errs, fmt.Errorf("E2E_APP_NAMESPACE (%q) must differ from E2E_RELEASE_NAMESPACE and kube-system: the webhook injects neither", c.AppNamespace))
	}
	if c.PullPolicy == "Never" && (c.ImageTag == "latest") {
		// The operator sets no pull policy on the sidecar it injects
		// (controllers/webhook/inject.go), so Kubernetes defaults it to
		// Always for :latest, which a node without a registry cannot do.
		errs = append(errs, errors.New("E2E_IMAGE_TAG must not be latest with E2E_PULL_POLICY=Never: the injected sidecar's pull policy defaults to Always for :latest"))
	}
	if c.KillContainerCmd != "" && !strings.Contains(c.KillContainerCmd, KillIDPlaceholder) {
		errs = append(errs, fmt.Errorf("E2E_KILL_CONTAINER_CMD must contain %s, where the container ID goes: %q", KillIDPlaceholder, c.KillContainerCmd))
	}
	return c, errors.Join(errs...)
}

func boolVar(name, v string) (bool, error) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s must be true or false, got %q", name, v)
	}
	return b, nil
}

// binary is the variable's path, or name found on PATH.
func binary(env Environment, variable, name string) (string, error) {
	if v := strings.TrimSpace(env.Getenv(variable)); v != "" {
		return v, nil
	}
	p, err := env.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s is unset and %s is not on PATH: %w", variable, name, err)
	}
	return p, nil
}

// findChart returns E2E_CHART, which must be a chart, or else the first
// charts/weighstation found in the working directory or one of its
// parents: the test binary runs from wherever it was copied, `go test`
// from this package's directory (../../charts/weighstation).
func findChart(env Environment, explicit string) (string, error) {
	if explicit != "" {
		if !env.IsChart(explicit) {
			return "", fmt.Errorf("E2E_CHART %q has no Chart.yaml", explicit)
		}
		return explicit, nil
	}
	var tried []string
	for dir := env.Dir; ; {
		candidate := filepath.Join(dir, "charts", "weighstation")
		if env.IsChart(candidate) {
			return candidate, nil
		}
		tried = append(tried, candidate)
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", fmt.Errorf("E2E_CHART is unset and no charts/weighstation was found in %s or above (tried %s); set it to the chart's directory", env.Dir, strings.Join(tried, ", "))
}
